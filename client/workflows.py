"""The registry-side steps every role takes, as library functions the CLI commands and
``sealbench demo`` both call: building a benchmark from its definition, registering prepared
datasets and checked models, and reading leaderboards. Pure where possible; the registry is
passed in as a :class:`~sealbench.client.api.RegistryClient`."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, Literal, cast

from pydantic import JsonValue, ValidationError
from rich.console import Console
from rich.table import Table

from sealbench.client.api import AssetKind, RegistryClient
from sealbench.client.errors import ConfigError, IntegrityError, NotAvailableError
from sealbench.server.schemas import (
    AssociationStatus,
    AuditVerification,
    BenchmarkCreate,
    BenchmarkState,
)

if TYPE_CHECKING:
    from sealbench.benchmarks.brats.definition import BenchmarkDefinition

__all__ = [
    "METRICS_VERSION",
    "REGIONS",
    "TEE_BACKENDS",
    "Backend",
    "EvaluationImage",
    "LeaderboardView",
    "asset_kinds",
    "association_status",
    "audit_broken",
    "benchmark_body",
    "benchmark_state",
    "dice_cells",
    "docker_image_module",
    "evaluation_image",
    "leaderboard",
    "load_benchmark_definition",
    "metric_value",
    "print_leaderboard",
    "summary_cases",
]

#: The metrics version the enclave scores BraTS with (``sealbench.enclave.rules``).
METRICS_VERSION: Final = "brats-2023-gli/1"
REGIONS: Final = ("WT", "TC", "ET")
#: Every ``--tee`` backend and whether this version implements it.
TEE_BACKENDS: Final[dict[str, bool]] = {"mock": True, "docker": True, "confidential-space": True}
Backend = Literal["mock", "docker", "confidential-space"]
_LOWER_IS_BETTER: Final = frozenset({"hd95", "lesion_hd95", "num_fp", "num_fn"})
_STATES: Final = ("pending", "approved", "rejected", "retired")
_STATUSES: Final = ("pending", "approved", "rejected", "withdrawn")


def benchmark_state(value: str | None) -> BenchmarkState | None:
    if value is not None and value not in _STATES:
        raise ConfigError(f"--state must be one of {', '.join(_STATES)}, received {value!r}")
    return cast("BenchmarkState | None", value)


def association_status(value: str | None) -> AssociationStatus | None:
    if value is not None and value not in _STATUSES:
        raise ConfigError(f"--status must be one of {', '.join(_STATUSES)}, received {value!r}")
    return cast("AssociationStatus | None", value)


def asset_kinds(value: str | None) -> tuple[AssetKind, ...]:
    if value is None:
        return ("dataset", "model")
    if value not in ("dataset", "model"):
        raise ConfigError(f"--kind must be dataset or model, received {value!r}")
    return (cast("AssetKind", value),)


def check_tee(tee: str) -> Backend:
    """The backend name, or an error that says which exist and which are not available."""
    if tee not in TEE_BACKENDS:
        raise ConfigError(
            f"unknown TEE backend {tee!r}", hint=f"use one of {', '.join(TEE_BACKENDS)}"
        )
    if not TEE_BACKENDS[tee]:
        raise NotAvailableError(
            f"the {tee} backend is not available in this version of sealbench",
            hint="use one of "
            + ", ".join(name for name, available in TEE_BACKENDS.items() if available),
        )
    return cast("Backend", tee)


@dataclass(frozen=True)
class EvaluationImage:
    reference: str
    digest: str


def evaluation_image(
    tee: str, reference: str | None = None, digest: str | None = None
) -> EvaluationImage:
    """The evaluation image a benchmark pins: explicit ``reference``/``digest``, else the image
    of the ``tee`` backend: for ``mock``, the digest derived from the enclave code it runs; for
    ``docker``, the local image ``sealbench-eval:latest`` (its image ID, which the Docker
    launcher attests), refused as stale unless it was built from the checkout found around the
    working directory or the installed code (not checked without a checkout);
    ``confidential-space`` needs the pushed image named explicitly."""
    if reference and digest:
        return EvaluationImage(reference, digest)
    if reference or digest:
        raise ConfigError("pass both --image-reference and --image-digest, or neither")
    backend = check_tee(tee)
    if backend == "docker":
        image_module = docker_image_module()
        engine = image_module.connect_engine()
        source = image_module.checkout_source()
        found = (
            image_module.local_image(engine)
            if source is None
            else image_module.fresh_local_image(engine, source)
        )
        return EvaluationImage(found.reference, found.digest)
    if backend == "confidential-space":
        raise ConfigError(
            "a Confidential Space benchmark names its pushed image explicitly",
            hint="pass --image-reference REPO@sha256:… and --image-digest sha256:… "
            "(see docs/image.md)",
        )
    from sealbench.client.launchers import mock_image

    image = mock_image()
    return EvaluationImage(image.reference, image.digest)


def docker_image_module() -> ModuleType:
    """:mod:`sealbench.client.image` (it needs the Docker SDK of the ``docker`` extra)."""
    try:
        import sealbench.client.image as image_module
    except ImportError as exc:
        raise NotAvailableError(
            f"the Docker backend needs the Docker SDK ({exc.name} is not installed)",
            hint="pip install 'sealbench[docker]'",
        ) from exc
    return image_module


def load_benchmark_definition(
    name_or_path: str, *, name: str | None = None, version: str | None = None
) -> BenchmarkDefinition:
    """A shipped definition (``brats``; ``brats-small``, its 64x64x48 demo benchmark) or a
    definition JSON file, published under ``name`` and ``version`` when they are given (a
    variant)."""
    from sealbench.benchmarks.brats.definition import SHIPPED_DEFINITIONS, BenchmarkDefinition

    renamed = {k: v for k, v in (("name", name), ("version", version)) if v is not None}
    if name_or_path in SHIPPED_DEFINITIONS:
        loaded = SHIPPED_DEFINITIONS[name_or_path]()
        return BenchmarkDefinition.model_validate({**loaded.model_dump(), **renamed})
    path = Path(name_or_path)
    try:
        loaded = BenchmarkDefinition.model_validate_json(path.read_bytes())
        return BenchmarkDefinition.model_validate({**loaded.model_dump(), **renamed})
    except OSError as exc:
        raise ConfigError(
            f"cannot read benchmark definition {path}: {exc.strerror}",
            hint="pass --definition brats (or brats-small) or the path of a definition JSON file",
        ) from exc
    except ValidationError as exc:
        raise ConfigError(
            f"{path} is not a benchmark definition ({exc.error_count()} errors)",
            hint="see sealbench.benchmarks.brats.definition for the format",
        ) from exc


def benchmark_body(
    definition: BenchmarkDefinition, *, image: EvaluationImage, reference_model_id: int | None
) -> BenchmarkCreate:
    """The registry request publishing ``definition`` with ``image``."""
    return BenchmarkCreate(
        name=definition.name,
        version=definition.version,
        description=definition.description,
        data_contract=definition.contract.model_dump(mode="json"),
        metrics_spec=definition.metrics.model_dump(mode="json"),
        metrics_version=METRICS_VERSION,
        image_reference=image.reference,
        image_digest=image.digest,
        reference_model_id=reference_model_id,
    )


# -- results -----------------------------------------------------------------------------------


def metric_value(summary: Mapping[str, JsonValue], metric: str, region: str) -> float | None:
    """The mean of ``metric`` in ``region`` of a public summary, or None if absent."""
    regions = summary.get("regions")
    aggregates = summary.get("aggregates")
    if regions is None and isinstance(aggregates, dict):  # a run's ResultSummary
        regions = aggregates.get("regions")
    if not isinstance(regions, dict):
        return None
    metrics = regions.get(region)
    if not isinstance(metrics, dict):
        return None
    stats = metrics.get(metric)
    if not isinstance(stats, dict):
        return None
    mean = stats.get("mean")
    return float(mean) if isinstance(mean, int | float) else None


def summary_cases(summary: Mapping[str, JsonValue]) -> int | None:
    """The number of cases a public summary aggregates."""
    aggregates = summary.get("aggregates")
    source = aggregates if isinstance(aggregates, dict) else summary
    value = source.get("n_cases")
    return value if isinstance(value, int) else None


def dice_cells(summary: Mapping[str, JsonValue]) -> tuple[str, str, str]:
    cells = [metric_value(summary, "dice", region) for region in REGIONS]
    return cast(
        "tuple[str, str, str]", tuple("-" if v is None else f"{v:.4f}" for v in cells)
    )


@dataclass(frozen=True)
class LeaderboardView:
    """Models x datasets: each cell the mean over WT, TC and ET of ``metric``'s mean."""

    benchmark_id: int
    metric: str
    models: tuple[tuple[int, str], ...]
    datasets: tuple[tuple[int, str], ...]
    cells: Mapping[tuple[int, int], float]
    #: (model, dataset) cells whose dataset or model was withdrawn after the result.
    withdrawn: frozenset[tuple[int, int]] = frozenset()

    def model_score(self, model_id: int) -> float | None:
        values = [v for (m, _), v in self.cells.items() if m == model_id]
        return sum(values) / len(values) if values else None

    def ranked(self) -> list[tuple[int, str]]:
        lower = self.metric in _LOWER_IS_BETTER

        def key(item: tuple[int, str]) -> float:
            score = self.model_score(item[0])
            if score is None:
                return math.inf
            return score if lower else -score

        return sorted(self.models, key=key)

    def to_json(self) -> dict[str, Any]:
        return {
            "benchmark_id": self.benchmark_id,
            "metric": self.metric,
            "regions": list(REGIONS),
            "rows": [
                {
                    "model_id": model_id,
                    "model": label,
                    "mean": _round(self.model_score(model_id)),
                    "datasets": {
                        str(dataset_id): _round(self.cells.get((model_id, dataset_id)))
                        for dataset_id, _ in self.datasets
                    },
                }
                for model_id, label in self.ranked()
            ],
            "datasets": {str(i): label for i, label in self.datasets},
            "withdrawn": [
                {"model_id": m, "dataset_id": d} for m, d in sorted(self.withdrawn)
            ],
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def leaderboard(client: RegistryClient, benchmark_id: int, metric: str) -> LeaderboardView:
    board = client.leaderboard(benchmark_id)
    models: dict[int, str] = {}
    datasets: dict[int, str] = {}
    cells: dict[tuple[int, int], float] = {}
    withdrawn: set[tuple[int, int]] = set()
    for entry in board.entries:
        if entry.withdrawn:
            withdrawn.add((entry.model_id, entry.dataset_id))
        models[entry.model_id] = f"{entry.model_name} {entry.model_version}"
        datasets[entry.dataset_id] = entry.dataset_name
        values = [metric_value(entry.summary, metric, region) for region in REGIONS]
        present = [v for v in values if v is not None]
        if present:
            cells[(entry.model_id, entry.dataset_id)] = sum(present) / len(present)
    return LeaderboardView(
        benchmark_id, metric, tuple(sorted(models.items())), tuple(sorted(datasets.items())),
        cells, frozenset(withdrawn),
    )


def print_leaderboard(console: Console, board: LeaderboardView) -> None:
    t = Table(
        title=f"leaderboard of benchmark {board.benchmark_id}: mean {board.metric} over "
        f"{', '.join(REGIONS)} (verified results only)",
        title_justify="left",
        header_style="bold",
    )
    t.add_column("rank")
    t.add_column("model")
    for dataset_id, label in board.datasets:
        t.add_column(f"{label} (#{dataset_id})", justify="right")
    t.add_column("mean", justify="right")
    for rank, (model_id, label) in enumerate(board.ranked(), start=1):
        cells = [
            (board.cells.get((model_id, d)), (model_id, d) in board.withdrawn)
            for d, _ in board.datasets
        ]
        score = board.model_score(model_id)
        t.add_row(
            str(rank),
            f"{label} (#{model_id})",
            *("-" if c is None else f"{c:.4f}{' †' if gone else ''}" for c, gone in cells),
            "-" if score is None else f"{score:.4f}",
        )
    console.print(t)
    if board.withdrawn:
        console.print("† its dataset or model was withdrawn from the benchmark after this "
                      "result was verified")


def audit_broken(result: AuditVerification) -> IntegrityError:
    return IntegrityError(
        f"the registry's audit chain is broken at event {result.first_broken_seq}: "
        f"{result.reason}",
        hint="the registry database was modified outside the application: stop using it and "
        "tell the registry operator",
    )


def json_file(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read JSON from {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} does not hold a JSON object")
    return data
