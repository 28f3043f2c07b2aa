"""Which benchmark rules a metrics version names: the data contract every case must satisfy and
the metrics spec that scores it. The run spec carries only the version string; an unknown one
stops the run before any key is requested.

The grid shape is the one field a dataset may choose: its ``dataset.json`` (covered by the
manifest digest the key owners approved) states the contract it was prepared under, which must
equal the benchmark's contract in every field except ``shape``. Everything that defines what is
measured (modalities, label map, regions, spacing, naming) is the benchmark's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from pydantic import ValidationError

from sealbench.benchmarks.brats import (
    BRATS_2023_GLI,
    BRATS_2023_GLI_METRICS,
    BratsContract,
    MetricsSpec,
)
from sealbench.enclave.errors import AssetRejected, SpecError

__all__ = ["METRICS_VERSIONS", "BenchmarkRules", "rules_for"]

_MAX_DATASET_JSON: Final = 1 << 20


@dataclass(frozen=True)
class BenchmarkRules:
    """The contract and metrics spec of one metrics version."""

    metrics_version: str
    contract: BratsContract
    metrics: MetricsSpec

    def contract_for_dataset(self, dataset_json: bytes) -> BratsContract:
        """The contract of a dataset whose ``dataset.json`` is ``dataset_json``: the benchmark's
        own, on the dataset's grid. Raises :class:`AssetRejected` if anything else differs."""
        if len(dataset_json) > _MAX_DATASET_JSON:
            raise AssetRejected("dataset.json is larger than 1 MiB")
        try:
            doc = json.loads(dataset_json)
            stated = BratsContract.model_validate(doc["contract"])
        except (ValueError, KeyError, TypeError, ValidationError) as exc:
            raise AssetRejected("dataset.json does not state a valid data contract") from exc
        ours = self.contract.with_shape(stated.shape)
        if stated != ours:
            differing = sorted(
                name
                for name in BratsContract.model_fields
                if getattr(stated, name) != getattr(ours, name)
            )
            raise AssetRejected(
                f"the dataset was prepared under another contract (differs in {differing})"
            )
        return ours


#: Metrics versions this image can score, by the string a benchmark pins.
METRICS_VERSIONS: Final[dict[str, BenchmarkRules]] = {
    "brats-2023-gli/1": BenchmarkRules("brats-2023-gli/1", BRATS_2023_GLI, BRATS_2023_GLI_METRICS),
}


def rules_for(metrics_version: str) -> BenchmarkRules:
    """The rules of ``metrics_version`` or :class:`SpecError` naming the known ones."""
    try:
        return METRICS_VERSIONS[metrics_version]
    except KeyError:
        raise SpecError(
            f"SEALBENCH_METRICS_VERSION: unknown metrics version {metrics_version!r}; this image "
            f"scores {sorted(METRICS_VERSIONS)}"
        ) from None
