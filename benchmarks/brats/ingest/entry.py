"""What the BraTS plug-in offers the client for DICOM and native-NIfTI studies
(``plugin.ingestion``): the client speaks to it through a protocol of its own and never imports
this package by name."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ..contract import BratsContract
from .errors import IngestError
from .pipeline import IngestOptions, IngestReport, Source, accept, ingest, summary
from .register import DECLARED, CommandBrainExtractor
from .sequences import DEFAULT_MAPPING, load_mapping

__all__ = ["Ingestion"]


class Ingestion:
    """Ingestion under one contract, with the reference sequence the plug-in names."""

    def __init__(self, contract: BratsContract, reference: str = "t1c") -> None:
        self.contract = contract
        self.reference = reference

    @property
    def declared(self) -> dict[str, str]:
        """The preparation this plug-in performs on studies (recorded in ``ingest.json``)."""
        return {**{k: str(v) for k, v in DECLARED.items()}, "reference": self.reference}

    def write_mapping(self, path: Path) -> None:
        """Write the default sequence mapping at ``path`` (new) for the hospital to edit."""
        if path.exists() or path.is_symlink():
            raise IngestError(f"{path} already exists; choose a new path")
        path.write_bytes(DEFAULT_MAPPING.to_json())

    def ingest(self, studies: Path, work: Path, *, source: str = "dicom",
               mapping_file: Path | None = None,
               progress: Callable[[int, int], None] | None = None,
               brain_extractor: Sequence[str] | None = None) -> IngestReport:
        """Ingest the studies under ``studies`` into the work folder ``work`` (resuming);
        ``brain_extractor`` is the hospital's own extractor command (``{input}`` and
        ``{output}`` in it), the built-in one by default."""
        if source not in ("dicom", "nifti"):
            raise IngestError(f"the source must be dicom or nifti, received {source!r}")
        kind: Source = "dicom" if source == "dicom" else "nifti"
        mapping = DEFAULT_MAPPING if mapping_file is None else load_mapping(mapping_file,
                                                                            self.contract)
        try:
            extractor = None if brain_extractor is None else CommandBrainExtractor(
                brain_extractor)
        except ValueError as exc:
            raise IngestError(str(exc)) from exc
        return ingest(studies, work, self.contract,
                      IngestOptions(source=kind, mapping=mapping, reference=self.reference,
                                    extractor=extractor),
                      progress=progress)

    def accept(self, work: Path, case_ids: Iterable[str] | None = None) -> tuple[str, ...]:
        """Accept ``case_ids`` (every ready case when None): only they appear under
        ``work/accepted``, the folder 'dataset prepare' takes."""
        chosen = tuple(case_ids) if case_ids is not None else tuple(
            case for case, review in summary(work).items() if review.status == "ready")
        return accept(work, chosen)
