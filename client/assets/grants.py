"""Which workloads an owner's key may be released to, computed from the registry's approved
associations (the input of ``sealbench policy sync``).

For a dataset D (data owner): every approved benchmark B in which D's link is approved, times
every model M approved in B, gives ``(B.image_digest, D.digest, M.digest, recipient(D), B.id,
B.metrics_version)``. For a model M (model owner): every approved benchmark B in which M is
approved, times every dataset D approved in B, gives ``(B.image_digest, -, M.digest,
recipient(D), B.id, B.metrics_version)`` (the data field is left open, as a model owner's policy
may). A dataset in a benchmark that pools in the TEE (issue 27) also grants, per model M, the
benchmark's aggregator: ``(B.aggregator_image_digest, -, M.digest, pool recipient, B.id,
B.metrics_version)`` (:func:`sealbench.contract.pool.aggregator_identity`; the pool recipient is
the digest of the registry's pool-release key the benchmark recorded at creation, to which the
aggregator seals its release); a model's grants
never name the aggregator (it never opens a model). ``recipient(D)`` is the result recipient
digest D's owner registered (:func:`sealbench.client.assets.prepare.recipient_of`). Each grant is
one approval: its benchmark and plug-in pin are in the uid, so a key is never released for a pin
or an EXPERIMENTAL allowance of another benchmark (issue 28).

:func:`grants_digest` is what ``policy sync`` reports to the registry after writing an asset's
grants; the registry computes the same digest over what the asset's current approvals require
(:mod:`sealbench.server.services.grants`), so it can tell an owner, and a refused hospital, that a
sync is due.

The registry is trusted only for *which* pairs were approved: a compromised registry could add
a pair, but the workload it adds still has to run the benchmark's image, read exactly the
registered digests and seal to the registered recipient, and ``policy sync`` prints every
grant it writes so the owner can review them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sealbench.client.assets.prepare import recipient_of
from sealbench.client.errors import ClientError
from sealbench.client.registry.api import AssetKind, RegistryClient
from sealbench.contract.pool import PoolAnchor, aggregator_identity
from sealbench.contract.workload import WorkloadIdentity, grant_set_digest
from sealbench.crypto.digest import Sha256Digest, parse_digest
from sealbench.server.schemas import BenchmarkPublic, GrantsStatus

__all__ = [
    "AllowedWorkload",
    "allowed_workloads",
    "grants_digest",
    "lag_notice",
    "lagging_grants",
]


@dataclass(frozen=True)
class AllowedWorkload:
    """One grant and the registry records it comes from."""

    benchmark_id: int
    dataset_id: int
    model_id: int
    #: The workload the grant names; its ``metrics_version`` is the benchmark's pin as the uid
    #: (and so the key-release condition) carries it.
    identity: WorkloadIdentity
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
                metrics_version=str(benchmark.metrics_version),
            )
            grants.append(
                AllowedWorkload(
                    benchmark.id, dataset_id, model_id, identity, benchmark.accept_experimental,
                )
            )
            anchor = PoolAnchor.of(benchmark)
            if kind == "dataset" and anchor is not None and benchmark.aggregator_image_digest:
                grants.append(AllowedWorkload(
                    benchmark.id, dataset_id, model_id, aggregator_identity(
                        benchmark.aggregator_image_digest, anchor, identity)))
    return tuple(grants)


def grants_digest(grants: Iterable[AllowedWorkload]) -> Sha256Digest:
    """The digest of the grant set ``grants`` writes for one asset
    (:func:`sealbench.contract.workload.grant_set_digest`, as the registry computes it)."""
    return grant_set_digest((g.identity, g.accept_experimental) for g in grants)


def lagging_grants(
    client: RegistryClient, pairs: Iterable[tuple[int, int]]
) -> tuple[GrantsStatus, ...]:
    """Of the models and datasets of ``pairs`` (dataset id, model id), those whose owner's
    grants lag their approvals, as the registry tells (an asset it will not tell about is left
    out: the lookup only explains a refusal, it must not hide it)."""
    seen: set[tuple[AssetKind, int]] = set()
    found: list[GrantsStatus] = []
    for dataset_id, model_id in pairs:
        for kind, asset_id in (("model", model_id), ("dataset", dataset_id)):
            key: tuple[AssetKind, int] = (kind, asset_id)  # type: ignore[assignment]
            if key in seen:
                continue
            seen.add(key)
            try:
                status = client.get_grants(*key)
            except ClientError:
                continue
            if status.lagging:
                found.append(status)
    return tuple(found)


def lag_notice(lagging: Iterable[GrantsStatus], me: int) -> str | None:
    """Whose grants to sync, one clause per lagging asset (``me``: the caller's user id, whose
    own assets it syncs itself); None when none lags."""
    clauses = []
    for s in lagging:
        when = ("never reported a sync" if s.synced_at is None
                else f"last synced {s.synced_at:%Y-%m-%d %H:%M} UTC")
        if s.owner_id == me:
            clauses.append(f"your {s.asset_kind} {s.asset_id}'s grants lag its approvals "
                           f"({when}): run {s.command}")
        else:
            clauses.append(f"{s.asset_kind} {s.asset_id}'s owner (user {s.owner_id}) has not "
                           f"synced its grants since your association was approved ({when}); "
                           f"they run: {s.command}")
    return "; ".join(clauses) or None
