"""Which workloads an owner's key may be released to, computed from the registry's approved
associations (the input of ``sealbench policy sync``).

For a dataset D (data owner): every approved benchmark B in which D's link is approved, times
every model M approved in B, gives ``(B.image_digest, D.digest, M.digest, recipient(D), B.id,
B.metrics_version)``. For a model M (model owner): every approved benchmark B in which M is
approved, times every dataset D approved in B, gives ``(B.image_digest, -, M.digest,
recipient(D), B.id, B.metrics_version)`` (the data field is left open, as a model owner's policy
may). ``recipient(D)`` is the result recipient digest D's owner registered
(:func:`sealbench.client.assets.recipient_of`). Each grant is one approval: its benchmark and
plug-in pin are in the uid, so a key is never released for a pin or an EXPERIMENTAL allowance of
another benchmark (issue 28).

The registry is trusted only for *which* pairs were approved: a compromised registry could add
a pair, but the workload it adds still has to run the benchmark's image, read exactly the
registered digests and seal to the registered recipient, and ``policy sync`` prints every
grant it writes so the owner can review them.
"""

from __future__ import annotations

from dataclasses import dataclass

from sealbench.client.api import AssetKind, RegistryClient
from sealbench.client.assets import recipient_of
from sealbench.crypto.digest import parse_digest
from sealbench.crypto.workload import WorkloadIdentity
from sealbench.server.schemas import BenchmarkPublic

__all__ = ["AllowedWorkload", "allowed_workloads"]


@dataclass(frozen=True)
class AllowedWorkload:
    """One grant and the registry records it comes from."""

    benchmark_id: int
    dataset_id: int
    model_id: int
    identity: WorkloadIdentity
    #: The benchmark's metrics version, which the key-release condition pins.
    metrics_version: str
    #: The benchmark accepts confidential-GPU preview (EXPERIMENTAL) images (issue 18).
    accept_experimental: bool = False


def _approved_ids(
    client: RegistryClient, kind: AssetKind, benchmark: BenchmarkPublic
) -> tuple[int, ...]:
    return tuple(a.asset_id for a in client.list_associations(kind, benchmark.id, "approved"))


def allowed_workloads(
    client: RegistryClient, kind: AssetKind, asset_id: int
) -> tuple[AllowedWorkload, ...]:
    """Every workload the owner of ``kind`` ``asset_id`` should allow (see module docstring)."""
    grants: list[AllowedWorkload] = []
    datasets: dict[int, tuple[str, str]] = {}
    models: dict[int, str] = {}

    def dataset(dataset_id: int) -> tuple[str, str]:
        if dataset_id not in datasets:
            row = client.get_dataset(dataset_id)
            datasets[dataset_id] = (row.digest, recipient_of(row))
        return datasets[dataset_id]

    def model(model_id: int) -> str:
        if model_id not in models:
            models[model_id] = client.get_model(model_id).digest
        return models[model_id]

    other: AssetKind = "model" if kind == "dataset" else "dataset"
    for benchmark in client.list_benchmarks("approved"):
        if asset_id not in _approved_ids(client, kind, benchmark):
            continue
        image = parse_digest(benchmark.image_digest)
        for other_id in _approved_ids(client, other, benchmark):
            pair = (asset_id, other_id) if kind == "dataset" else (other_id, asset_id)
            dataset_id, model_id = pair
            data_digest, recipient = dataset(dataset_id)
            identity = WorkloadIdentity(
                image_digest=image,
                data_digest=parse_digest(data_digest) if kind == "dataset" else None,
                model_digest=parse_digest(model(model_id)),
                recipient_digest=parse_digest(recipient),
                benchmark_id=str(benchmark.id),
                metrics_version=benchmark.metrics_version,
            )
            grants.append(
                AllowedWorkload(
                    benchmark.id, dataset_id, model_id, identity, benchmark.metrics_version,
                    benchmark.accept_experimental,
                )
            )
    return tuple(grants)
