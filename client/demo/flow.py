"""``sealbench demo``: the whole confidential evaluation on one machine, offline, in minutes.

It starts the INSECURE mock confidential cloud and a real registry server process (SQLite, free
loopback ports, everything under one work directory it prints), creates an admin, a benchmark
authority, two hospitals and two model owners (the shipped reference model and the
deliberately weaker one), and then plays each role with the library calls the ``sealbench``
commands make (:mod:`sealbench.client.demo.participants`; each step is printed as the command
line it corresponds to):
publish and approve the BraTS benchmark; synthesise, prepare, register, seal and associate each
hospital's cases; register, seal and associate each model; approve; sync every owner's policy;
evaluate every approved (dataset, model) pair on the mock TEE; open and submit each result (the
registry verifies each result attestation); print the leaderboard; show that a debug image is
refused its keys; and say where everything is and how to explore it.

``--tee docker`` runs every evaluation in the real evaluation image on the local Docker engine
(built first when ``sealbench-eval:latest`` is absent; the benchmark pins that image's digest).
``--serve`` keeps the registry, its dashboard (``/ui/``) and the mock TEE up until Ctrl-C.

Each run's work folder is new, under the demo folder of :mod:`sealbench.client.demo.workdirs`
(``$SEALBENCH_DEMO_DIR``, else ``demo/`` in the user's cache directory) unless ``--workdir``
names one; it is kept (to explore, or to inspect a failure), and the demo ends by printing the
commands that remove it. ``--clean`` removes every demo folder there and nothing else.

This is a room of the library: it reads no environment and calls no command. Its entry point,
:mod:`sealbench.client.cli.demo` (``sealbench demo``, ``make demo``), parses the options, reads
the environment (the demo folder) and calls :func:`run_demo`, :func:`explore` or :func:`clean`.
The demo's profiles are its own (:func:`demo_profiles`), never the user's.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final, TypeVar

from rich.console import Console
from rich.rule import Rule

from sealbench.benchmarks.interface import EXACT_SUFFIX
from sealbench.client.demo import workdirs as demo_workdirs
from sealbench.client.demo.participants import Participants, console
from sealbench.client.errors import ClientError, ConfigError, KeyReleaseDeniedError
from sealbench.client.registry.local import (
    create_accounts,
    publish_log_key,
    registry_process,
)
from sealbench.client.registry.profiles import (
    ENV_CONFIG_DIR,
    Profile,
    ProfileStore,
    mock_account,
)
from sealbench.client.runs.options import RunOptions

__all__ = [
    "DEMO_DEFINITIONS",
    "DEMO_LOG",
    "DEMO_TEES",
    "DEMO_USERS",
    "DemoOutcome",
    "check_settings",
    "clean",
    "demo_profiles",
    "explore",
    "print_removal",
    "privacy_lines",
    "removal_lines",
    "run_demo",
]

#: Profile name → registry email (and whether the account is a registry admin).
DEMO_USERS: Final[dict[str, tuple[str, bool]]] = {
    "admin": ("admin@registry.demo", True),
    "authority": ("authority@brats.demo", False),
    "hospital-a": ("it@hospital-a.demo", False),
    "hospital-b": ("it@hospital-b.demo", False),
    "hospital-c": ("it@hospital-c.demo", False),
    "model-ref": ("ml@reference-lab.demo", False),
    "model-weak": ("ml@weaker-lab.demo", False),
}
_HOSPITALS: Final = ("hospital-a", "hospital-b")
#: The hospitals of the demo's second benchmark: the BraTS hospitals and a third, which joins
#: for WDBC only.
_WDBC_HOSPITALS: Final = (*_HOSPITALS, "hospital-c")
#: Real WDBC cases each hospital holds there: every case of the WDBC demo sites 0, 1 and 2 (all
#: 398 cases the shipped models were not trained on), so the pooled AUROC reads at ε 1 within
#: ±0.05 (its sensitivity is 1/k with k a third of the pooled cases: docs/privacy.md).
_WDBC_CASES: Final = (100, 120, 178)
#: ``sealbench demo --size``: the shipped definition the demo's BraTS part publishes, and whose
#: demo data the hospitals synthesise: each grid is its own benchmark (contract, models,
#: leaderboard), so small cases are published under brats-small, never in the full-size one.
DEMO_DEFINITIONS: Final[dict[str, str]] = {"full": "brats", "small": "brats-small"}
#: The TEE backends the demo runs on (``--tee``).
DEMO_TEES: Final = ("mock", "docker")
#: The file under the work folder that holds every command's output (unless ``--verbose``).
DEMO_LOG: Final = "demo.log"
T = TypeVar("T")


@dataclass(frozen=True)
class DemoOutcome:
    workdir: Path
    server: str
    benchmark_id: int
    #: The BraTS runs the hospitals made (``RunRecord``), the refusal the debug-image attack
    #: met, and the second benchmark's part.
    runs: tuple[Any, ...]
    refusal: str
    second: Any  # sealbench.client.demo.plugins.PluginDemoOutcome
    #: Each hospital's BraTS dataset.
    datasets: Mapping[str, int] = field(default_factory=dict)


class _Narrator:
    """Prints each step as the command line it stands for, then runs it (the library call that
    command makes, :class:`~sealbench.client.demo.participants.Participants`): with
    ``log`` (the default), whatever the command prints goes to that file, so the terminal shows
    the command lines, the sections and the closing summary; without it (``--verbose``),
    everything is printed."""

    def __init__(self, log: Path | None = None) -> None:
        self.console = console()
        self.log = log

    def section(self, title: str) -> None:
        self.console.print(Rule(title, style="cyan"))
        self._write(f"\n== {title}\n")

    def note(self, text: str) -> None:
        self.console.print(text, highlight=False)
        self._write(f"{text}\n")

    def step(self, argv: str, action: Callable[[], T]) -> T:
        """Print ``argv`` (written profile first, for readability here) as the command line a
        user types, with ``--profile`` after the subcommand where it belongs."""
        match = re.match(r"--profile (\S+) (.*)$", argv, re.S)
        line = f"{match.group(2)} --profile {match.group(1)}" if match else argv
        self.console.print(f"[bold green]$ sealbench {line}[/]", markup=True, highlight=False)
        if self.log is None:
            return action()
        with self.log.open("a", encoding="utf-8") as log, \
                contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            print(f"$ sealbench {line}", flush=True)
            return action()

    def _write(self, text: str) -> None:
        if self.log is not None:
            with self.log.open("a", encoding="utf-8") as log:
                log.write(text)


def _play(
    say: _Narrator, who: Participants, workdir: Path, cases: int, size: str, server: str,
    tee: str = "mock",
) -> DemoOutcome:
    from sealbench.client.assets.result_key import ensure_result_key
    from sealbench.client.registry.definitions import (
        _plugin_of_definition,
        load_benchmark_definition,
        shipped_model_bytes,
    )

    shipped = DEMO_DEFINITIONS[size]
    definition = load_benchmark_definition(shipped)
    # Synthetic cases describe no patient: the authority publishes BraTS's exact variant (the
    # pin's '-exact' twin), and each hospital consents to it on screen, so the board shows
    # every model's figures over a handful of cases (private releases of 10 cases could not).
    exact_definition = workdir / f"{shipped}-synthetic-exact.json"
    exported = definition.model_dump(mode="json")
    exported["plugin"] = f"{definition.plugin}{EXACT_SUFFIX}"
    exact_definition.write_text(json.dumps(exported, indent=2))
    shipped_models = definition.model_extra or {}
    weak = shipped_models["baseline_models"][0]["name"]
    onnx_of = {}
    for profile, name in (("model-ref", shipped_models["reference_model"]["name"]),
                          ("model-weak", weak)):
        onnx = workdir / profile / f"{name}.onnx"
        onnx.parent.mkdir(parents=True, exist_ok=True)
        onnx.write_bytes(shipped_model_bytes(definition, name))
        onnx_of[profile] = (onnx, name)
    # each profile got its result key when it was added, as 'sealbench profile add' makes it
    for name, _ in who.store.names():
        ensure_result_key(who.store.secrets_dir(name))
    say.section("1. the reference lab registers the reference model; the authority publishes "
                "BraTS naming it; the registry admin approves it")
    ref_onnx, ref_name = onnx_of["model-ref"]
    reference = say.step(
        f"--profile model-ref model register {ref_onnx} --name {ref_name} --version 1.0 "
        f"--definition {shipped}",
        partial(who.model_register, "model-ref", ref_onnx, name=ref_name, version="1.0",
                definition=shipped),
    ).id
    # The benchmark also pools inside the TEE (issue 27): its aggregator image is the
    # backend's second workload of the same code (the mock's, or the Docker image built beside
    # the evaluation image).
    say.section("1b. synthetic cases, no patient to protect: BraTS is published exactly, by "
                "each hospital's consent")
    say.note(f"synthetic cases: no patient to protect. The authority publishes BraTS's exact "
             f"variant ({exported['plugin']}, exported with 'benchmark definition export "
             f"{shipped}' and its pin switched) and each hospital consents on screen "
             "(--consent-exact-release): exact figures, labelled 'exact' on the board")
    bench = say.step(
        f"--profile authority benchmark create --definition {exact_definition} --tee {tee} "
        f"--reference-model {reference} --pool-in-tee",
        partial(who.benchmark_create, "authority", str(exact_definition), tee=tee,
                reference_model=reference, pool_in_tee=True),
    )
    b = bench.id
    say.step(f"--profile admin benchmark approve {b}", partial(who.benchmark_approve, "admin", b))

    say.section("2. model owners check, register, seal and associate their models")
    models: dict[str, int] = {"model-ref": reference}
    for profile, (onnx, name) in onnx_of.items():
        if profile not in models:
            models[profile] = say.step(
                f"--profile {profile} model register {onnx} --name {name} --version 1.0 "
                f"--benchmark {b}",
                partial(who.model_register, profile, onnx, name=name, version="1.0",
                        benchmark=b),
            ).id
        m = models[profile]
        say.step(f"--profile {profile} model seal {onnx} --model {m}",
                 partial(who.seal, profile, "model", m, onnx))
        say.step(f"--profile {profile} model associate --model {m} --benchmark {b}",
                 partial(who.associate, profile, "model", m, b))

    say.section(
        f"3. each hospital prepares {cases} synthetic case(s), registers, seals, associates"
    )
    minimum = _plugin_of_definition(definition).small_cell_minimum
    if cases < minimum:
        say.note(f"note: {cases} case(s) per hospital is under the benchmark's small-cell "
                 f"minimum of {minimum}: the enclave withholds every public summary (the "
                 "hospitals still open their per-case results) and the leaderboard stays empty")
    datasets: dict[str, int] = {}
    for index, profile in enumerate(_HOSPITALS):
        base = workdir / profile
        raw, prepared = base / "raw", base / "prepared"
        seed = 1 + index * 1000
        say.step(
            f"--profile {profile} dataset synthesize {raw} --cases {cases} --benchmark {b} "
            f"--first-seed {seed}",
            partial(who.dataset_synthesize, profile, raw, cases=cases, benchmark=b,
                    first_seed=seed),
        )
        say.step(
            f"--profile {profile} dataset prepare {raw} {prepared} --benchmark {b}",
            partial(who.dataset_prepare, profile, raw, prepared, benchmark=b),
        )
        name = f"{profile}-glioma"
        d = say.step(
            f"--profile {profile} dataset register {prepared} --name {name} --benchmark {b}",
            partial(who.dataset_register, profile, prepared, name=name, benchmark=b),
        ).id
        datasets[profile] = d
        say.step(f"--profile {profile} dataset seal {prepared} --dataset {d}",
                 partial(who.seal, profile, "dataset", d, prepared))
        say.step(f"--profile {profile} dataset associate --dataset {d} --benchmark {b} "
                 "--consent-exact-release",
                 partial(who.associate, profile, "dataset", d, b,
                         consent_exact_synthetic=True))

    say.section("4. the authority approves every request; every owner syncs its key policy")
    for d in datasets.values():
        say.step(
            f"--profile authority association approve --benchmark {b} --dataset {d}",
            partial(who.association_approve, "authority", b, dataset=d),
        )
    for m in models.values():
        say.step(
            f"--profile authority association approve --benchmark {b} --model {m}",
            partial(who.association_approve, "authority", b, model=m),
        )
    for profile, d in datasets.items():
        say.step(f"--profile {profile} policy sync --dataset {d}",
                 partial(who.policy_sync, profile, "dataset", d))
    for profile, m in models.items():
        say.step(f"--profile {profile} policy sync --model {m}",
                 partial(who.policy_sync, profile, "model", m))

    say.section(f"5. each hospital evaluates every approved model inside the ({tee}) TEE")
    finished: dict[str, list[Any]] = {}
    for profile, d in datasets.items():
        finished[profile] = say.step(
            f"--profile {profile} run --benchmark {b} --dataset {d} --all-models --tee {tee}",
            partial(who.run, profile,
                    RunOptions(benchmark=b, dataset=d, all_approved=True, tee=tee)),
        )

    say.section("6. each hospital opens its results locally and submits the public summaries")
    for profile, records in finished.items():
        for record in records:
            say.step(f"--profile {profile} result open {record.run_id}",
                     partial(who.result_open, profile, record.run_id))
            say.step(f"--profile {profile} result submit {record.run_id}",
                     partial(who.result_submit, profile, record.run_id))

    say.section("6b. the authority pools each model's results inside the TEE: one noise "
                "draw over every hospital's cases, nobody sees a hospital's exact figure")
    say.step(f"--profile authority benchmark pool {b} --tee {tee}",
             partial(who.pool, "authority", b, tee))
    say.section("7. the authority reads the verified leaderboard")
    say.step(f"--profile authority benchmark leaderboard {b}",
             partial(who.leaderboard, "authority", b))

    say.section("8. an attack: the hospital launches a debug image to get at the model")
    attacker, victim = _HOSPITALS[0], models["model-ref"]
    try:
        say.step(
            f"--profile {attacker} run --benchmark {b} --dataset {datasets[attacker]} "
            f"--model {victim} --tee {tee} --insecure-debug-image --force",
            partial(who.run, attacker,
                    RunOptions(benchmark=b, dataset=datasets[attacker], model=victim, tee=tee,
                               force=True, insecure_debug_image=True)),
        )
    except KeyReleaseDeniedError as exc:
        refusal = str(exc)
        say.note(f"refused, as it must be: {refusal}")
    else:
        raise ClientError("the debug image was released the keys: the policies are broken")
    say.step("--profile admin audit verify", partial(who.audit_verify, "admin"))
    # A second benchmark of another plug-in, next to BraTS: real breast-cancer cases (WDBC),
    # three disjoint sites (a third hospital joins for it), the two shipped classifiers
    # (client/demo/plugins.py).
    from sealbench.client.demo.plugins import play_plugin_benchmark

    second = play_plugin_benchmark(say, who, workdir, "wdbc", hospitals=_WDBC_HOSPITALS,
                                   labs=("model-ref", "model-weak"), cases=_WDBC_CASES,
                                   tee=tee, number=9)
    runs = tuple(record for records in finished.values() for record in records)
    return DemoOutcome(workdir, server, b, runs, refusal, second, dict(datasets))


def _ensure_image(say: _Narrator) -> None:
    """Build the evaluation image unless ``sealbench-eval:latest`` is present and was built
    from this checkout (its source-digest label, see :mod:`sealbench.client.images.source`):
    the benchmark then pins that image's digest. A stale image is rebuilt (what
    ``sealbench image build`` does, through the same library call)."""
    from sealbench.client.images import pinned
    from sealbench.client.images.source import StaleImageError

    image_module = pinned.docker_image_module()
    say.section("0. the benchmark authority builds the evaluation image (Docker backend)")
    engine = image_module.connect_engine()
    source = image_module.checkout_source()

    def build() -> None:
        root = source if source is not None else image_module.find_source_root(Path.cwd())
        built = image_module.build_image(engine, root, on_progress=console().print)
        console().print(f"image {built.reference}\ndigest {built.digest}")
        if built.aggregator is not None:
            console().print(f"aggregator {built.aggregator.reference}\n"
                            f"aggregator digest {built.aggregator.digest}")

    try:
        if source is None:  # installed without a checkout: nothing to build or compare with
            found = image_module.local_image(engine)
        else:
            found = image_module.fresh_local_image(engine, source)
    except image_module.EngineUnavailableError:
        raise
    except StaleImageError as exc:
        say.console.print(f"{exc}: rebuilding it")
        say.step("image build", build)
    except image_module.ImageBuildError:
        say.step("image build", build)
    else:
        why = "built from this checkout" if source else "no checkout to compare it with"
        say.console.print(f"evaluation image {found.reference} present ({found.digest}), "
                          f"reused: {why}")
        # the aggregator (issue 27) is the evaluation image's layers with its own command: an
        # image built before it existed gets it now, from those very layers
        aggregator = image_module.build_aggregator_image(engine, found.digest)
        say.console.print(f"aggregator image {aggregator.reference} ({aggregator.digest})")


def _serve(server: str, profiles: Path) -> None:
    """Say where the dashboard is, how to sign in and how to use the CLI against the servers
    from another terminal (the export the profiles need, and how to put ``sealbench`` on the
    PATH), then wait for Ctrl-C (or SIGTERM)."""
    # A flag, not a threading.Event: a handler that takes a lock can interrupt the main
    # thread while it holds that same lock (a second Ctrl-C inside Event.wait deadlocked).
    stop: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: stop.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        shown = console()
        shown.print(Rule("serving", style="cyan"))
        shown.print(f"dashboard             {server}/ui/")
        shown.print(f"sign-in tokens        in {profiles} (one profile per role; sign in "
                    "with its token)")
        shown.print("the CLI, from another terminal:", highlight=False)
        for line in _cli_lines(profiles.parent):
            shown.print(f"  {line}", highlight=False)
        shown.print("serving the registry and the mock TEE until Ctrl-C")
        sys.stdout.flush()
        while not stop:
            time.sleep(0.2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _cli_lines(config: Path) -> tuple[str, ...]:
    """How another shell reaches a serving demo: its profiles' folder, and ``sealbench`` on the
    PATH (this environment's, activated when it is a virtual environment)."""
    bin_dir = Path(sys.executable).parent
    activate = bin_dir / "activate"
    on_path = (f"source {shlex.quote(str(activate))}" if activate.is_file()
               else f"export PATH={shlex.quote(str(bin_dir))}:$PATH")
    return (f"export {ENV_CONFIG_DIR}={shlex.quote(str(config))}",
            f"{on_path}   # puts 'sealbench' on the PATH",
            "sealbench profile ls; sealbench inbox --profile hospital-a")


def _sealbench_command() -> str:
    """This installation's ``sealbench`` script, quoted for a shell."""
    return shlex.quote(str(Path(sys.executable).parent / "sealbench"))


def removal_lines(workdir: Path, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The commands that remove ``workdir`` (and, when it is under the demo folder, every demo
    folder), to print where the demo ends or fails; ``environ`` is the environment the caller
    was started with (its ``$SEALBENCH_DEMO_DIR`` names the demo folder)."""
    lines = [f"rm -rf {shlex.quote(str(workdir))}"]
    root = demo_workdirs.demo_root(environ)
    if demo_workdirs.is_cleanable(workdir, root):
        override = environ.get(demo_workdirs.ENV_DEMO_DIR)
        env = f"{demo_workdirs.ENV_DEMO_DIR}={shlex.quote(override)} " if override else ""
        lines.append(f"{env}{_sealbench_command()} demo --clean  # every demo folder in {root}")
    return tuple(lines)


def print_removal(shown: Console, workdir: Path, headline: str,
                  environ: Mapping[str, str]) -> None:
    """Say how big ``workdir`` is and the commands that remove it."""
    size = demo_workdirs.human_size(demo_workdirs.disk_usage(workdir))
    shown.print(f"{headline} ({size}); to remove it:", highlight=False)
    for line in removal_lines(workdir, environ):
        shown.print(f"  {line}", highlight=False)


def clean(root: Path) -> demo_workdirs.CleanReport:
    """``sealbench demo --clean``: remove the demo folders under ``root`` and say what that
    freed."""
    report = demo_workdirs.clean(root)
    shown = console()
    for removed in report.removed:
        shown.print(f"removed {removed.path} ({demo_workdirs.human_size(removed.size_bytes)})")
    for path in report.in_use:
        shown.print(f"left {path}: a running demo uses it")
    if report.other:
        entries = "entry" if len(report.other) == 1 else "entries"
        shown.print(f"left {len(report.other)} other {entries} of {report.root} untouched")
    count = len(report.removed)
    noun = "folder" if count == 1 else "folders"
    shown.print(
        f"freed {demo_workdirs.human_size(report.freed_bytes)} ({count} demo {noun} removed "
        f"from {report.root})"
    )
    return report


def _summary(who: Participants, outcome: DemoOutcome, tee: str, log: Path | None) -> None:
    """What ran, what was refused and why, each benchmark's leaderboard (what
    ``sealbench benchmark leaderboard B`` prints: the servers are still up) and where to look
    next."""
    shown = console()
    shown.print(Rule("summary", style="cyan"))
    parts = ((outcome.benchmark_id, outcome.runs), (outcome.second.benchmark_id,
                                                    outcome.second.runs))
    client = who.client("authority")
    owned = ((outcome.benchmark_id, outcome.datasets),
             (outcome.second.benchmark_id, outcome.second.datasets))
    for benchmark_id, records in parts:
        bench = client.get_benchmark(benchmark_id)
        done = sum(r.status == "succeeded" for r in records)
        sites = len({r.dataset_id for r in records})
        models = len({r.model_id for r in records})
        shown.print(
            f"benchmark {benchmark_id} {bench.name} ({bench.metrics_version}): {done} of "
            f"{len(records)} runs succeeded on the {tee} TEE ({sites} hospitals x "
            f"{models} models); the registry verified each result's attestation",
            highlight=False)
    shown.print("refused: the debug-image attack got no keys "
                f"({_first_line(outcome.refusal)})", highlight=False)
    shown.print("the registry's audit log verified intact ('audit verify')")
    for benchmark_id, datasets in owned:
        shown.print()
        who.leaderboard("authority", benchmark_id)
        for line in privacy_lines(who, benchmark_id, datasets):
            shown.print(line, highlight=False, markup=False)
    shown.print()
    if log is not None:
        shown.print(f"every command's output  {log}  (--verbose prints it as it runs)",
                    highlight=False)
    w = outcome.workdir
    shown.print(f"work directory          {w}  (registry, mock TEE, profiles, hospital files)",
                highlight=False)
    shown.print(f"explore it              {_sealbench_command()} demo --explore "
                f"{shlex.quote(str(w))}  (its registry, dashboard and mock TEE, until "
                "Ctrl-C)", highlight=False)


def privacy_lines(who: Participants, benchmark_id: int,
                  datasets: Mapping[str, int]) -> tuple[str, str]:
    """One line each: what privacy cost on benchmark ``benchmark_id`` (each hospital's budget
    debits, read from the registry's ledger) and what it bought (the board's figures: how many
    models show a number, at what 95% half-width over how many cases, or why not)."""
    from sealbench.benchmarks.planning import plural

    board = who.client("authority").pooled_leaderboard(benchmark_id)
    spent = []
    exact = 0
    for hospital, d in datasets.items():
        budget = who.client(hospital).dataset_budget(d)
        mine = [x for x in budget.debits if x.benchmark_id == benchmark_id]
        private = [x for x in mine if not x.exact]
        pooled = sum(x.release == "pooled" for x in private)
        exact += len(mine) - len(private)
        if private:
            spent.append(f"{hospital} ε {budget.spent_epsilon:.2g} of its "
                         f"{budget.budget_epsilon:g} ({plural(len(private), 'release')}, "
                         f"{pooled} pooled in the TEE)")
    if spent:
        cost = "privacy cost: " + "; ".join(spent)
    elif exact:
        cost = (f"privacy cost: none counted: {plural(exact, 'exact release')} of synthetic "
                "cases (no patient to protect), by the hospitals' on-screen consent")
    else:
        cost = "privacy cost: nothing released yet"
    values = [s.values[0] for s in board.standings]
    shown = [v for v in values if v.pooled is not None]
    halves = [(v.ci95_high - v.ci95_low) / 2 for v in shown
              if v.ci95_low is not None and v.ci95_high is not None]
    cases = max((v.n_cases for v in shown), default=0)
    how = ("exact" if all(v.epsilon is None for v in shown)
           else f"at ε {max(v.epsilon for v in shown if v.epsilon is not None):g}")
    where = " pooled in the TEE" if any(v.tee_pooled for v in shown) else ""
    if shown:
        bought = (f"bought: {len(shown)} of {plural(len(values), 'model')} shown {how}{where} "
                  f"over {plural(cases, 'case')}, 95% intervals ±{max(halves, default=0):.3f} "
                  f"at widest, "
                  f"{plural(len({s.rank for s in board.standings if s.rank}), 'rank group')}")
    else:
        bought = "bought: no figure yet"
    withheld = [v.withheld_reason for v in values if v.withheld_reason]
    if withheld:
        bought += f"; withheld: {withheld[0]}"
    return cost, bought


def _first_line(text: str, limit: int = 120) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def check_settings(cases: int, size: str, tee: str) -> None:
    """Refuse a demo that cannot run (:class:`ConfigError`, naming the option)."""
    if size not in DEMO_DEFINITIONS:
        raise ConfigError(f"--size must be one of {', '.join(DEMO_DEFINITIONS)}")
    if cases < 1:
        raise ConfigError("--cases must be at least 1")
    if tee not in DEMO_TEES:
        raise ConfigError(f"--tee must be one of {', '.join(DEMO_TEES)} for the demo",
                          hint="a Confidential Space run needs your Google Cloud project")


def demo_profiles(root: Path) -> ProfileStore:
    """The profiles of the demo in work folder ``root``: its own folder (``config/``, data
    under ``config/data``), no environment overrides. (``SEALBENCH_CONFIG_DIR=ROOT/config``
    gives the CLI the same profiles.)"""
    config = root / "config"
    return ProfileStore(config, config / "data", {})


def run_demo(root: Path, *, cases: int = 5, size: str = "full", tee: str = "mock",
             serve: bool = False, log: Path | None = None,
             environ: Mapping[str, str]) -> DemoOutcome:
    """The whole demo in the empty work folder ``root`` (claimed while it runs); ``log``:
    where every step's output goes (None: printed); ``environ``: the environment the caller was
    started with, read only to say how to remove the folder. The folder stays afterwards (and
    when the demo fails: the commands that remove it are printed on stderr)."""
    check_settings(cases, size, tee)
    started = time.monotonic()
    console().print(f"sealbench demo: everything goes under {root}")
    if log is not None:
        console().print(f"each command's output goes to {log}; the terminal shows the commands "
                        "and a summary (--verbose: everything)", highlight=False)
    with demo_workdirs.claim(root):
        try:
            outcome = _run(root, cases, size, tee, serve, log)
        except BaseException:
            failed = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)
            if log is not None:
                failed.print(f"every command's output, up to the failure: {log}",
                             highlight=False)
            print_removal(failed, root, "the demo's files stay for inspection", environ)
            raise
    print_removal(console(), root, "this demo's files stay in its work folder", environ)
    console().print(f"demo finished in {time.monotonic() - started:.0f} s")
    return outcome


def _run(root: Path, cases: int, size: str, tee: str, serve: bool,
         log: Path | None) -> DemoOutcome:
    """The demo in the claimed work folder ``root``."""
    from sealbench.mocktee import MockCloud

    mock_state, server_data = root / "mock-tee", root / "registry"
    with MockCloud(mock_state) as cloud:
        tokens = create_accounts(server_data, DEMO_USERS)
        # The demo runs the registry, so it knows the log key: every profile pins it (no trust
        # on first use), as a participant does with the key its operator gives it.
        log_key = publish_log_key(server_data)
        with registry_process(server_data, cloud.endpoints, root / "server.log") as server:
            store = demo_profiles(root)
            for name, token in tokens.items():
                store.add(
                    name,
                    Profile(server=server, token=token, account=mock_account(mock_state),
                            log_key=log_key),
                    make_current=name == "authority",
                )
            who = Participants(store)
            try:
                say = _Narrator(log)
                if tee == "docker":
                    _ensure_image(say)
                outcome = _play(say, who, root, cases, size, server, tee)
                _summary(who, outcome, tee, log)
            finally:
                who.close()
            if serve:
                _serve(server, store.path)
    return outcome


def explore(root: Path) -> None:
    """``sealbench demo --explore WORKDIR``: serve a finished demo's registry (its database and
    log key) and mock TEE (its state) again on free ports, the folder's profiles pointed at the
    new registry address, until Ctrl-C."""
    from sealbench.mocktee import MockCloud

    mock_state, server_data = root / "mock-tee", root / "registry"
    if not ((server_data / "registry.sqlite3").is_file() and mock_state.is_dir()
            and (root / "config" / "profiles.json").is_file()):
        raise ConfigError(f"{root} is not the work folder of a finished demo (no registry "
                          "database, mock TEE state or profiles there)",
                          hint="the demo prints its work folder first ('everything goes "
                          "under ...'); 'sealbench demo' makes a new one")
    with demo_workdirs.claim(root), MockCloud(mock_state) as cloud, \
            registry_process(server_data, cloud.endpoints, root / "server.log") as server:
        store = demo_profiles(root)
        for name, _ in store.names():
            store.update(name, server=server)
        _serve(server, store.path)
