"""The compatibility test a participant runs before associating (MedPerf's ``medperf test run``):
a model owner runs its model on the benchmark's demo data, a hospital runs the benchmark's
reference model on its own prepared data, both on this machine in plain mode: no TEE, no key,
nothing uploaded (the registry is only read, for the benchmark and the model's digest).

The scoring is the enclave's own: the contract and metrics come from the same table of metrics
versions the enclave resolves (:func:`sealbench.enclave.rules.rules_for`), a prepared dataset's
``dataset.json`` passes the same check, and each case goes through the same steps and failure
rules as step 5 of a run (load, segment with :class:`~sealbench.benchmarks.brats.OnnxSegmenter`,
:func:`~sealbench.benchmarks.brats.score_or_fail`, :func:`~sealbench.benchmarks.brats.aggregate`).

:func:`run_checks` returns a :class:`CompatReport`: one :class:`Check` per step, in order
(``benchmark``, ``model digest`` when a registry id is known, ``model contract``,
``data contract``, ``inference``, ``metrics``, ``time per case``), each ``pass`` or ``fail``
with its reason, or ``skip`` when an earlier failure left nothing to check. The report stays
on this machine; the per-case values never leave :func:`run_checks`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from sealbench.client._compat_checks import (
    DEFAULT_MAX_SECONDS_PER_CASE,
    Check,
    CompatReport,
    ModelUnderTest,
    SegmenterFactory,
    run_checks,
)
from sealbench.client.api import RegistryClient
from sealbench.client.errors import ConfigError
from sealbench.server.schemas import BenchmarkPublic

if TYPE_CHECKING:
    from sealbench.benchmarks.brats import BratsContract

__all__ = [
    "DEFAULT_MAX_SECONDS_PER_CASE",
    "DEMO_SEED",
    "Check",
    "CompatReport",
    "ModelUnderTest",
    "SegmenterFactory",
    "check_compatibility",
    "demo_contract",
    "model_under_test",
    "run_checks",
    "write_demo_dataset",
]

#: First seed of the demo cases: the held-out range no shipped model was trained on.
DEMO_SEED: Final = 900_000


# -- what is tested ---------------------------------------------------------------------------


def _shipped(digest: str) -> tuple[str, bytes] | None:
    """The name and bytes of the model shipped with sealbench whose SHA-256 is ``digest``."""
    from sealbench.benchmarks.brats.definition import load_definition, load_model_bytes

    definition = load_definition()
    for ref in (definition.reference_model, *definition.baseline_models):
        if ref.sha256 == digest:
            return ref.name, load_model_bytes(ref)
    return None


def _read_model(path: Path) -> bytes:
    from sealbench.benchmarks.brats.model_contract import MAX_MODEL_BYTES

    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_MODEL_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    if len(data) > MAX_MODEL_BYTES:
        raise ConfigError(f"{path} is larger than the {MAX_MODEL_BYTES}-byte model cap")
    return data


def _registered(client: RegistryClient, model_id: int) -> ModelUnderTest:
    """Registry model ``model_id``, whose weights must ship with sealbench (the registry holds
    only its digest)."""
    row = client.get_model(model_id)
    shipped = _shipped(row.digest)
    if shipped is None:
        raise ConfigError(
            f"model {model_id} ({row.name} {row.version}) does not ship with sealbench, so its "
            "weights are not on this machine (the registry holds only its digest)",
            hint=f"pass its ONNX file: --model FILE --model-id {model_id}",
        )
    return ModelUnderTest(f"{row.name} {row.version} (registry model {model_id})", shipped[1],
                          model_id, row.digest)


def model_under_test(
    client: RegistryClient, benchmark: BenchmarkPublic, model: str | None, model_id: int | None
) -> ModelUnderTest:
    """``model``: an ONNX file (compared with registry model ``model_id`` when given) or a
    registry model id; None: the benchmark's reference model (the shipped BraTS reference when
    the benchmark names none)."""
    if model is not None and Path(model).is_file():
        registered = None if model_id is None else client.get_model(model_id).digest
        return ModelUnderTest(model, _read_model(Path(model)), model_id, registered)
    if model is not None and not model.isdigit():
        raise ConfigError(f"--model {model!r} is neither a file nor a registry model id")
    if model is not None and model_id is not None:
        raise ConfigError("--model-id goes with --model FILE, not with --model ID")
    if model is not None:
        return _registered(client, int(model))
    if model_id is not None:
        return _registered(client, model_id)
    if benchmark.reference_model_id is not None:
        found = _registered(client, benchmark.reference_model_id)
        return ModelUnderTest(f"reference model {found.label}", found.data, found.registry_id,
                              found.registered_digest)
    from sealbench.benchmarks.brats.definition import load_definition, load_model_bytes

    ref = load_definition().reference_model
    return ModelUnderTest(f"the shipped BraTS reference {ref.name} (benchmark {benchmark.id} "
                          "names no reference model)", load_model_bytes(ref))


def demo_contract(benchmark: BenchmarkPublic, size: str) -> BratsContract:
    """The contract demo data is generated under: the one the benchmark's metrics version
    enforces (its registered one when this sealbench does not know the version), on the
    ``small`` or ``full`` grid."""
    from sealbench.client.assets import SIZES, contract_for
    from sealbench.enclave.errors import SpecError
    from sealbench.enclave.rules import rules_for

    try:
        contract = rules_for(benchmark.metrics_version).contract
    except SpecError:
        return contract_for(benchmark, size)
    if size not in SIZES:
        raise ConfigError(f"--size must be one of {', '.join(SIZES)}, received {size!r}")
    shape = SIZES[size]
    return contract if shape is None else contract.with_shape(shape)


def check_compatibility(
    client: RegistryClient,
    benchmark_id: int,
    workdir: Path,
    *,
    model: str | None = None,
    model_id: int | None = None,
    dataset: Path | None = None,
    cases: int = 2,
    size: str = "small",
    max_seconds_per_case: float = DEFAULT_MAX_SECONDS_PER_CASE,
    progress: Callable[[str, int, int], None] | None = None,
) -> CompatReport:
    """Resolve what is tested (:func:`model_under_test`; ``dataset``, or ``cases`` demo cases
    written under ``workdir``) and :func:`run_checks` it. Only reads the registry."""
    benchmark = client.get_benchmark(benchmark_id)
    tested = model_under_test(client, benchmark, model, model_id)
    if dataset is None:
        contract = demo_contract(benchmark, size)
        prepared = write_demo_dataset(
            workdir, contract, cases,
            None if progress is None else lambda d, t: progress("preparing demo cases", d, t))
        label = (f"{cases} demo case{'s' if cases != 1 else ''} (synthetic, "
                 f"{'x'.join(map(str, contract.shape))})")
    else:
        prepared, label = dataset, str(dataset)
    return run_checks(
        benchmark, tested, prepared, data_label=label, max_seconds_per_case=max_seconds_per_case,
        progress=None if progress is None else lambda d, t: progress("evaluating cases", d, t),
    )


def write_demo_dataset(
    out_dir: Path,
    contract: BratsContract,
    cases: int,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Generate ``cases`` synthetic cases (seeds from :data:`DEMO_SEED`) on ``contract``'s grid
    and prepare them into ``out_dir/prepared``, exactly as a hospital prepares its data."""
    from sealbench.benchmarks.brats.prepare import prepare_dataset
    from sealbench.benchmarks.brats.synthetic import case_id_for, generate_case, write_case

    if cases < 1:
        raise ConfigError("--cases must be at least 1")
    raw = out_dir / "raw"
    for i in range(cases):
        seed = DEMO_SEED + i
        write_case(generate_case(seed, contract.shape, contract), raw,
                   case_id_for(seed % 100_000), contract)
    prepared = out_dir / "prepared"
    prepare_dataset(raw, prepared, contract, progress)
    return prepared


