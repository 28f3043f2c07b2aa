"""``sealbench demo``: the whole confidential evaluation on one machine, offline, in minutes.

It starts the INSECURE mock confidential cloud and a real registry server process (SQLite, free
loopback ports, everything under one work directory it prints), creates an admin, a benchmark
authority, two hospitals and two model owners (the shipped reference model and the
deliberately weaker one), and then plays each role with the very command implementations a
user runs (each step is printed as the ``sealbench`` command line it corresponds to):
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
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Final, TypeVar

import typer
from rich.console import Console
from rich.rule import Rule

from sealbench.client.cli.common import err_console, out
from sealbench.client.demo import workdirs as demo_workdirs
from sealbench.client.errors import ClientError, KeyReleaseDeniedError
from sealbench.client.registry.local import (
    create_accounts,
    publish_log_key,
    registry_process,
    scoped_environ,
)
from sealbench.client.registry.profiles import (
    ENV_CONFIG_DIR,
    ENV_DATA_DIR,
    ENV_PROFILE,
    ENV_SERVER,
    ENV_TOKEN,
)

__all__ = ["DEMO_USERS", "DemoOutcome", "demo"]

#: Profile name → registry email (and whether the account is a registry admin).
DEMO_USERS: Final[dict[str, tuple[str, bool]]] = {
    "admin": ("admin@registry.demo", True),
    "authority": ("authority@brats.demo", False),
    "hospital-a": ("it@hospital-a.demo", False),
    "hospital-b": ("it@hospital-b.demo", False),
    "model-ref": ("ml@reference-lab.demo", False),
    "model-weak": ("ml@weaker-lab.demo", False),
}
_HOSPITALS: Final = ("hospital-a", "hospital-b")
#: Real WDBC cases each hospital holds in the demo's second benchmark.
_WDBC_CASES: Final = 100
_SERVER_START_S: Final = 60.0
_DEMO_TEES: Final = ("mock", "docker")
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


class _Narrator:
    """Prints each step as the command line it stands for, then runs its implementation: with
    ``log`` (the default), whatever the command prints goes to that file, so the terminal shows
    the command lines, the sections and the closing summary; without it (``--verbose``),
    everything is printed."""

    def __init__(self, log: Path | None = None) -> None:
        self.console = out()
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
    say: _Narrator, workdir: Path, cases: int, size: str, server: str, tee: str = "mock"
) -> DemoOutcome:
    from sealbench.client.assets.prepare import SIZE_DEFINITIONS
    from sealbench.client.cli import assets as a
    from sealbench.client.cli import registry as r
    from sealbench.client.cli import run as x
    from sealbench.client.cli.leaderboard import benchmark_leaderboard
    from sealbench.client.registry.workflows import (
        _plugin_of_definition,
        load_benchmark_definition,
        shipped_model_bytes,
    )

    # Each grid has its own benchmark (contract, models, leaderboard): small cases are published
    # under brats-small, never registered in the full-size BraTS benchmark.
    shipped = SIZE_DEFINITIONS[size]
    definition = load_benchmark_definition(shipped)
    shipped_models = definition.model_extra or {}
    weak = shipped_models["baseline_models"][0]["name"]
    onnx_of = {}
    for profile, name in (("model-ref", shipped_models["reference_model"]["name"]),
                          ("model-weak", weak)):
        onnx = workdir / profile / f"{name}.onnx"
        onnx.parent.mkdir(parents=True, exist_ok=True)
        onnx.write_bytes(shipped_model_bytes(definition, name))
        onnx_of[profile] = (onnx, name)
    say.section("1. the reference lab registers the reference model; the authority publishes "
                "BraTS naming it; the registry admin approves it")
    ref_onnx, ref_name = onnx_of["model-ref"]
    reference = say.step(
        f"--profile model-ref model register {ref_onnx} --name {ref_name} --version 1.0",
        partial(a.model_register, ref_onnx, name=ref_name, version="1.0", profile="model-ref"),
    ).id
    bench = say.step(
        f"--profile authority benchmark create --definition {shipped} --tee {tee} "
        f"--reference-model {reference}",
        lambda: r.benchmark_create(
            definition=shipped, tee=tee, reference_model=reference, profile="authority"
        ),
    )
    b = bench.id
    say.step(
        f"--profile admin benchmark approve {b}", lambda: r.benchmark_approve(b, profile="admin")
    )

    say.section("2. model owners check, register, seal and associate their models")
    models: dict[str, int] = {"model-ref": reference}
    for profile, (onnx, name) in onnx_of.items():
        if profile not in models:
            models[profile] = say.step(
                f"--profile {profile} model register {onnx} --name {name} --version 1.0 "
                f"--benchmark {b}",
                partial(a.model_register, onnx, name=name, version="1.0", benchmark=b,
                        profile=profile),
            ).id
        m = models[profile]
        say.step(
            f"--profile {profile} model seal {onnx} --model {m}",
            partial(a.model_seal, onnx, model=m, profile=profile),
        )
        say.step(
            f"--profile {profile} model associate --model {m} --benchmark {b}",
            partial(a.model_associate, model=m, benchmark=b, profile=profile),
        )

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
        say.step(f"--profile {profile} keys init", partial(x.keys_init, profile=profile))
        seed = 1 + index * 1000
        say.step(
            f"dataset synthesize {raw} --cases {cases} --size {size} --first-seed {seed}",
            partial(a.dataset_synthesize, raw, cases=cases, size=size, first_seed=seed),
        )
        say.step(
            f"--profile {profile} dataset prepare {raw} {prepared} --benchmark {b}",
            partial(a.dataset_prepare, raw, prepared, benchmark=b, profile=profile),
        )
        name = f"{profile}-glioma"
        d = say.step(
            f"--profile {profile} dataset register {prepared} --name {name} --benchmark {b}",
            partial(a.dataset_register, prepared, name=name, benchmark=b, yes=True,
                    profile=profile),
        ).id
        datasets[profile] = d
        say.step(
            f"--profile {profile} dataset seal {prepared} --dataset {d}",
            partial(a.dataset_seal, prepared, dataset=d, profile=profile),
        )
        say.step(
            f"--profile {profile} dataset associate --dataset {d} --benchmark {b}",
            partial(a.dataset_associate, dataset=d, benchmark=b, profile=profile),
        )

    say.section("4. the authority approves every request; every owner syncs its key policy")
    for d in datasets.values():
        say.step(
            f"--profile authority association approve --benchmark {b} --dataset {d}",
            partial(r.association_approve, benchmark=b, dataset=d, profile="authority"),
        )
    for m in models.values():
        say.step(
            f"--profile authority association approve --benchmark {b} --model {m}",
            partial(r.association_approve, benchmark=b, model=m, profile="authority"),
        )
    for profile, d in datasets.items():
        say.step(
            f"--profile {profile} policy sync --dataset {d}",
            partial(x.policy_sync, dataset=d, profile=profile),
        )
    for profile, m in models.items():
        say.step(
            f"--profile {profile} policy sync --model {m}",
            partial(x.policy_sync, model=m, profile=profile),
        )

    say.section(f"5. each hospital evaluates every approved model inside the ({tee}) TEE")
    finished: dict[str, list[Any]] = {}
    for profile, d in datasets.items():
        finished[profile] = say.step(
            f"--profile {profile} run --benchmark {b} --dataset {d} --all-models --tee {tee}",
            partial(x.run, benchmark=b, dataset=d, all_models=True, tee=tee, profile=profile),
        )

    say.section("6. each hospital opens its results locally and submits the public summaries")
    for profile, records in finished.items():
        for record in records:
            say.step(
                f"--profile {profile} result open {record.run_id}",
                partial(x.result_open, record.run_id, profile=profile),
            )
            say.step(
                f"--profile {profile} result submit {record.run_id}",
                partial(x.result_submit, record.run_id, yes=True, profile=profile),
            )

    say.section("7. the authority reads the verified leaderboard")
    say.step(f"--profile authority benchmark leaderboard {b}",
             partial(benchmark_leaderboard, b, profile="authority"))

    say.section("8. an attack: the hospital launches a debug image to get at the model")
    attacker, victim = _HOSPITALS[0], models["model-ref"]
    try:
        say.step(
            f"--profile {attacker} run --benchmark {b} --dataset {datasets[attacker]} "
            f"--model {victim} --tee {tee} --insecure-debug-image --force",
            lambda: x.run(
                benchmark=b,
                dataset=datasets[attacker],
                model=victim,
                tee=tee,
                force=True,
                insecure_debug_image=True,
                profile=attacker,
            ),
        )
    except KeyReleaseDeniedError as exc:
        refusal = str(exc)
        say.note(f"refused, as it must be: {refusal}")
    else:
        raise ClientError("the debug image was released the keys: the policies are broken")
    say.step("--profile admin audit verify", lambda: r.audit_verify(profile="admin"))
    # A second benchmark of another plug-in, next to BraTS: real breast-cancer cases (WDBC),
    # two disjoint sites, the two shipped classifiers (client/demo/plugins.py).
    from sealbench.client.demo.plugins import play_plugin_benchmark

    second = play_plugin_benchmark(say, workdir, "wdbc", hospitals=_HOSPITALS,
                                   labs=("model-ref", "model-weak"), cases=_WDBC_CASES,
                                   tee=tee, number=9)
    runs = tuple(record for records in finished.values() for record in records)
    return DemoOutcome(workdir, server, b, runs, refusal, second)


def _ensure_image(say: _Narrator) -> None:
    """Build the evaluation image unless ``sealbench-eval:latest`` is present and was built
    from this checkout (its source-digest label, see :mod:`sealbench.client.runs.image_source`):
    the benchmark then pins that image's digest. A stale image is rebuilt."""
    from sealbench.client.cli.tee import image_build
    from sealbench.client.registry import workflows
    from sealbench.client.runs.image_source import StaleImageError

    image_module = workflows.docker_image_module()
    say.section("0. the benchmark authority builds the evaluation image (Docker backend)")
    engine = image_module.connect_engine()
    source = image_module.checkout_source()
    try:
        if source is None:  # installed without a checkout: nothing to build or compare with
            found = image_module.local_image(engine)
        else:
            found = image_module.fresh_local_image(engine, source)
    except image_module.EngineUnavailableError:
        raise
    except StaleImageError as exc:
        say.console.print(f"{exc}: rebuilding it")
        say.step("image build", image_build)
    except image_module.ImageBuildError:
        say.step("image build", image_build)
    else:
        why = "built from this checkout" if source else "no checkout to compare it with"
        say.console.print(f"evaluation image {found.reference} present ({found.digest}), "
                          f"reused: {why}")


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
        console = out()
        console.print(Rule("serving", style="cyan"))
        console.print(f"dashboard             {server}/ui/")
        console.print(f"sign-in tokens        in {profiles} (one profile per role; sign in "
                      "with its token)")
        console.print("the CLI, from another terminal:", highlight=False)
        for line in _cli_lines(profiles.parent):
            console.print(f"  {line}", highlight=False)
        console.print("serving the registry and the mock TEE until Ctrl-C")
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


def removal_lines(workdir: Path, environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The commands that remove ``workdir`` (and, when it is under the demo folder, every demo
    folder), to print where the demo ends or fails."""
    lines = [f"rm -rf {shlex.quote(str(workdir))}"]
    root = demo_workdirs.demo_root(environ)
    if demo_workdirs.is_cleanable(workdir, root):
        override = environ.get(demo_workdirs.ENV_DEMO_DIR)
        env = f"{demo_workdirs.ENV_DEMO_DIR}={shlex.quote(override)} " if override else ""
        lines.append(f"{env}{_sealbench_command()} demo --clean  # every demo folder in {root}")
    return tuple(lines)


def _print_removal(console: Console, workdir: Path, headline: str) -> None:
    size = demo_workdirs.human_size(demo_workdirs.disk_usage(workdir))
    console.print(f"{headline} ({size}); to remove it:", highlight=False)
    for line in removal_lines(workdir):
        console.print(f"  {line}", highlight=False)


def _clean() -> demo_workdirs.CleanReport:
    """``sealbench demo --clean``: remove the demo folders and say what that freed."""
    report = demo_workdirs.clean(demo_workdirs.demo_root())
    console = out()
    for removed in report.removed:
        console.print(f"removed {removed.path} ({demo_workdirs.human_size(removed.size_bytes)})")
    for path in report.in_use:
        console.print(f"left {path}: a running demo uses it")
    if report.other:
        entries = "entry" if len(report.other) == 1 else "entries"
        console.print(f"left {len(report.other)} other {entries} of {report.root} untouched")
    count = len(report.removed)
    noun = "folder" if count == 1 else "folders"
    console.print(
        f"freed {demo_workdirs.human_size(report.freed_bytes)} ({count} demo {noun} removed "
        f"from {report.root})"
    )
    return report


def _summary(outcome: DemoOutcome, tee: str, log: Path | None) -> None:
    """What ran, what was refused and why, each benchmark's leaderboard (what
    ``sealbench benchmark leaderboard B`` prints: the servers are still up) and where to look
    next."""
    from sealbench.client.cli.common import session
    from sealbench.client.cli.leaderboard import print_table

    console = out()
    console.print(Rule("summary", style="cyan"))
    parts = ((outcome.benchmark_id, outcome.runs), (outcome.second.benchmark_id,
                                                     outcome.second.runs))
    with session("authority") as s:
        for benchmark_id, records in parts:
            bench = s.client.get_benchmark(benchmark_id)
            done = sum(r.status == "succeeded" for r in records)
            sites = len({r.dataset_id for r in records})
            models = len({r.model_id for r in records})
            console.print(
                f"benchmark {benchmark_id} {bench.name} ({bench.metrics_version}): {done} of "
                f"{len(records)} runs succeeded on the {tee} TEE ({sites} hospitals x "
                f"{models} models); the registry verified each result's attestation",
                highlight=False)
        console.print("refused: the debug-image attack got no keys "
                      f"({_first_line(outcome.refusal)})", highlight=False)
        console.print("the registry's audit log verified intact ('audit verify')")
        for benchmark_id, _ in parts:
            console.print()
            print_table(console, s.client.pooled_leaderboard(benchmark_id))
    console.print()
    if log is not None:
        console.print(f"every command's output  {log}  (--verbose prints it as it runs)",
                      highlight=False)
    w = outcome.workdir
    console.print(f"work directory          {w}  (registry, mock TEE, profiles, hospital files)",
                  highlight=False)
    console.print(f"explore it              {_sealbench_command()} demo --explore "
                  f"{shlex.quote(str(w))}  (its registry, dashboard and mock TEE, until "
                  "Ctrl-C)", highlight=False)


def _first_line(text: str, limit: int = 120) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _issuers_json(mock_state: Path) -> str:
    from sealbench.mocktee import MockEndpoints

    ep = MockEndpoints.load(mock_state)
    return json.dumps([ep.trusted_issuer()])


def demo(
    cases: Annotated[int, typer.Option(
        help="synthetic cases per hospital (5 meets BraTS's small-cell minimum: with fewer, the "
             "enclave withholds the public summaries)")] = 5,
    size: Annotated[
        str, typer.Option(help="case grid and benchmark: full (BraTS 240x240x155, 'brats') or "
                          "small (64x64x48, its own benchmark 'brats-small'; fast)")
    ] = "full",
    workdir: Annotated[
        Path | None,
        typer.Option(help="new or empty directory for everything (default: a new folder in the "
                     "demo folder: $SEALBENCH_DEMO_DIR, else sealbench/demo in the user's cache "
                     "directory)"),
    ] = None,
    tee: Annotated[
        str,
        typer.Option(help="mock (a local process) or docker (the evaluation image, built if "
                     "absent, run by the local Docker engine)"),
    ] = "mock",
    serve: Annotated[
        bool,
        typer.Option("--serve", help="afterwards keep the registry, its dashboard and the mock "
                     "TEE running until Ctrl-C, to explore with the CLI and the dashboard"),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", help="print every command's output as it runs (by default "
                     "it goes to demo.log in the work folder, and the terminal shows the "
                     "command lines and a closing summary)"),
    ] = False,
    explore: Annotated[
        Path | None,
        typer.Option("--explore", metavar="WORKDIR",
                     help="start the registry, dashboard and mock TEE of a finished demo's work "
                     "folder again (until Ctrl-C), with its profiles pointed at them; runs no "
                     "demo"),
    ] = None,
    clean: Annotated[
        bool,
        typer.Option("--clean", help="remove every work folder of earlier demos from the demo "
                     "folder (not --workdir ones, not a running demo's), say how much that "
                     "freed, and exit"),
    ] = False,
) -> DemoOutcome | demo_workdirs.CleanReport | None:
    """Run the whole confidential evaluation locally: registry, mock TEE, two hospitals, two
    models, verified leaderboard, a refused attack. INSECURE mock: synthetic data only. It ends
    with a summary (what ran, what was refused, the leaderboards) and how to explore it."""
    from sealbench.client.assets.prepare import SIZES
    from sealbench.client.errors import ConfigError
    from sealbench.client.extras import require_extras

    if clean or explore is not None:
        if workdir is not None or serve or (clean and explore is not None):
            raise typer.BadParameter("--clean and --explore run no demo; give one alone",
                                     param_hint="'--clean' / '--explore'")
        if explore is not None:
            require_extras(("server", "mock"), "exploring a demo")
            _explore(explore.resolve())
            return None
        return _clean()
    if size not in SIZES:
        raise ConfigError(f"--size must be one of {', '.join(SIZES)}")
    if cases < 1:
        raise ConfigError("--cases must be at least 1")
    if tee not in _DEMO_TEES:
        raise ConfigError(f"--tee must be one of {', '.join(_DEMO_TEES)} for the demo",
                          hint="a Confidential Space run needs your Google Cloud project")
    require_extras(("server", "enclave", "gcp", "mock", "datasets",
                    *(("docker",) if tee == "docker" else ())),
                   "the demo")
    if workdir is None:
        root = demo_workdirs.new_workdir(demo_workdirs.demo_root(), datetime.now()).resolve()
    else:
        root = workdir.resolve()
        root.mkdir(parents=True, exist_ok=True)
        if any(root.iterdir()):
            raise ConfigError(f"{root} is not empty", hint="pass a new directory to --workdir")
    started = time.monotonic()
    log = None if verbose else root / DEMO_LOG
    out().print(f"sealbench demo: everything goes under {root}")
    if log is not None:
        out().print(f"each command's output goes to {log}; the terminal shows the commands and "
                    "a summary (--verbose: everything)", highlight=False)
    with demo_workdirs.claim(root):
        try:
            outcome = _run(root, cases, size, tee, serve, log)
        except BaseException:
            if log is not None:
                err_console().print(f"every command's output, up to the failure: {log}",
                                    highlight=False)
            _print_removal(err_console(), root, "the demo's files stay for inspection")
            raise
    out().print(f"demo finished in {time.monotonic() - started:.0f} s")
    return outcome


def _scope(root: Path) -> dict[str, str | None]:
    """The environment the demo's commands see: its own profiles folder, nothing inherited."""
    return {ENV_CONFIG_DIR: str(root / "config"), ENV_DATA_DIR: None, ENV_PROFILE: None,
            ENV_SERVER: None, ENV_TOKEN: None}


def _run(root: Path, cases: int, size: str, tee: str, serve: bool,
         log: Path | None) -> DemoOutcome:
    """The demo in the claimed work folder ``root``."""
    from sealbench.client.cli.common import setup_logging
    from sealbench.client.registry.profiles import Profile, ProfileStore
    from sealbench.mocktee import MockCloud

    mock_state, server_data = root / "mock-tee", root / "registry"
    with scoped_environ(_scope(root)), MockCloud(mock_state) as cloud:
        setup_logging(False)
        tokens = create_accounts(server_data, DEMO_USERS)
        # The demo runs the registry, so it knows the log key: every profile pins it (no trust
        # on first use), as a participant does with the key its operator gives it.
        log_key = publish_log_key(server_data)
        with registry_process(server_data, cloud.endpoints, root / "server.log") as server:
            store = ProfileStore.from_environment(os.environ)
            for name, token in tokens.items():
                store.add(
                    name,
                    Profile(server=server, token=token, mock_tee=mock_state, log_key=log_key),
                    make_current=name == "authority",
                )
            say = _Narrator(log)
            if tee == "docker":
                _ensure_image(say)
            outcome = _play(say, root, cases, size, server, tee)
            _summary(outcome, tee, log)
            if serve:
                _serve(server, store.path)
    _print_removal(out(), root, "this demo's files stay in its work folder")
    return outcome


def _explore(root: Path) -> None:
    """``sealbench demo --explore WORKDIR``: serve a finished demo's registry (its database and
    log key) and mock TEE (its state) again on free ports, the folder's profiles pointed at the
    new registry address, until Ctrl-C."""
    from sealbench.client.errors import ConfigError
    from sealbench.client.registry.profiles import ProfileStore
    from sealbench.mocktee import MockCloud

    mock_state, server_data = root / "mock-tee", root / "registry"
    if not ((server_data / "registry.sqlite3").is_file() and mock_state.is_dir()
            and (root / "config" / "profiles.json").is_file()):
        raise ConfigError(f"{root} is not the work folder of a finished demo (no registry "
                          "database, mock TEE state or profiles there)",
                          hint="the demo prints its work folder first ('everything goes "
                          "under ...'); 'sealbench demo' makes a new one")
    with demo_workdirs.claim(root), scoped_environ(_scope(root)), \
            MockCloud(mock_state) as cloud, \
            registry_process(server_data, cloud.endpoints, root / "server.log") as server:
        store = ProfileStore.from_environment(os.environ)
        for name, _ in store.names():
            store.update(name, server=server)
        _serve(server, store.path)
