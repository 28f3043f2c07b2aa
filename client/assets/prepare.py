"""The data owner's and model owner's local steps before anything is sealed: synthesise or
prepare a dataset against a benchmark's contract, and turn a prepared dataset or an ONNX model
into the registry's registration request (digests and aggregates only, never data).

A dataset's registration carries the owner's *result recipient digest* (SHA-256 of the HPKE
result public key) under ``statistics["result_recipient_digest"]``: the model owner needs it to
grant its key to the workloads that seal results to this hospital (the workload uid binds the
recipient), and the registry's dataset schema has no dedicated field for it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from pydantic import ValidationError

from sealbench.client.errors import ConfigError, Interrupted
from sealbench.crypto.digest import Sha256Digest, parse_digest, sha256_file
from sealbench.crypto.errors import CryptoError
from sealbench.crypto.manifest import Manifest
from sealbench.server.schemas import (
    BenchmarkPublic,
    DatasetCreate,
    DatasetPublic,
    ModelCreate,
    ModelPublic,
)

if TYPE_CHECKING:  # numpy, nibabel and onnxruntime load only when a command needs them
    from sealbench.benchmarks.interface import Benchmark, Grid, Prepared, PreparedLayout

__all__ = [
    "GRID_STATISTIC",
    "INGESTION_STATISTIC",
    "RECIPIENT_STATISTIC",
    "Ingestion",
    "accept_ingested",
    "check_grid",
    "dataset_registration",
    "definition_plugin",
    "demo_variant",
    "ingest_studies",
    "ingestion_of",
    "interrupted_preparation",
    "model_registration",
    "plugin_of",
    "prepare",
    "prepared_digest",
    "recipient_of",
    "stated_grid",
    "synthesize",
    "write_default_mapping",
]

#: Key of the recipient digest in a registered dataset's ``statistics``.
RECIPIENT_STATISTIC: Final = "result_recipient_digest"
#: Key of the dataset's grid (``{"shape": [...], "spacing_mm": [...]}``) in its ``statistics``.
GRID_STATISTIC: Final = "grid"
#: Key of how an ingested dataset was prepared (``dataset ingest``'s record, kept by the
#: plug-in in ``dataset.json`` under the same key) in its registration's ``statistics``.
INGESTION_STATISTIC: Final = "ingestion"
_MAX_JSON: Final = 4 << 20


def definition_plugin(definition: str) -> Benchmark:
    """The plug-in of ``definition`` (a definition an installed plug-in ships, or a definition
    file: :func:`~sealbench.client.registry.definitions.load_benchmark_definition`), bound to its
    data contract."""
    from sealbench.client.plugins import installed_plugin
    from sealbench.client.registry.definitions import load_benchmark_definition

    doc = load_benchmark_definition(definition)
    assert doc.plugin is not None  # load_benchmark_definition names it
    return installed_plugin(doc.plugin, doc.contract, where=f"definition {definition}")


def plugin_of(benchmark: BenchmarkPublic | None, definition: str | None = None) -> Benchmark:
    """The benchmark plug-in that synthesises and prepares data and checks models, bound to the
    data contract to work under: ``benchmark``'s plug-in on its registered contract, or the
    plug-in of ``definition`` (``--definition``: a shipped definition or a definition file) on
    the definition's contract. Exactly one of the two is needed: the client names no benchmark
    of its own, and a definition beside a benchmark would be a second contract."""
    from sealbench.client.plugins import plugin_for, shipped_definitions

    if benchmark is not None and definition is not None:
        raise ConfigError(
            f"--benchmark {benchmark.id} and --definition {definition} each name a contract",
            hint="pass --benchmark to work under a registered benchmark's contract, or "
            "--definition without it")
    if benchmark is not None:
        return plugin_for(benchmark)
    if definition is not None:
        return definition_plugin(definition)
    shipped = ", ".join(sorted(shipped_definitions())) or "none installed"
    raise ConfigError(
        "name the contract to work under: --benchmark ID (a registered benchmark) or "
        f"--definition NAME (shipped definitions: {shipped})",
        hint="'sealbench benchmark definition ls' lists the shipped definitions")


def demo_variant(plugin: Benchmark, variant: str | None) -> Benchmark:
    """``plugin`` itself (``variant`` None), or the demo variant of its contract called
    ``variant`` (``--variant``: BraTS offers ``small``, its 64x64x48 grid) as the plug-in
    offers it (:class:`~sealbench.benchmarks.interface.ContractVariants`)."""
    from sealbench.benchmarks.interface import ContractVariants

    if variant is None:
        return plugin
    offered = plugin.demo_variants() if isinstance(plugin, ContractVariants) else ()
    found = next((v.benchmark for v in offered if v.name == variant), None)
    if found is None:
        names = ", ".join(v.name for v in offered)
        raise ConfigError(
            f"--variant {variant}: benchmark plug-in {plugin.ref} offers "
            + (f"the demo variants {names}" if names else "no demo variants"),
            hint="leave out --variant for cases on the contract's own grid")
    return found


def synthesize(
    out_dir: Path, cases: int, plugin: Benchmark, *, first_seed: int = 1
) -> Iterator[str]:
    """Write ``cases`` synthetic raw cases (no patient data) into ``out_dir``; yields ids.
    The cases are written into a temporary folder beside ``out_dir``, renamed into place only
    when all are done, so an interrupted run leaves nothing that a re-run would refuse. The
    cases are the plug-in's demo data, under its (bound) contract."""

    if cases < 1:
        raise ConfigError("--cases must be at least 1")
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ConfigError(f"{out_dir} is not empty", hint="choose a new directory")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    try:
        yield from plugin.write_demo_dataset(tmp, cases, seed=first_seed)
        if out_dir.exists():
            out_dir.rmdir()  # empty, checked above
        tmp.rename(out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def already_registered(
    rows: Iterable[DatasetPublic | ModelPublic], digest: str, me: int
) -> str | None:
    """A warning naming every registered asset among ``rows`` with ``digest`` (the same bytes
    registered again, by the caller or by anyone), or None."""
    same = [r for r in rows if r.digest == digest]
    if not same:
        return None
    named = ", ".join(
        f"{r.id} '{r.name}' ({'yours' if r.owner_id == me else f'user {r.owner_id}'})"
        for r in same
    )
    return f"the same digest is already registered as {named}; registering it again"


class RejectedCasesError(ConfigError):
    """Raw cases failed the contract and nothing was written (all of them, or any with
    ``--strict``); ``rejected`` lists each case with its reason."""

    def __init__(self, message: str, rejected: tuple[Any, ...], *, strict: bool) -> None:
        reasons = "; ".join(f"{r.case}: {r.reason}" for r in rejected[:5])
        more = f" (and {len(rejected) - 5} more)" if len(rejected) > 5 else ""
        super().__init__(
            f"{message}; nothing was written: {reasons}{more}",
            hint="fix the cases listed (names, shapes, spacing, labels) and prepare again"
            + ("" if not strict else ", or leave out --strict to prepare the others"),
        )
        self.rejected = rejected


def prepare(
    raw_dir: Path,
    out_dir: Path,
    plugin: Benchmark,
    progress: Callable[[int, int], None] | None,
    *,
    strict: bool = False,
) -> Prepared:
    """Validate and prepare ``raw_dir`` into ``out_dir`` with the benchmark's plug-in; the
    outcome lists rejected cases (:class:`RejectedCasesError` when nothing was written because
    cases failed). Ctrl-C raises :class:`~sealbench.client.errors.Interrupted` saying what was
    kept (:func:`interrupted_preparation`)."""
    from sealbench.benchmarks.interface import PreparationError

    partial = set(_partial_folders(out_dir))
    existed = out_dir.exists() or out_dir.is_symlink()
    try:
        return plugin.prepare(raw_dir, out_dir, progress=progress, strict=strict)
    except KeyboardInterrupt:
        raise interrupted_preparation(out_dir, partial, plugin.layout.manifest_file,
                                      existed=existed) from None
    except PreparationError as exc:
        if exc.rejected:
            raise RejectedCasesError(str(exc), exc.rejected, strict=strict) from exc
        raise ConfigError(str(exc)) from exc


def _partial_folders(out_dir: Path) -> list[Path]:
    """The temporary folders a preparation into ``out_dir`` writes beside it (the plug-ins'
    convention: ``.<name>.partial-<random>``, renamed to ``out_dir`` only when complete)."""
    try:
        return sorted(out_dir.parent.glob(f".{out_dir.name}.partial-*"))
    except OSError:
        return []


def interrupted_preparation(out_dir: Path, before: set[Path],
                            manifest_file: str = "manifest.json", *,
                            existed: bool = False) -> Interrupted:
    """What a preparation into ``out_dir`` stopped by Ctrl-C kept: nothing (the plug-in removes
    its temporary folder), or the complete dataset when it was renamed into place just before.
    What a plug-in that does not clean up left is removed here: its temporary folders
    (``before``: those that were there already, from another preparation, are left alone) and
    an ``out_dir`` it wrote directly without finishing (unless ``existed`` before)."""
    left = [p for p in _partial_folders(out_dir) if p not in before]
    for folder in left:
        shutil.rmtree(folder, ignore_errors=True)
    if existed:
        return Interrupted(f"interrupted: {out_dir} existed before, so nothing in it was removed; "
                           "check what it holds", hint="prepare into a new folder")
    complete = out_dir.is_dir() and (out_dir / manifest_file).exists()
    if not complete and out_dir.is_dir() and not out_dir.is_symlink():
        shutil.rmtree(out_dir, ignore_errors=True)
    if complete:
        return Interrupted(
            f"interrupted as the preparation finished: {out_dir} is complete",
            hint=f"register it: sealbench dataset register {out_dir} --name NAME")
    return Interrupted(
        f"interrupted: nothing was written to {out_dir} (the partial preparation was removed)",
        hint="run the same command again to prepare the cases from the start")


_INGEST_EXTRA = "DICOM ingestion needs the 'prepare' extra: pip install 'sealbench[prepare]'"


class IngestionReport(Protocol):
    """What an ingestion run returns: a pydantic model whose ``cases`` are the reviews."""

    def model_dump(self, *, mode: str = ...) -> dict[str, Any]: ...


@runtime_checkable
class Ingestion(Protocol):
    """A plug-in's ingestion of hospital studies (DICOM or native NIfTI) into its raw layout
    (the BraTS plug-ins': ``plugin.ingestion``)."""

    def write_mapping(self, path: Path) -> None: ...

    def ingest(self, studies: Path, work: Path, *, source: str = ...,
               mapping_file: Path | None = ...,
               progress: Callable[[int, int], None] | None = ...,
               brain_extractor: Sequence[str] | None = ...) -> IngestionReport: ...

    def accept(self, work: Path, case_ids: Iterable[str] | None = ...) -> tuple[str, ...]: ...


def ingestion_of(plugin: Benchmark) -> Ingestion:
    """The plug-in's ingestion, or :class:`ConfigError` when it has none or its extra is not
    installed."""
    try:
        found = getattr(plugin, "ingestion", None)
    except ImportError as exc:
        raise ConfigError(_INGEST_EXTRA) from exc
    if not isinstance(found, Ingestion):
        raise ConfigError("this benchmark's plug-in does not take DICOM studies; prepare its raw "
                          "layout with 'dataset prepare'")
    return found


def write_default_mapping(plugin: Benchmark, path: Path) -> None:
    """Write the plug-in's default sequence mapping at ``path`` (new) for the hospital to
    edit."""
    from sealbench.benchmarks.interface import BenchmarkError

    try:
        ingestion_of(plugin).write_mapping(path)
    except BenchmarkError as exc:
        raise ConfigError(str(exc)) from exc


def ingest_studies(studies: Path, work: Path, plugin: Benchmark, *, source: str = "dicom",
                   mapping_file: Path | None = None,
                   progress: Callable[[int, int], None] | None = None,
                   brain_extractor: Sequence[str] | None = None) -> dict[str, Any]:
    """Ingest a folder of studies (one per patient: DICOM, or native NIfTI with
    ``source="nifti"``) into the work folder ``work`` under the plug-in's contract, resuming a
    run there; returns the run's summary (``ingest.json``). Nothing is accepted
    (:func:`accept_ingested`). ``brain_extractor``: the hospital's own extractor command
    (``{input}`` and ``{output}`` in it) instead of the built-in one."""
    from sealbench.benchmarks.interface import BenchmarkError

    try:
        report = ingestion_of(plugin).ingest(studies, work, source=source,
                                             mapping_file=mapping_file, progress=progress,
                                             brain_extractor=brain_extractor)
    except BenchmarkError as exc:
        raise ConfigError(str(exc)) from exc
    return report.model_dump(mode="json")


def accept_ingested(plugin: Benchmark, work: Path,
                    case_ids: Iterable[str] | None) -> tuple[str, ...]:
    """Accept ``case_ids`` (every ready case when None) of the work folder ``work``: they alone
    appear under ``work/accepted``, the folder 'dataset prepare' takes."""
    from sealbench.benchmarks.interface import BenchmarkError

    try:
        return ingestion_of(plugin).accept(work, case_ids)
    except BenchmarkError as exc:
        raise ConfigError(str(exc)) from exc


def _read_json(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"cannot read {path}: {exc.strerror}",
            hint="pass the directory written by 'sealbench dataset prepare'",
        ) from exc
    if len(raw) > _MAX_JSON:
        raise ConfigError(f"{path} is larger than {_MAX_JSON} bytes")
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} does not hold a JSON object")
    return data


def prepared_digest(prepared: Path, layout: PreparedLayout | None = None) -> Sha256Digest:
    """The prepared dataset's identity: the digest of its canonical manifest."""
    from sealbench.benchmarks.interface import PreparedLayout

    manifest_file = (layout or PreparedLayout()).manifest_file
    try:
        return Manifest.from_bytes((prepared / manifest_file).read_bytes()).digest
    except OSError as exc:
        raise ConfigError(
            f"{prepared} has no readable {manifest_file}",
            hint="pass the directory written by 'sealbench dataset prepare'",
        ) from exc
    except CryptoError as exc:
        raise ConfigError(f"{prepared / manifest_file} is not a valid manifest: {exc}") from exc


def stated_grid(dataset_info: Mapping[str, Any], plugin: Benchmark | None = None) -> Grid | None:
    """The voxel grid a prepared dataset's ``dataset.json`` states in its contract, as
    ``plugin`` reads it (:func:`~sealbench.benchmarks.interface.grid_of`); None for a plug-in
    that fixes no grid. Without a plug-in (a dataset registered for no benchmark) the contract's
    own ``shape``/``spacing_mm`` are stated as written, and the registry's plug-in reads them
    when the dataset is associated."""
    from sealbench.benchmarks.interface import Grid, GridError, grid_of

    contract = dataset_info.get("contract")
    if not isinstance(contract, Mapping):
        return None
    if plugin is not None:
        try:
            return grid_of(plugin, contract)
        except GridError as exc:
            raise ConfigError(f"the prepared dataset's contract: {exc}") from exc
    shape, spacing = contract.get("shape"), contract.get("spacing_mm")
    if not isinstance(shape, list) or not all(isinstance(n, int) for n in shape):
        return None
    if not isinstance(spacing, list) or not all(isinstance(v, int | float) for v in spacing):
        return Grid(tuple(shape))
    return Grid(tuple(shape), tuple(float(v) for v in spacing))


def grid_json(grid: Grid) -> dict[str, Any]:
    """``{"shape": [...], "spacing_mm": [...]}``: a grid as a registration states it."""
    return {"shape": list(grid.shape),
            "spacing_mm": None if grid.spacing_mm is None else list(grid.spacing_mm)}


def check_grid(stated: Grid | None, benchmark: BenchmarkPublic, plugin: Benchmark) -> None:
    """Refuse (:class:`ConfigError`) a dataset whose cases are on another grid than the one
    ``benchmark``'s data contract fixes, as its plug-in reads it (the registry refuses it too)."""
    from sealbench.benchmarks.interface import GridError, grid_of

    try:
        fixed = grid_of(plugin, benchmark.data_contract)
    except GridError as exc:
        raise ConfigError(f"benchmark {benchmark.id}'s data contract: {exc}") from exc
    if fixed is None or (stated is not None and fixed.admits(stated)):
        return
    stated_text = "no grid" if stated is None else f"the grid {stated.text()}"
    raise ConfigError(
        f"the dataset's cases are on {stated_text}, but benchmark {benchmark.id} "
        f"({benchmark.name}) takes cases on {fixed.text()} only",
        hint=f"prepare cases on {fixed.text()} for it ('dataset prepare "
        f"--benchmark {benchmark.id}'), or register this dataset for a benchmark of its grid",
    )


def _refuse_old_statistics(doc: dict[str, Any]) -> None:
    """Version 1 of the shipped plug-ins' ``statistics.json`` (``sealbench/<name>-statistics``)
    listed per-case volumes and intensities and aggregates over a few cases: a dataset prepared
    then must be prepared again before its statistics are sent anywhere."""
    form, version = doc.get("format"), doc.get("version")
    if (isinstance(form, str) and form.startswith("sealbench/") and form.endswith("-statistics")
            and version == 1):
        raise ConfigError(
            f"the prepared dataset's statistics.json is {form} version 1, which lists values of "
            "single cases; it is not sent",
            hint="prepare the dataset again with 'sealbench dataset prepare' (version 2 holds "
            "only counts and the contract's grid)")


def dataset_registration(
    prepared: Path, name: str, recipient_digest: Sha256Digest,
    prepared_for: BenchmarkPublic | None, *, budget_epsilon: float | None = None,
    budget_delta: float | None = None, budget_group: str | None = None,
    fingerprint_key: bytes | None = None,
) -> DatasetCreate:
    """The registration of a prepared dataset: its manifest digest, case count, the
    preparation's counts (never a value of a case: an old document is refused), how an ingested
    dataset was prepared (``dataset.json``'s ``ingestion``: the method, no case) and grid
    (``statistics["grid"]``, which the registry compares with the
    benchmark's contract, when the contract has one), and its lifetime privacy budget
    (``budget_*``; None: the registry's default, or the group's when joining ``budget_group``).
    With ``prepared_for``, a dataset that its plug-in does not open under that benchmark's
    contract, or on another grid, is refused here first. With ``fingerprint_key`` (the owner's:
    :func:`~sealbench.client.assets.fingerprints.fingerprint_key`) it carries one keyed
    fingerprint per case, so that cases registered before share their privacy budget."""
    from sealbench.benchmarks.interface import BenchmarkError, PreparedLayout

    plugin = None if prepared_for is None else plugin_of(prepared_for)
    layout = PreparedLayout() if plugin is None else plugin.layout
    dataset_file = prepared / layout.data_dir / layout.dataset_file
    info = _read_json(dataset_file)
    grid = stated_grid(info, plugin)
    if prepared_for is not None and plugin is not None:
        check_grid(grid, prepared_for, plugin)
        try:
            plugin.open_dataset(dataset_file.read_bytes())
        except BenchmarkError as exc:
            raise ConfigError(
                f"the dataset was prepared under another data contract than benchmark "
                f"{prepared_for.id}'s: {exc}",
                hint=f"prepare it again with 'dataset prepare --benchmark {prepared_for.id}'",
            ) from exc
    preparation = _read_json(prepared / layout.data_dir / layout.statistics_file)
    _refuse_old_statistics(preparation)
    statistics: dict[str, Any] = {"preparation": preparation, RECIPIENT_STATISTIC: recipient_digest}
    if grid is not None:
        statistics[GRID_STATISTIC] = grid_json(grid)
    if isinstance(info.get(INGESTION_STATISTIC), dict):
        statistics[INGESTION_STATISTIC] = info[INGESTION_STATISTIC]
    case_count = int(info.get("n_cases", 0))
    fingerprints = None
    if fingerprint_key is not None:
        from sealbench.client.assets.fingerprints import case_fingerprints

        fingerprints = case_fingerprints(prepared, fingerprint_key, plugin, layout,
                                         n_cases=case_count)
    try:
        return DatasetCreate(
            name=name,
            digest=prepared_digest(prepared, layout),
            case_count=case_count,
            statistics=statistics,
            prepared_for_id=None if prepared_for is None else prepared_for.id,
            budget_epsilon=budget_epsilon,
            budget_delta=budget_delta,
            budget_group=budget_group,
            case_fingerprints=fingerprints,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ()))
        raise ConfigError(f"cannot register the dataset: {field}: {first.get('msg', '')}",
                          hint="see 'sealbench dataset register --help'") from None


def recipient_of(dataset: DatasetPublic) -> Sha256Digest:
    """The result recipient digest a dataset's owner registered (see the module docstring)."""
    value = dataset.statistics.get(RECIPIENT_STATISTIC)
    try:
        return parse_digest(str(value))
    except (CryptoError, ValueError) as exc:
        raise ConfigError(
            f"dataset {dataset.id} was registered without a result recipient digest",
            hint="its owner must run 'sealbench keys init' and register the dataset again",
        ) from exc


#: How PyTorch files begin: ``torch.save`` and TorchScript write a zip archive, the legacy
#: format a pickle (protocol 2 or later).
_PYTORCH_MAGIC = (b"PK\x03\x04", b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")


def _refuse_pytorch_file(path: Path, data: bytes) -> None:
    """A PyTorch checkpoint or TorchScript file given where an ONNX model is expected is
    pointed to ``sealbench model export`` (an ONNX file never starts like these)."""
    if data.startswith(_PYTORCH_MAGIC) or path.suffix.lower() in (".pt", ".pth", ".ckpt"):
        raise ConfigError(
            f"{path.name} looks like a PyTorch file (weights or TorchScript), not an ONNX model",
            hint=f"export it first: sealbench model export model.onnx --factory "
                 f"module.path:ModelClass --weights {path} (see 'sealbench model export "
                 "--help' and docs/model-export.md)")


def model_registration(onnx: Path, name: str, version: str, plugin: Benchmark) -> ModelCreate:
    """Check ``onnx`` against the plug-in's model contract (refusing a model that does not
    fit), then build the registration with the file's SHA-256 and the I/O the check found."""
    from sealbench.benchmarks.interface import ModelContractError

    try:
        with onnx.open("rb") as handle:
            data = handle.read(plugin.model_contract.max_bytes + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {onnx}: {exc.strerror}") from exc
    _refuse_pytorch_file(onnx, data)
    try:
        report = plugin.check_model(data)
    except ModelContractError as exc:
        raise ConfigError(f"{onnx.name} does not meet the benchmark's model contract: {exc}",
                          hint=f"export {plugin.model_contract.hint()}") from exc
    io_contract = report.details or {
        "inputs": [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape)}
                   for t in report.inputs],
        "outputs": [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape)}
                    for t in report.outputs],
        "opset": report.opset}
    return ModelCreate(name=name, version=version, digest=sha256_file(onnx),
                       io_contract=io_contract)
