"""``sealbench demo`` (and ``make demo``): the entry point of :mod:`sealbench.client.demo.flow`.
It parses the options, reads the environment (the demo folder, ``$SEALBENCH_DEMO_DIR``), makes
the work folder, and calls the demo's library room, which reads no environment and calls no
command."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from sealbench.client.demo import flow
from sealbench.client.demo import workdirs as demo_workdirs
from sealbench.client.errors import ConfigError

__all__ = ["demo"]


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
) -> flow.DemoOutcome | demo_workdirs.CleanReport | None:
    """Run the whole confidential evaluation locally: registry, mock TEE, two hospitals, two
    models, verified leaderboard, a refused attack. INSECURE mock: synthetic data only. It ends
    with a summary (what ran, what was refused, the leaderboards) and how to explore it."""
    from sealbench.client.extras import require_extras

    environ = dict(os.environ)
    if clean or explore is not None:
        if workdir is not None or serve or (clean and explore is not None):
            raise typer.BadParameter("--clean and --explore run no demo; give one alone",
                                     param_hint="'--clean' / '--explore'")
        if explore is not None:
            require_extras(("server", "mock"), "exploring a demo")
            flow.explore(explore.resolve())
            return None
        return flow.clean(demo_workdirs.demo_root(environ))
    flow.check_settings(cases, size, tee)
    require_extras(("server", "enclave", "gcp", "mock", "datasets",
                    *(("docker",) if tee == "docker" else ())),
                   "the demo")
    if workdir is None:
        root = demo_workdirs.new_workdir(demo_workdirs.demo_root(environ),
                                         datetime.now()).resolve()
    else:
        root = workdir.resolve()
        root.mkdir(parents=True, exist_ok=True)
        if any(root.iterdir()):
            raise ConfigError(f"{root} is not empty", hint="pass a new directory to --workdir")
    log = None if verbose else root / flow.DEMO_LOG
    return flow.run_demo(root, cases=cases, size=size, tee=tee, serve=serve, log=log,
                         environ=environ)
