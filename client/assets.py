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
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sealbench.client.errors import ConfigError
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
    from sealbench.benchmarks.brats import BratsContract
    from sealbench.benchmarks.brats.prepare import PreparationReport
    from sealbench.benchmarks.interface import Benchmark, Prepared

__all__ = [
    "GRID_STATISTIC",
    "RECIPIENT_STATISTIC",
    "SIZES",
    "SIZE_DEFINITIONS",
    "check_prepared_for",
    "contract_for",
    "dataset_registration",
    "model_registration",
    "plugin_model_registration",
    "plugin_of",
    "prepare",
    "prepare_with_plugin",
    "prepared_contract",
    "recipient_of",
    "synthesize",
]

#: Key of the recipient digest in a registered dataset's ``statistics``.
RECIPIENT_STATISTIC: Final = "result_recipient_digest"
#: Key of the dataset's grid (``{"shape": [...], "spacing_mm": [...]}``) in its ``statistics``.
GRID_STATISTIC: Final = "grid"
#: Grids of synthetic cases: the full BraTS grid, or a small one for quick tries and tests.
SIZES: Final[dict[str, tuple[int, int, int] | None]] = {"full": None, "small": (64, 64, 48)}
#: The shipped definition whose contract each size is (``benchmark create --definition``).
SIZE_DEFINITIONS: Final[dict[str, str]] = {"full": "brats", "small": "brats-small"}
_MAX_JSON: Final = 4 << 20


def contract_for(benchmark: BenchmarkPublic | None, size: str | None = None) -> BratsContract:
    """The data contract to prepare (or synthesise) for.

    With a ``benchmark``: its registered contract, grid included; a ``size`` that names another
    grid is refused (data on another grid belongs to another benchmark: ``small`` cases to one
    published from ``brats-small``). Without one: the contract of the shipped definition of
    ``size`` (``full``: brats, 240x240x155; ``small``: brats-small, 64x64x48)."""
    from pydantic import ValidationError

    from sealbench.benchmarks.brats import BratsContract
    from sealbench.benchmarks.brats.definition import shipped_definition

    if size is not None and size not in SIZES:
        raise ConfigError(f"--size must be one of {', '.join(SIZES)}, received {size!r}")
    sized = shipped_definition(SIZE_DEFINITIONS[size or "full"]).contract
    if benchmark is None:
        return sized
    try:
        contract = BratsContract.model_validate(benchmark.data_contract)
    except ValidationError as exc:
        raise ConfigError(
            f"benchmark {benchmark.id} has a data contract this client cannot read",
            hint="upgrade sealbench to the version the benchmark authority uses",
        ) from exc
    if size is not None and (sized.shape, sized.spacing_mm) != (
        contract.shape, contract.spacing_mm
    ):
        raise ConfigError(
            f"--size {size} is the grid {sized.grid_text()}, but benchmark {benchmark.id} "
            f"({benchmark.name}) takes cases on {contract.grid_text()} only",
            hint=f"leave out --size to prepare for the benchmark's grid, or prepare "
            f"{size} cases for a benchmark published from '--definition {SIZE_DEFINITIONS[size]}'",
        )
    return contract


def plugin_of(benchmark: BenchmarkPublic | None) -> Benchmark | None:
    """The plug-in that prepares data and checks models for ``benchmark`` when its data contract
    is not a BraTS grid contract (a tabular or any other plug-in's benchmark), else None: BraTS
    benchmarks keep the grid handling of :func:`contract_for` (``--size``, the 2021 layout)."""
    from pydantic import ValidationError

    from sealbench.benchmarks.brats import BratsContract
    from sealbench.client.workflows import plugin_for

    if benchmark is None:
        return None
    try:
        BratsContract.model_validate(benchmark.data_contract)
    except ValidationError:
        return plugin_for(benchmark)
    return None


def prepare_with_plugin(
    plugin: Benchmark,
    raw_dir: Path,
    out_dir: Path,
    progress: Callable[[int, int], None] | None,
    *,
    strict: bool = False,
) -> Prepared:
    """Prepare ``raw_dir`` with the benchmark's plug-in; rejected cases as with :func:`prepare`."""
    from sealbench.benchmarks.interface import PreparationError

    try:
        return plugin.prepare(raw_dir, out_dir, progress=progress, strict=strict)
    except PreparationError as exc:
        if exc.rejected:
            raise RejectedCasesError(str(exc), exc.rejected, strict=strict) from exc
        raise ConfigError(str(exc)) from exc


def plugin_model_registration(onnx: Path, name: str, version: str,
                              plugin: Benchmark) -> ModelCreate:
    """Check ``onnx`` against the plug-in's model contract, then build the registration."""
    from sealbench.benchmarks.interface import ModelContractError

    try:
        data = onnx.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {onnx}: {exc.strerror}") from exc
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


def _plugin_dataset_registration(
    prepared: Path, name: str, recipient_digest: Sha256Digest, benchmark: BenchmarkPublic,
    plugin: Benchmark,
) -> DatasetCreate:
    from sealbench.benchmarks.interface import BenchmarkError

    layout = plugin.layout
    dataset_file = prepared / layout.data_dir / layout.dataset_file
    info = _read_json(dataset_file)
    try:
        plugin.open_dataset(dataset_file.read_bytes())
    except BenchmarkError as exc:
        raise ConfigError(
            f"the dataset was not prepared under benchmark {benchmark.id}'s contract: {exc}",
            hint=f"prepare it again with 'dataset prepare --benchmark {benchmark.id}'") from exc
    statistics = _read_json(prepared / layout.data_dir / layout.statistics_file)
    return DatasetCreate(
        name=name,
        digest=prepared_digest(prepared),
        case_count=int(info.get("n_cases", 0)),
        statistics={"preparation": statistics, RECIPIENT_STATISTIC: recipient_digest},
        prepared_for_id=benchmark.id,
    )


def synthesize(
    out_dir: Path, cases: int, contract: BratsContract, *, first_seed: int = 1
) -> Iterator[str]:
    """Write ``cases`` synthetic raw cases (no patient data) into ``out_dir``; yields ids.
    The cases are written into a temporary folder beside ``out_dir``, renamed into place only
    when all are done, so an interrupted run leaves nothing that a re-run would refuse."""
    from sealbench.benchmarks.brats.synthetic import write_dataset

    if cases < 1:
        raise ConfigError("--cases must be at least 1")
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ConfigError(f"{out_dir} is not empty", hint="choose a new directory")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    try:
        yield from write_dataset(tmp, range(first_seed, first_seed + cases), contract=contract)
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
    contract: BratsContract,
    progress: Callable[[int, int], None] | None,
    *,
    strict: bool = False,
) -> PreparationReport:
    """Validate and normalise ``raw_dir`` into ``out_dir``; the report lists rejected cases."""
    from sealbench.benchmarks.brats import PreparationError
    from sealbench.benchmarks.brats.prepare import (
        CasesRejectedError,
        NoValidCasesError,
        prepare_dataset,
    )

    try:
        return prepare_dataset(raw_dir, out_dir, contract, progress, strict=strict)
    except (NoValidCasesError, CasesRejectedError) as exc:
        rejected = RejectedCasesError(str(exc), exc.rejected, strict=isinstance(
            exc, CasesRejectedError
        ))
        raise rejected from exc
    except PreparationError as exc:
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


def prepared_digest(prepared: Path) -> Sha256Digest:
    """The prepared dataset's identity: the digest of its canonical manifest."""
    from sealbench.benchmarks.brats.prepare import MANIFEST_FILE

    try:
        return Manifest.from_bytes((prepared / MANIFEST_FILE).read_bytes()).digest
    except OSError as exc:
        raise ConfigError(
            f"{prepared} has no readable {MANIFEST_FILE}",
            hint="pass the directory written by 'sealbench dataset prepare'",
        ) from exc
    except CryptoError as exc:
        raise ConfigError(f"{prepared / MANIFEST_FILE} is not a valid manifest: {exc}") from exc


def prepared_contract(prepared: Path) -> BratsContract:
    """The contract a prepared dataset states it was prepared under (its ``dataset.json``,
    covered by the manifest digest)."""
    from pydantic import ValidationError

    from sealbench.benchmarks.brats import BratsContract
    from sealbench.benchmarks.brats.cases import DATASET_FILE
    from sealbench.benchmarks.brats.prepare import DATA_DIR

    info = _read_json(prepared / DATA_DIR / DATASET_FILE)
    try:
        return BratsContract.model_validate(info.get("contract"))
    except ValidationError as exc:
        raise ConfigError(
            f"{prepared / DATA_DIR / DATASET_FILE} does not state a data contract this client "
            "reads", hint="prepare the dataset again with this version of sealbench") from exc


def check_prepared_for(stated: BratsContract, benchmark: BenchmarkPublic) -> None:
    """Refuse (:class:`ConfigError`) a dataset prepared under another contract than the
    benchmark's: another grid first (the common case: small demo cases for a full-size
    benchmark), then any other field."""
    registered = contract_for(benchmark)
    if (stated.shape, stated.spacing_mm) != (registered.shape, registered.spacing_mm):
        raise ConfigError(
            f"the dataset's cases are on the grid {stated.grid_text()}, but benchmark "
            f"{benchmark.id} ({benchmark.name}) takes cases on {registered.grid_text()} only",
            hint=f"prepare cases on {registered.grid_text()} for it ('dataset prepare "
            f"--benchmark {benchmark.id}'), or register this dataset for a benchmark of its grid",
        )
    if stated != registered:
        differing = sorted(name for name in type(stated).model_fields
                           if getattr(stated, name) != getattr(registered, name))
        raise ConfigError(
            f"the dataset was prepared under another data contract than benchmark "
            f"{benchmark.id}'s (differs in {', '.join(differing)})",
            hint=f"prepare it again with 'dataset prepare --benchmark {benchmark.id}'",
        )


def dataset_registration(
    prepared: Path, name: str, recipient_digest: Sha256Digest,
    prepared_for: BenchmarkPublic | None,
) -> DatasetCreate:
    """The registration of a prepared dataset: its manifest digest, case count, aggregate
    statistics and grid (``statistics["grid"]``, which the registry compares with the
    benchmark's contract), refused here first when ``prepared_for``'s contract differs."""
    from sealbench.benchmarks.brats.cases import DATASET_FILE, STATISTICS_FILE
    from sealbench.benchmarks.brats.prepare import DATA_DIR

    plugin = plugin_of(prepared_for)
    if plugin is not None:
        assert prepared_for is not None
        return _plugin_dataset_registration(prepared, name, recipient_digest, prepared_for,
                                            plugin)
    info = _read_json(prepared / DATA_DIR / DATASET_FILE)
    statistics = _read_json(prepared / DATA_DIR / STATISTICS_FILE)
    stated = prepared_contract(prepared)
    if prepared_for is not None:
        check_prepared_for(stated, prepared_for)
    return DatasetCreate(
        name=name,
        digest=prepared_digest(prepared),
        case_count=int(info.get("n_cases", 0)),
        statistics={"preparation": statistics, GRID_STATISTIC: stated.grid,
                    RECIPIENT_STATISTIC: recipient_digest},
        prepared_for_id=None if prepared_for is None else prepared_for.id,
    )


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


def model_registration(
    onnx: Path, name: str, version: str, contract: BratsContract
) -> ModelCreate:
    """Check ``onnx`` against ``contract`` (refusing a model that does not fit), then build the
    registration with the file's SHA-256."""
    from sealbench.benchmarks.brats import ModelContractError, check_model_contract

    try:
        data = onnx.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {onnx}: {exc.strerror}") from exc
    try:
        report = check_model_contract(data, contract)
    except ModelContractError as exc:
        raise ConfigError(
            f"{onnx.name} does not meet the benchmark's model contract: {exc}",
            hint="export the model with one [N,4,D,H,W] float input and one [N,4,D,H,W] "
            "output with dynamic spatial axes (opset 17-21)",
        ) from exc
    return ModelCreate(
        name=name,
        version=version,
        digest=sha256_file(onnx),
        io_contract={
            "input": report.input_name,
            "output": report.output_name,
            "input_channels": report.input_channels,
            "output_classes": report.output_classes,
            "opset": report.opset,
        },
    )
