"""How an ingested dataset was prepared, as the prepared dataset and the registry record it.

:func:`.pipeline.accept` writes :data:`PROVENANCE_FILE` into ``WORK/accepted/`` beside the
accepted cases; ``sealbench dataset prepare`` (:mod:`sealbench.benchmarks.brats.prepare`)
validates it and copies it into the prepared ``dataset.json`` (under ``ingestion``, so the
manifest's digest covers it), and ``sealbench dataset register`` sends it with the dataset's
statistics (``statistics.ingestion``), so the registry says how every dataset was prepared.

What it holds is the method, never a case: the declared steps (co-registration, template,
resampling, labels, brain extractor by its program's name, intensities, reference sequence), the
grid, where the studies came from (``dicom`` or ``nifti``), the versions of the libraries that
did it, and how many cases were accepted. No case id, no per-case figure, no file name, no
header value: nothing a patient could be found by. Only pydantic is imported here, so the
preparation can read it without the ``prepare`` extra.
"""

from __future__ import annotations

from importlib import metadata
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

__all__ = ["PROVENANCE_FILE", "PROVENANCE_FORMAT", "SOFTWARE", "IngestProvenance", "ProvenanceGrid",
           "software_versions"]

#: The file's name in ``WORK/accepted/`` (a file, not a case folder).
PROVENANCE_FILE: Final = "ingestion.json"
PROVENANCE_FORMAT: Final = "sealbench/ingest-provenance"
#: Largest accepted file: the document is a few hundred bytes.
MAX_PROVENANCE_BYTES: Final = 16 * 1024
#: The distributions whose versions are recorded.
SOFTWARE: Final = ("sealbench", "SimpleITK", "pydicom", "highdicom", "nilearn", "scipy", "numpy")

_Key = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,39}$")]
_Text = Annotated[str, StringConstraints(max_length=400)]
_Version = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9.+!_-]{1,40}$")]


class ProvenanceGrid(BaseModel):
    """The grid the cases were resampled onto."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    shape: tuple[int, int, int]
    spacing_mm: tuple[float, float, float]


class IngestProvenance(BaseModel):
    """How the accepted cases of one ingestion were prepared (version 1)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["sealbench/ingest-provenance"] = "sealbench/ingest-provenance"
    version: Literal[1] = 1
    source: Literal["dicom", "nifti"]
    contract_grid: ProvenanceGrid
    #: Step name -> what was done (:data:`.register.DECLARED`, the extractor, the reference).
    preparation: dict[_Key, _Text] = Field(max_length=20)
    #: Distribution -> version, for those installed (:data:`SOFTWARE`).
    software: dict[_Key, _Version] = Field(max_length=len(SOFTWARE))
    accepted_cases: int = Field(ge=1)


def software_versions() -> dict[str, str]:
    """The installed versions of :data:`SOFTWARE` (keys lower-cased), those installed only."""
    out = {}
    for name in SOFTWARE:
        try:
            out[name.lower()] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out
