"""The compatibility test a participant runs before associating (MedPerf's ``medperf test run``):
a model owner runs its model on the benchmark's demo data, a hospital runs the benchmark's
reference model on its own prepared data, both on this machine in plain mode: no TEE, no key,
nothing uploaded (the registry is only read, for the benchmark and the model's digest).

The scoring is the enclave's own: the benchmark plug-in the benchmark pins
(``metrics_version``, resolved as the enclave resolves it:
:func:`sealbench.enclave.rules.benchmark_for`), bound to the benchmark's registered data
contract; a prepared dataset's ``dataset.json`` passes the same check, and each case goes through
the same steps and failure rules as step 5 of a run (the plug-in's layout, runner, ``score``,
``failure`` and ``summarise``).

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

from sealbench.client.errors import ConfigError
from sealbench.client.plugins import shipped_model
from sealbench.client.registry.api import RegistryClient
from sealbench.client.runs._compat_checks import (
    DEFAULT_MAX_SECONDS_PER_CASE,
    Check,
    CompatReport,
    ModelUnderTest,
    RunnerFactory,
    plugin_of,
    run_checks,
)
from sealbench.server.schemas import BenchmarkPublic

if TYPE_CHECKING:
    from sealbench.benchmarks.interface import Benchmark, DemoVariant

__all__ = [
    "DEFAULT_MAX_SECONDS_PER_CASE",
    "DEMO_SEED",
    "Check",
    "CompatReport",
    "ModelUnderTest",
    "RunnerFactory",
    "check_compatibility",
    "demo_variant",
    "model_under_test",
    "run_checks",
    "write_demo_dataset",
]

#: First seed of the demo cases: the held-out range no shipped model was trained on.
DEMO_SEED: Final = 900_000


# -- what is tested ---------------------------------------------------------------------------


def _read_model(path: Path, max_bytes: int) -> bytes:
    try:
        with path.open("rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    if len(data) > max_bytes:
        raise ConfigError(f"{path} is larger than the {max_bytes}-byte model cap")
    return data


def _registered(client: RegistryClient, model_id: int) -> ModelUnderTest:
    """Registry model ``model_id``, whose weights must ship with sealbench (the registry holds
    only its digest)."""
    row = client.get_model(model_id)
    shipped = shipped_model(row.digest)
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
    registry model id; None: the benchmark's reference model (the plug-in's shipped reference
    when the benchmark names none)."""
    plugin = plugin_of(benchmark)
    if model is not None and Path(model).is_file():
        registered = None if model_id is None else client.get_model(model_id).digest
        cap = 1 << 30 if plugin is None else plugin.model_contract.max_bytes
        return ModelUnderTest(model, _read_model(Path(model), cap), model_id, registered)
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
    if plugin is None or not plugin.shipped_models:
        raise ConfigError(
            f"benchmark {benchmark.id} names no reference model and its plug-in "
            f"{benchmark.metrics_version!r} ships none here", hint="pass --model FILE")
    ref = plugin.shipped_models[0]
    return ModelUnderTest(f"the shipped reference {ref.name} of {plugin.ref} (benchmark "
                          f"{benchmark.id} names no reference model)", plugin.model_bytes(ref.name))


def demo_variant(benchmark: BenchmarkPublic, size: str) -> DemoVariant:
    """The variant demo data is generated under: the benchmark's plug-in on its registered data
    contract (``full``), or the plug-in's smallest demo variant (``small``, where it has one)."""
    from sealbench.benchmarks.interface import ContractVariants, DemoVariant

    if size not in ("small", "full"):
        raise ConfigError(f"--size must be small or full, received {size!r}")
    plugin = plugin_of(benchmark)
    if plugin is None:
        raise ConfigError(
            f"benchmark {benchmark.id} pins benchmark plug-in {benchmark.metrics_version!r}, "
            "which is not installed here or refuses its registered data contract",
            hint="upgrade sealbench (or install the plug-in) to the version the authority uses")
    if size == "small" and isinstance(plugin, ContractVariants):
        return plugin.demo_variants()[0]
    return DemoVariant("full", plugin, 1.0)


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
    cost_scale = 1.0
    data_variant = None
    if dataset is None:
        variant = demo_variant(benchmark, size)
        cost_scale = variant.cost_scale
        data_variant = variant.benchmark
        prepared = write_demo_dataset(
            workdir, variant.benchmark, cases,
            None if progress is None else lambda d, t: progress("preparing demo cases", d, t))
        label = f"{cases} demo case{'s' if cases != 1 else ''} (synthetic, {variant.name})"
    else:
        prepared, label = dataset, str(dataset)
    return run_checks(
        benchmark, tested, prepared, data_label=label, max_seconds_per_case=max_seconds_per_case,
        cost_scale=cost_scale, variant=data_variant,
        progress=None if progress is None else lambda d, t: progress("evaluating cases", d, t),
    )


def write_demo_dataset(
    out_dir: Path,
    benchmark: Benchmark,
    cases: int,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Generate ``cases`` synthetic cases (seeds from :data:`DEMO_SEED`) with ``benchmark``'s
    demo generator and prepare them into ``out_dir/prepared``, exactly as a hospital prepares
    its data."""
    from sealbench.benchmarks.interface import PreparationError

    if cases < 1:
        raise ConfigError("--cases must be at least 1")
    raw = out_dir / "raw"
    benchmark.write_demo_dataset(raw, cases, seed=DEMO_SEED)
    prepared = out_dir / "prepared"
    try:
        benchmark.prepare(raw, prepared, progress=progress)
    except PreparationError as exc:
        raise ConfigError(f"the demo cases could not be prepared: {exc}") from exc
    return prepared


