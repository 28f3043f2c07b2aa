"""What a data owner and a model owner do with an asset, as library functions the
``sealbench dataset ...`` and ``sealbench model ...`` commands and ``sealbench demo`` both call:
synthesise and prepare cases, register a prepared dataset or a checked model, seal it and ask a
benchmark to take it. Each takes the registry client (and, where it needs the owner's files or
cloud, the resolved profile) and returns what happened; printing is the caller's."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sealbench.client.assets import owner
from sealbench.client.assets import prepare as assets
from sealbench.client.assets.fingerprints import fingerprint_key
from sealbench.client.assets.result_key import load_result_key
from sealbench.client.errors import ConfigError, ConflictError
from sealbench.client.registry.api import AssetKind, RegistryClient
from sealbench.client.registry.governance import ConsentCheck
from sealbench.client.registry.profiles import ResolvedProfile
from sealbench.server.schemas import (
    AssociationPublic,
    BenchmarkPublic,
    DatasetCreate,
    DatasetPublic,
    ModelPublic,
)

if TYPE_CHECKING:
    from sealbench.benchmarks.interface import Benchmark, Prepared

__all__ = [
    "Association",
    "ConsentCheck",
    "DatasetRegistration",
    "Progress",
    "associate_asset",
    "check_prepared_for",
    "contract_plugin",
    "prepare_dataset",
    "register_dataset",
    "register_model",
    "seal_owned_asset",
    "synthesize_dataset",
]

_log = logging.getLogger("sealbench.client")

#: ``(done, total)`` of a long step.
Progress = Callable[[int, int], None]
#: Called with each warning (default: logged as a warning).
Warn = Callable[[str], None]


def contract_plugin(
    client: RegistryClient | None, *, benchmark: int | None = None,
    definition: str | None = None,
) -> Benchmark:
    """The plug-in to work under: benchmark ``benchmark``'s (read with ``client``) on its
    registered contract, or ``definition``'s (a shipped definition or a definition file); one of
    the two is needed (:func:`~sealbench.client.assets.prepare.plugin_of`)."""
    bench = None
    if benchmark is not None:
        if client is None:
            raise ConfigError("working under a registered benchmark needs the registry")
        bench = client.get_benchmark(benchmark)
    return assets.plugin_of(bench, definition)


def synthesize_dataset(
    client: RegistryClient | None, out_dir: Path, cases: int, *, benchmark: int | None = None,
    definition: str | None = None, variant: str | None = None, first_seed: int = 1,
    on_case: Callable[[str], None] | None = None,
) -> list[str]:
    """Write ``cases`` synthetic raw cases (no patient data) into ``out_dir``: the demo data of
    benchmark ``benchmark``'s plug-in (read with ``client``) or of ``definition``'s, under the
    plug-in's demo ``variant`` when one is named; returns their ids, ``on_case`` called after
    each."""
    plugin = assets.demo_variant(
        contract_plugin(client, benchmark=benchmark, definition=definition), variant)
    ids: list[str] = []
    for case_id in assets.synthesize(out_dir, cases, plugin, first_seed=first_seed):
        ids.append(case_id)
        if on_case is not None:
            on_case(case_id)
    return ids


def prepare_dataset(
    client: RegistryClient | None, raw_dir: Path, out_dir: Path, *, benchmark: int | None = None,
    definition: str | None = None, strict: bool = False, progress: Progress | None = None,
) -> Prepared:
    """Validate and prepare ``raw_dir`` into ``out_dir`` against benchmark ``benchmark``'s
    contract (read with ``client``), or against ``definition``'s."""
    plugin = contract_plugin(client, benchmark=benchmark, definition=definition)
    return assets.prepare(raw_dir, out_dir, plugin, progress, strict=strict)


@dataclass(frozen=True)
class DatasetRegistration:
    """``dataset``: the registry's row; ``body``: the request built from the folder;
    ``already``: the same name and digest was registered before (nothing was sent)."""

    dataset: DatasetPublic
    body: DatasetCreate
    already: bool

    def kept(self) -> tuple[str, ...]:
        """For a registration made before: the budget it keeps where this one asked another
        (``budget epsilon 1 (you asked 2)``)."""
        if not self.already:
            return ()
        asked = {"budget epsilon": (self.body.budget_epsilon, self.dataset.budget_epsilon),
                 "budget delta": (self.body.budget_delta, self.dataset.budget_delta)}
        return tuple(f"{what} {had:g} (you asked {want:g})"
                     for what, (want, had) in asked.items() if want is not None and want != had)


def register_dataset(
    profile: ResolvedProfile, client: RegistryClient, prepared: Path, name: str, *,
    benchmark: int | None = None, budget_epsilon: float | None = None,
    budget_delta: float | None = None, budget_group: str | None = None,
    review: Callable[[DatasetCreate], None] | None = None, warn: Warn = _log.warning,
) -> DatasetRegistration:
    """Register the prepared dataset in ``prepared`` under ``name``: its manifest digest, case
    count, grid, the profile's result key digest, its privacy budget and its cases' keyed
    fingerprints (the profile's fingerprint key, made on first use). The same name and
    digest registered before is that registration (nothing sent); the same name with other data
    is refused (:class:`ConfigError`). ``review`` sees the exact request before it is sent (and
    raises to stop it); ``warn`` receives the same digest registered by anyone and a dataset
    smaller than the benchmark's small-cell minimum."""
    recipient = load_result_key(profile.secrets_dir).digest
    bench = None if benchmark is None else client.get_benchmark(benchmark)
    body = assets.dataset_registration(
        prepared, name, recipient, bench, budget_epsilon=budget_epsilon,
        budget_delta=budget_delta, budget_group=budget_group,
        fingerprint_key=fingerprint_key(profile.secrets_dir))
    me, listed = client.me().id, client.list_datasets()
    named = next((d for d in listed if d.owner_id == me and d.name == name), None)
    if named is not None:
        if named.digest != body.digest:
            raise ConfigError(
                f"you already have a dataset named {named.name!r} (dataset {named.id}, digest "
                f"{named.digest[:19]}…) and this folder holds other data (digest "
                f"{body.digest[:19]}…); nothing was sent",
                hint="register it under another --name")
        return DatasetRegistration(named, body, already=True)
    twin = assets.already_registered(listed, body.digest, me)
    if twin:
        warn(twin)
    if bench is not None:
        minimum = assets.plugin_of(bench).small_cell_minimum
        if body.case_count < minimum:
            cases = f"{body.case_count} case" + ("" if body.case_count == 1 else "s")
            warn(f"this dataset has {cases}; benchmark {bench.id} publishes no summary of fewer "
                 f"than {minimum} cases, so every run on it would withhold its public figures "
                 "(you would still open your own per-case results)")
    if review is not None:
        review(body)
    return DatasetRegistration(client.register_dataset(body), body, already=False)


def register_model(
    client: RegistryClient, onnx: Path, name: str, version: str = "1", *,
    benchmark: int | None = None, definition: str | None = None, warn: Warn = _log.warning,
) -> ModelPublic:
    """Check the ONNX model against the model contract of benchmark ``benchmark`` or of
    ``definition`` (one of the two) and register its digest; ``warn`` receives the same digest
    registered before."""
    plugin = contract_plugin(client, benchmark=benchmark, definition=definition)
    body = assets.model_registration(onnx, name, version, plugin)
    twin = assets.already_registered(client.list_models(), body.digest, client.me().id)
    if twin:
        warn(twin)
    return client.register_model(body)


def seal_owned_asset(
    profile: ResolvedProfile, client: RegistryClient, kind: AssetKind, asset_id: int,
    source: Path, *, mock_tee: Path | None = None, kms_key: str | None = None,
    storage: str | None = None, pool_provider: str | None = None,
    progress: Progress | None = None,
) -> owner.SealOutcome:
    """Seal ``source`` as asset ``asset_id`` in the profile's cloud (its defaults, each option
    given replacing one), and record where on the registry."""
    cloud = owner.owner_cloud(profile, client, mock_tee)
    where = owner.coordinates(
        cloud, kind, asset_id, kms_key=kms_key, storage=storage, pool_provider=pool_provider)
    return owner.seal_asset(client, cloud, kind, asset_id, source, where, progress)


@dataclass(frozen=True)
class Association:
    """``row``: the link; ``already``: it was pending or approved before (nothing changed)."""

    row: AssociationPublic
    already: bool


def _base_pin(bench: BenchmarkPublic) -> str:
    ref = bench.metrics_version
    # an exact release of a contract takes the data of the contract (EXACT_SUFFIX), and so
    # does a pooled-only one (POOLED_ONLY_SUFFIX, issue 41)
    version = ref.version.removesuffix("-pool") or ref.version
    return f"{ref.name}/{version.removesuffix('-exact') or version}"


def check_prepared_for(
    client: RegistryClient, dataset: DatasetPublic, bench: BenchmarkPublic
) -> None:
    """Refuse (:class:`ConfigError`) ``dataset`` for ``bench`` when it was prepared for a
    benchmark pinning another plug-in or contract variant (grid), as the registry does (422);
    an exact release of the same contract takes the same data."""
    if dataset.prepared_for_id is None or dataset.prepared_for_id == bench.id:
        return
    prepared_for = client.get_benchmark(dataset.prepared_for_id)
    if _base_pin(prepared_for) == _base_pin(bench):
        return
    raise ConfigError(
        f"dataset {dataset.id} was prepared for benchmark {prepared_for.id} "
        f"({prepared_for.name}, plug-in {prepared_for.metrics_version}), but benchmark "
        f"{bench.id} ({bench.name}) takes data prepared for the plug-in "
        f"{bench.metrics_version}; nothing was sent",
        hint=f"prepare the raw cases for it ('sealbench dataset prepare --benchmark {bench.id}') "
        "and register that dataset")


def associate_asset(
    client: RegistryClient, kind: AssetKind, asset_id: int, benchmark: int, *,
    consent_exact: bool = False, consent: ConsentCheck | None = None,
) -> Association:
    """Ask benchmark ``benchmark`` to take the asset. A dataset prepared for a benchmark of
    another plug-in is refused before anything is sent (:func:`check_prepared_for`). For a
    dataset its owner asks for, ``consent`` runs first (what each run publishes; it raises to
    refuse). Asking again for a pending or approved link changes nothing."""
    bench = client.get_benchmark(benchmark)
    if kind == "dataset":
        check_prepared_for(client, client.get_dataset(asset_id), bench)
    if consent is not None:
        owns = kind == "dataset" and client.get_dataset(asset_id).owner_id == client.me().id
        consent(client, bench, asset_id if owns else None)
    try:
        row = client.request_association(
            kind, benchmark, asset_id, exact_release_consent=consent_exact and kind == "dataset")
    except ConflictError:
        current = next(
            (a for a in client.list_associations(kind, benchmark)
             if a.asset_id == asset_id and a.status in ("pending", "approved")),
            None,
        )
        if current is None:
            raise
        return Association(current, already=True)
    return Association(row, already=False)
