"""The demo's participants acting through the library: each method is one ``sealbench`` command
the demo narrates, done by the library function that command calls (never the command), as the
profile it names in the demo's own :class:`~sealbench.client.registry.profiles.ProfileStore`.
Each prints a short account of what it did (the demo's log), and the leaderboard exactly as
``sealbench benchmark leaderboard`` prints it
(:func:`sealbench.client.views.render.print_table`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from sealbench.client import plugins
from sealbench.client.assets import lifecycle
from sealbench.client.assets.policy import sync_asset_policy
from sealbench.client.errors import ConfigError
from sealbench.client.registry import audit_log, governance
from sealbench.client.registry.api import AssetKind, RegistryClient
from sealbench.client.registry.profiles import ProfileStore, ResolvedProfile
from sealbench.client.runs.inbox import consent_warning, privacy_cost
from sealbench.client.runs.launch import run_evaluations
from sealbench.client.runs.local_results import open_local_result, submit_local_result
from sealbench.client.runs.options import RunOptions
from sealbench.client.runs.submit import keep_result_receipt
from sealbench.client.views.render import (
    association,
    benchmark_created,
    consent_plan,
    dataset_registered,
    exact_request,
    opened_result,
    policy_synced,
    pool_outcomes,
    print_table,
    receipt_kept,
    run_outcomes,
    submission_accepted,
)
from sealbench.server.schemas import (
    BenchmarkPublic,
    DatasetCreate,
    DatasetPublic,
    ModelPublic,
    ResultCreate,
)

if TYPE_CHECKING:
    from sealbench.client.runs.records import RunRecord

__all__ = ["SYNTHETIC_CONSENT", "Participants", "console"]


def console() -> Console:
    """A console on whatever stdout is now (the demo's log while a step runs)."""
    return Console(highlight=False, soft_wrap=True, markup=False)


def _say(text: str) -> None:
    console().print(text)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


class Participants:
    """Every profile of ``store`` (one per role), each with its own registry client, opened on
    first use and closed by :meth:`close`."""

    def __init__(self, store: ProfileStore) -> None:
        self.store = store
        self._clients: dict[str, RegistryClient] = {}

    def profile(self, who: str) -> ResolvedProfile:
        return self.store.resolve(who)

    def client(self, who: str) -> RegistryClient:
        if who not in self._clients:
            profile = self.profile(who)
            self._clients[who] = RegistryClient.connect(profile.server, profile.token)
        return self._clients[who]

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    # -- the benchmark's authority and the registry's admin -----------------------------------

    def benchmark_create(self, who: str, definition: str, *, tee: str,
                         reference_model: int | None = None,
                         pool_in_tee: bool = False) -> BenchmarkPublic:
        created = governance.create_benchmark(self.client(who), definition, tee=tee,
                                              reference_model=reference_model,
                                              pool_in_tee=pool_in_tee)
        benchmark_created(console(), created)
        return created

    def benchmark_approve(self, who: str, benchmark: int) -> BenchmarkPublic:
        b = governance.approve_benchmark(self.client(who), benchmark)
        _say(f"benchmark {b.id} is {b.state}")
        return b

    def association_approve(self, who: str, benchmark: int, *, dataset: int | None = None,
                            model: int | None = None) -> None:
        kind: AssetKind = "dataset" if dataset is not None else "model"
        asset = dataset if dataset is not None else model
        assert asset is not None
        done = governance.decide_association(self.client(who), kind, benchmark, asset,
                                             approve=True, consent=_consent)
        _say(f"{kind} {asset} in benchmark {benchmark}: {done.row.status}"
             + ("; nothing changed" if done.already else ""))

    def leaderboard(self, who: str, benchmark: int) -> None:
        """What ``sealbench benchmark leaderboard BENCHMARK`` prints."""
        print_table(console(), self.client(who).pooled_leaderboard(benchmark))

    def audit_verify(self, who: str) -> None:
        check = audit_log.verify_audit_log(self.client(who), self.profile(who), self.store)
        cp = check.report.checkpoint
        _say(f"audit chain intact: {check.report.events} events")
        _say(f"transparency log {cp.origin}: checkpoint of {cp.size} events (root "
             f"{cp.root_hash.hex()[:16]}…) signed by {check.signer}")

    # -- model owners and data owners ---------------------------------------------------------

    def model_register(self, who: str, onnx: Path, *, name: str, version: str,
                       benchmark: int | None = None, definition: str | None = None
                       ) -> ModelPublic:
        created = lifecycle.register_model(self.client(who), onnx, name, version,
                                           benchmark=benchmark, definition=definition, warn=_say)
        _say(f"model {created.id} registered: {created.name} {created.version}, "
             f"digest {created.digest}")
        return created

    def seal(self, who: str, kind: AssetKind, asset: int, source: Path) -> None:
        outcome = lifecycle.seal_owned_asset(self.profile(who), self.client(who), kind, asset,
                                             source)
        c = outcome.coordinates
        _say(f"{_plural(outcome.report.uploaded, 'object')} uploaded")
        _say(f"{kind} {asset} sealed to {c.storage_uri}\n  key {c.kms_key_name}\n"
             f"  guarded by {c.wip_provider}")

    def associate(self, who: str, kind: AssetKind, asset: int, benchmark: int, *,
                  consent_exact_synthetic: bool = False) -> None:
        """``dataset associate`` / ``model associate``; ``consent_exact_synthetic``: the hospital
        consents on screen to a benchmark that publishes exact figures of its synthetic cases
        (``--consent-exact-release``: no patient to protect)."""
        done = lifecycle.associate_asset(
            self.client(who), kind, asset, benchmark, consent_exact=consent_exact_synthetic,
            consent=_consent_synthetic if consent_exact_synthetic else _consent)
        association(console(), kind, asset, benchmark, done.row, already=done.already)

    def dataset_synthesize(self, who: str, raw: Path, *, cases: int, benchmark: int,
                           first_seed: int) -> list[str]:
        ids = lifecycle.synthesize_dataset(self.client(who), raw, cases, benchmark=benchmark,
                                           first_seed=first_seed)
        _say(f"{_plural(len(ids), 'synthetic case')} in {raw}")
        return ids

    def dataset_prepare(self, who: str, raw: Path, prepared: Path, *, benchmark: int) -> None:
        done = lifecycle.prepare_dataset(self.client(who), raw, prepared, benchmark=benchmark)
        for note in done.notes:
            _say(note)
        _say(f"prepared {_plural(len(done.accepted), 'case')} into {prepared}; digest "
             f"{done.dataset_digest}")

    def dataset_register(self, who: str, prepared: Path, *, name: str,
                         benchmark: int) -> DatasetPublic:
        def review(body: DatasetCreate) -> None:
            console().print(exact_request(body), markup=False, highlight=False,
                            soft_wrap=True)

        done = lifecycle.register_dataset(self.profile(who), self.client(who), prepared, name,
                                          benchmark=benchmark, review=review, warn=_say)
        dataset_registered(console(), done.dataset)
        return done.dataset

    def policy_sync(self, who: str, kind: AssetKind, asset: int) -> None:
        synced = sync_asset_policy(self.profile(who), self.client(who), kind, asset)
        policy_synced(console(), kind, asset, synced)

    # -- hospitals: runs and results ----------------------------------------------------------

    def pool(self, who: str, benchmark: int, tee: str) -> None:
        """What ``sealbench benchmark pool BENCHMARK --tee TEE`` does and prints."""
        from sealbench.client.runs.pool import pool_on_tee

        pool_outcomes(console(), pool_on_tee(self.profile(who), self.client(who), benchmark,
                                             tee=tee))

    def run(self, who: str, options: RunOptions) -> list[RunRecord]:
        batch = run_evaluations(self.profile(who), self.client(who), options)
        run_outcomes(console(), batch.outcome.records)
        batch.raise_first_error()
        return batch.records

    def result_open(self, who: str, run_id: str) -> None:
        record, opened = open_local_result(self.profile(who), run_id)
        opened_result(console(), run_id, record, opened)

    def result_submit(self, who: str, run_id: str) -> None:
        profile, client = self.profile(who), self.client(who)
        def confirm(body: ResultCreate) -> bool:
            console().print(exact_request(body, sized_member="attestation_token"),
                            markup=False, highlight=False, soft_wrap=True)
            return True

        done = submit_local_result(profile, client, run_id, confirm=confirm)
        submission_accepted(console(), done)
        receipt, path = keep_result_receipt(client, profile, self.store,
                                            done.result.id, done.opened)
        receipt_kept(console(), done.result.id, receipt, path)


#: What a demo hospital says on screen when it consents to exact releases of synthetic cases.
SYNTHETIC_CONSENT = ("synthetic cases: no patient to protect; the hospital consents on screen "
                     "to exact releases (--consent-exact-release)")


def _read_before_consent(client: RegistryClient, bench: BenchmarkPublic,
                         dataset: int | None) -> Any:
    """Say what an owner reads before consenting (the benchmark's warning, then for a dataset
    its privacy cost and the board's plan); the benchmark's release spec, None without a
    dataset."""
    warning = consent_warning(bench)
    if warning is not None:
        _say(warning)
    if dataset is None:
        return None
    spec: Any = plugins.plugin_for(bench).release_spec
    _say(privacy_cost(bench, spec, client.dataset_budget(dataset)))
    consent_plan(console(), client, bench, dataset)
    return spec


def _consent_synthetic(client: RegistryClient, bench: BenchmarkPublic,
                       dataset: int | None) -> None:
    """What an owner of synthetic cases reads, then consents to on screen: the benchmark
    publishes exact figures, and its cases describe no patient."""
    if _read_before_consent(client, bench, dataset) is not None:
        _say(f"dataset {dataset}: {SYNTHETIC_CONSENT}")


def _consent(client: RegistryClient, bench: BenchmarkPublic, dataset: int | None) -> None:
    """What an owner reads before consenting (the demo consents to no exact release)."""
    spec = _read_before_consent(client, bench, dataset)
    if spec is not None and spec.exact:
        raise ConfigError(f"benchmark {bench.id} publishes exact figures: the demo does not "
                          "consent to that")
