"""``sealbench run`` as library calls: :func:`prepare_runs` resolves a profile's
:class:`~sealbench.client.runs.options.RunOptions` into a plan, a launcher and each run's
specification; :meth:`PreparedRuns.execute` runs them with
:class:`~sealbench.client.runs.batch.Runner` (SIGINT and SIGTERM interrupting it);
:func:`run_evaluations` is both. The command, the demo and the tests only render the events."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from sealbench.benchmarks.interface import BenchmarkError, RunLimits, run_limits_of
from sealbench.client import backends
from sealbench.client.assets.accounts import profile_account
from sealbench.client.assets.result_key import load_result_key
from sealbench.client.backends import LOCAL_MOCK_BACKENDS
from sealbench.client.errors import ClientError, ConfigError
from sealbench.client.registry.api import RegistryClient
from sealbench.client.registry.profiles import ResolvedProfile
from sealbench.client.runs.attestation_keys import gcp_key_source
from sealbench.client.runs.batch import (
    Runner,
    RunnerEvent,
    RunOutcome,
    RunPlan,
    StageTimeouts,
    iam_wait_window,
    owners_synced_at,
    plan_runs,
    with_run_options,
)
from sealbench.client.runs.options import RunOptions
from sealbench.client.runs.outcome import explain_refusals, translate_launch_error
from sealbench.client.runs.records import RunRecord, RunStore
from sealbench.client.runs.spec import approved_pairs, build_spec
from sealbench.contract.spec import MAX_IAM_WAIT_S

if TYPE_CHECKING:
    from pydantic import BaseModel

    from sealbench.client.runs.launchers import Launcher
    from sealbench.client.runs.launchers.trust import TeeVerifier
    from sealbench.contract.pin import BenchmarkPin
    from sealbench.contract.spec import RunSpec
    from sealbench.platforms.account import AccountRoutes

__all__ = [
    "RUN_OVERHEAD_S",
    "LauncherFactory",
    "PreparedRuns",
    "RunBatch",
    "interrupt_on_signals",
    "local_routes",
    "prepare_runs",
    "run_evaluations",
    "run_timeout_for",
    "tee_verifier",
]


class LauncherFactory(Protocol):
    """Builds the launcher of a backend for a profile
    (:func:`sealbench.client.runs.launchers.for_profile.make_launcher` by default)."""

    def __call__(
        self, backend: str, *, profile: ResolvedProfile, client: RegistryClient,
        benchmark_id: int, endpoints: AccountRoutes | None, mock_tee: Path | None,
        debug: bool, image: str | None, cs: BaseModel | None,
    ) -> Launcher: ...


def _default_launcher_factory() -> LauncherFactory:
    from sealbench.client.runs.launchers.for_profile import make_launcher

    return make_launcher


def local_routes(profile: ResolvedProfile, mock_tee: Path | None) -> AccountRoutes:
    """Where runs go of the account whose launchers run on this machine (``mock_tee``'s, else
    the profile's: the INSECURE mock's process and Docker launchers), with their control
    endpoint (:attr:`~sealbench.platforms.account.AccountRoutes.control_url`), as its platform
    answers; :class:`ConfigError` when none is configured or running."""
    account = profile_account(profile, mock_tee)
    routes = None if account is None else account.routes()
    if routes is None or not routes.results_here or routes.control_url is None:
        raise ConfigError(
            f"profile {profile.name} has no mock TEE configured",
            hint="pass --mock-tee DIR (the state directory of 'sealbench mock-tee up')",
        )
    return routes


def tee_verifier(routes: AccountRoutes | None) -> TeeVerifier:
    """The verifier runs of an account attest to (its platform's answer); Google's without an
    account."""
    from sealbench.client.runs.launchers.trust import TeeVerifier

    if routes is not None:
        return TeeVerifier(routes.verifier.issuer, routes.verifier_label)
    return TeeVerifier(gcp_key_source({}).issuer, "Google's Confidential Space verifier")


def _visible_results(client: RegistryClient, benchmark: int) -> tuple[Any, ...]:
    try:
        return client.list_results(benchmark)
    except ClientError:
        return ()


@contextlib.contextmanager
def interrupt_on_signals(interrupt: Callable[[], None]) -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM call ``interrupt`` (only on the main thread: other
    threads cannot set handlers); the previous handlers are put back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, lambda *_: interrupt())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@dataclass(frozen=True)
class RunBatch:
    """How a batch of runs ended: the runner's outcome and its errors (a refused key release
    explained with whose grants lag)."""

    outcome: RunOutcome
    errors: tuple[Exception, ...]

    @property
    def records(self) -> list[RunRecord]:
        """The pairs skipped (already evaluated) and the runs that succeeded."""
        return [*self.outcome.skipped, *self.outcome.succeeded]

    @property
    def interrupted(self) -> bool:
        return self.outcome.interrupted

    def raise_first_error(self) -> None:
        """Raise the first error of the batch as a client error (none: return)."""
        if self.errors:
            first = self.errors[0]
            raise first if isinstance(first, ClientError) else translate_launch_error(first)


@dataclass(frozen=True)
class PreparedRuns:
    """What :func:`prepare_runs` resolved: the plan, the launcher, the run store and each run's
    specification (``make_spec(dataset_id, model_id, run_id)``)."""

    options: RunOptions
    backend: str
    plan: RunPlan
    launcher: Launcher
    store: RunStore
    make_spec: Callable[[int, int, str], RunSpec]
    client: RegistryClient

    def execute(
        self, *, on_event: Callable[[RunnerEvent], None] | None = None, handle_signals: bool = True
    ) -> RunBatch:
        """Run the plan, ``on_event`` receiving each event; with ``handle_signals``, SIGINT and
        SIGTERM (on the main thread) interrupt the runner."""
        o = self.options
        runner = Runner(
            self.launcher, self.store, self.make_spec, client=self.client, tee=self.backend,
            parallel=o.parallel, timeouts=o.timeouts, keep_on_interrupt=o.keep_vm,
            on_event=on_event,
        )
        with interrupt_on_signals(runner.interrupt) if handle_signals else contextlib.nullcontext():
            outcome = runner.run(self.plan)
        # a refused key release names whose grants lag (asked while the client is open)
        errors = explain_refusals(self.client, runner.errors, outcome.records)
        return RunBatch(outcome, tuple(errors))


def prepare_runs(
    profile: ResolvedProfile,
    client: RegistryClient,
    options: RunOptions,
    *,
    launcher_factory: LauncherFactory | None = None,
) -> PreparedRuns:
    """Check ``options``, find the approved pairs, build the backend's launcher and plan the
    runs not yet done (all of them with ``force``); each run's specification is sealed to the
    profile's result key and checked against what its owners trust."""
    from sealbench.client.runs.launchers.trust import check_owner_trust, issuers_released_to

    backend = backends.check_tee(options.tee)
    options.check()
    make_launcher = launcher_factory or _default_launcher_factory()
    o = options
    benchmark = o.benchmark
    pairs = approved_pairs(client, benchmark, o.dataset, o.model)
    recipient = load_result_key(profile.secrets_dir)
    account = profile_account(profile, o.mock_tee)
    routes = None if account is None else account.routes()
    # a TEE that is not the mock's (its processes and containers, or a mock profile's
    # Confidential Space VMs on this machine) writes its result to the owner's storage
    production = backend not in LOCAL_MOCK_BACKENDS and not (routes and routes.results_here)
    result_uri = o.result_uri
    if production and not result_uri and routes is not None:
        result_uri = routes.result_prefix
    if production and not result_uri:
        raise ConfigError(f"a run on --tee {backend} writes its result to cloud storage",
                          hint="pass --result-uri (gs://BUCKET/PREFIX on Google Cloud), or "
                          "add a profile with your cloud account")
    endpoints = None if production else local_routes(profile, o.mock_tee)
    launcher = make_launcher(
        backend, profile=profile, client=client, benchmark_id=benchmark,
        endpoints=endpoints, mock_tee=o.mock_tee, debug=o.insecure_debug_image,
        image=o.image, cs=o.launch,
    )
    store = RunStore(profile.data_dir / "runs")
    metrics_version = client.get_benchmark(benchmark).metrics_version
    plan = plan_runs(store, benchmark_id=benchmark, pairs=pairs,
                     image_digest=launcher.image_digest, metrics_version=metrics_version,
                     force=o.force)
    cases = {d: client.get_dataset(d).case_count for d in {p.dataset_id for p in plan.todo}}
    o = replace(o, run_timeout_s=run_timeout_for(
        _limits_of(plan.metrics_version), cases, o.run_timeout_s))
    verifier = tee_verifier(routes)
    destinations = None if routes is None else routes.token_destinations

    def make_spec(dataset_id: int, model_id: int, run_id: str) -> RunSpec:
        spec = build_spec(
            client, run_id=run_id, benchmark_id=benchmark, dataset_id=dataset_id,
            model_id=model_id, recipient=recipient,
            result_dir=profile.data_dir / "results" / run_id,
            endpoints=destinations,
            result_uri=f"{result_uri.rstrip('/')}/{run_id}" if result_uri else None,
        )
        window = o.iam_wait_s if o.iam_wait_s is not None else iam_wait_window(
            owners_synced_at(client, dataset_id, model_id), datetime.now(UTC))
        spec = with_run_options(spec, iam_wait_s=window,
                                allow_cpu_fallback=o.allow_cpu_fallback)
        ids = {"dataset": dataset_id, "model": model_id}
        check_owner_trust(spec, verifier, trusted_issuers=lambda kind: issuers_released_to(
            _visible_results(client, benchmark), kind, ids[kind]))
        return spec

    return PreparedRuns(o, backend, plan, launcher, store, make_spec, client)


def _limits_of(pin: BenchmarkPin) -> RunLimits:
    """The run limits of the benchmark's plug-in, as the enclave will enforce them."""
    from sealbench.client.plugins import installed

    try:
        return run_limits_of(installed(pin))
    except BenchmarkError as exc:
        raise ConfigError(f"the benchmark's plug-in {pin} cannot be loaded here: {exc}",
                          hint="install the plug-in the benchmark pins") from exc


#: What a run may take besides evaluating its cases: attestation, key release (and waiting for
#: IAM to apply a fresh grant, at most MAX_IAM_WAIT_S), the model's download and load, sealing
#: and uploading the result.
RUN_OVERHEAD_S: Final = 3600.0 + MAX_IAM_WAIT_S


def run_timeout_for(limits: RunLimits, case_counts: Mapping[int, int],
                    asked: float | None) -> float:
    """Seconds to wait for each run: ``asked`` (``--run-timeout``), or by default the longer of
    :attr:`StageTimeouts.workload_s` and what the benchmark's attested limits let the largest
    dataset take (:meth:`RunLimits.evaluation_seconds` plus :data:`RUN_OVERHEAD_S`).

    An ``asked`` time shorter than that is refused (:class:`ConfigError`): the per-run limit
    would not follow from the per-case ones, and a model that spins on enough cases, each up
    to its limit, would make the run time out, a failure every reader of the run sees and
    whose cause is the cases (issue 40)."""
    needed = max((limits.evaluation_seconds(n) for n in case_counts.values()), default=0.0)
    needed += RUN_OVERHEAD_S
    if asked is None:
        return max(StageTimeouts.workload_s, needed)
    if asked < needed:
        largest = max(case_counts, key=lambda d: case_counts[d])
        raise ConfigError(
            f"--run-timeout {asked:g} s is shorter than a run of dataset {largest} may take "
            f"({case_counts[largest]} cases at the benchmark's {limits.case_seconds:g} s per "
            f"case, its {limits.run_seconds:g} s of scoring and {RUN_OVERHEAD_S:g} s to launch "
            f"and publish: {needed:g} s); a model spinning on cases up to their limit would "
            "fail the run, and every reader of the run would see it",
            hint=f"leave --run-timeout out, or give it at least {needed:g}")
    return asked


def run_evaluations(
    profile: ResolvedProfile,
    client: RegistryClient,
    options: RunOptions,
    *,
    on_event: Callable[[RunnerEvent], None] | None = None,
    handle_signals: bool = True,
    launcher_factory: LauncherFactory | None = None,
) -> RunBatch:
    """:func:`prepare_runs`, then :meth:`PreparedRuns.execute`."""
    prepared = prepare_runs(profile, client, options, launcher_factory=launcher_factory)
    return prepared.execute(on_event=on_event, handle_signals=handle_signals)
