"""What one confidential run evaluates and the specification it launches: the (dataset, model)
pairs approved in a benchmark (a refusal says why a pair may not run), and the
:class:`~sealbench.contract.spec.RunSpec` built from the registry's records and the owner's
result key.

With the mock backend the result destination is a ``file://`` directory under the profile's
data directory: the enclave runs on this machine, and a Cloud Storage destination would need an
``objectCreator`` grant that the policy writer does not manage yet.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from sealbench.client.assets.prepare import recipient_of
from sealbench.client.assets.result_key import ResultKey
from sealbench.client.errors import ConfigError, NotAllowedError, NotFoundError
from sealbench.client.registry.api import AssetKind, RegistryClient

if TYPE_CHECKING:
    from sealbench.contract.spec import RunSpec, ServiceEndpoints

__all__ = [
    "approved_models",
    "approved_pairs",
    "build_spec",
    "not_approved",
]

def approved_models(
    client: RegistryClient, benchmark_id: int, dataset_id: int, model_id: int | None
) -> tuple[int, ...]:
    """The models to evaluate ``dataset_id`` with: ``model_id``, or every approved model; the
    dataset and each model must be approved in the benchmark."""
    datasets = {a.asset_id for a in client.list_associations("dataset", benchmark_id, "approved")}
    if dataset_id not in datasets:
        raise not_approved(client, "dataset", benchmark_id, dataset_id)
    models = tuple(
        sorted(a.asset_id for a in client.list_associations("model", benchmark_id, "approved"))
    )
    if model_id is None:
        if not models:
            raise NotAllowedError(f"no model is approved in benchmark {benchmark_id} yet")
        return models
    if model_id not in models:
        raise not_approved(client, "model", benchmark_id, model_id)
    return (model_id,)


def approved_pairs(
    client: RegistryClient, benchmark_id: int, dataset_id: int | None, model_id: int | None
) -> tuple[tuple[int, int], ...]:
    """The (dataset, model) pairs to evaluate: ``dataset_id`` (None: each of the caller's
    datasets approved in the benchmark) with ``model_id`` (None: every approved model). A
    dataset of another owner is refused here, before any run is recorded: only its owner
    releases its key, so the run could only fail."""
    if dataset_id is not None:
        owner_id = client.get_dataset(dataset_id).owner_id
        if owner_id != client.me().id:
            raise NotAllowedError(
                f"dataset {dataset_id} is not yours (user {owner_id} registered it): a run "
                "evaluates one of your own datasets, whose key only you release; nothing was "
                "run or recorded",
                hint="'sealbench dataset ls --mine' lists yours; a model owner's results come "
                "from the hospitals that run their datasets with its model")
        return tuple((dataset_id, m) for m in approved_models(client, benchmark_id, dataset_id,
                                                               model_id))
    me = client.me().id
    mine = {d.id for d in client.list_datasets(owner_id=me)}
    approved = sorted(
        a.asset_id for a in client.list_associations("dataset", benchmark_id, "approved")
        if a.asset_id in mine
    )
    if not approved:
        raise NotAllowedError(
            f"none of your datasets is approved in benchmark {benchmark_id}",
            hint=f"see 'sealbench association ls --benchmark {benchmark_id}'",
        )
    return tuple(
        (d, m) for d in approved for m in approved_models(client, benchmark_id, d, model_id)
    )


def not_approved(
    client: RegistryClient, kind: AssetKind, benchmark_id: int, asset_id: int
) -> NotAllowedError:
    """Why ``kind`` ``asset_id`` may not run in the benchmark, from its link's current state
    (never linked, pending, rejected or withdrawn), and what can be done about it."""
    current = {a.asset_id: a for a in client.list_associations(kind, benchmark_id)}
    link = current.get(asset_id)
    listing = f"'sealbench association ls --benchmark {benchmark_id}'"
    if link is None:
        return NotAllowedError(
            f"{kind} {asset_id} is not associated with benchmark {benchmark_id}",
            hint=f"its owner asks to join with 'sealbench {kind} associate --{kind} {asset_id} "
            f"--benchmark {benchmark_id}'",
        )
    if link.status == "withdrawn":
        return NotAllowedError(
            f"{kind} {asset_id} was withdrawn from benchmark {benchmark_id} by its owner "
            f"(user {link.actor_id}, {link.created_at:%Y-%m-%d}); no new run is allowed on it",
            hint="results verified before the withdrawal stay, marked; its owner can ask to "
            f"join again with 'sealbench {kind} associate'",
        )
    if link.status == "pending":
        return NotAllowedError(
            f"{kind} {asset_id} is still pending in benchmark {benchmark_id}",
            hint=f"the other side approves it (see {listing}, or 'sealbench inbox' as them)",
        )
    return NotAllowedError(
        f"{kind} {asset_id} is {link.status} in benchmark {benchmark_id}",
        hint=f"check {listing}; its owner can ask to join again",
    )


def build_spec(
    client: RegistryClient,
    *,
    run_id: str,
    benchmark_id: int,
    dataset_id: int,
    model_id: int,
    recipient: ResultKey,
    result_dir: Path,
    endpoints: ServiceEndpoints | None,
    result_uri: str | None = None,
) -> RunSpec:
    """The :class:`~sealbench.contract.spec.RunSpec` of one evaluation, from the registry's
    records (digests, coordinates) and the owner's result key; ``endpoints`` are the token
    destinations (STS, KMS, storage) the profile's account names (its platform's
    :class:`~sealbench.platforms.account.AccountRoutes`), None for its platform's own. The
    result goes to ``result_uri`` when given (a VM in the cloud cannot write this machine's
    folders), else to ``result_dir``."""
    from sealbench.contract.spec import AssetLocation, RunSpec

    benchmark = client.get_benchmark(benchmark_id)
    dataset = client.get_dataset(dataset_id)
    model = client.get_model(model_id)
    if recipient_of(dataset) != recipient.digest:
        raise ConfigError(
            f"dataset {dataset_id} was registered with another result key than this profile's",
            hint="run with the profile that registered the dataset",
        )
    locations = {}
    for kind, asset_id in (("dataset", dataset_id), ("model", model_id)):
        try:
            coords = client.get_coordinates(kind, asset_id)  # type: ignore[arg-type]
        except NotFoundError as exc:
            owner = "you have" if kind == "dataset" else "its owner has"
            raise ConfigError(
                f"{kind} {asset_id} has no sealed copy yet ({owner} not run "
                f"'sealbench {kind} seal')",
                hint="run it once the asset is sealed",
            ) from exc
        locations[kind] = AssetLocation(
            asset_id=str(asset_id),
            uri=coords.storage_uri,
            kms_key=coords.kms_key_name,
            pool_provider=coords.wip_provider,
        )
    if result_uri is None:
        result_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    cloud = {} if endpoints is None else asdict(endpoints)
    return RunSpec(
        run_id=run_id,
        benchmark_id=str(benchmark_id),
        metrics_version=benchmark.metrics_version,
        dataset=locations["dataset"],
        model=locations["model"],
        result_uri=result_uri or result_dir.resolve().as_uri(),
        recipient_public_key=recipient.public_b64,
        data_digest=dataset.digest,
        model_digest=model.digest,
        recipient_digest=recipient.digest,
        **cloud,
    )
