"""``sealbench``: the command line for every role, one group per noun.

The CLI is a thin shell over the library (:mod:`sealbench.client.registry.api`,
``assets``, ``owner``, ``runs``, ``definitions``): each command parses options, calls it and
renders. Errors pass one boundary (:class:`~sealbench.client.cli.common.BoundaryGroup`) that
prints the cause and what to do, and exits with the documented code; ``sealbench -v`` adds the
traceback.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer

from sealbench.client.cli.account import login, whoami
from sealbench.client.cli.assets import dataset_app, model_app
from sealbench.client.cli.association import association_app
from sealbench.client.cli.audit import audit_app
from sealbench.client.cli.benchmark import benchmark_app
from sealbench.client.cli.budget import dataset_budget
from sealbench.client.cli.common import BoundaryGroup, exit_codes_help, out, setup_logging
from sealbench.client.cli.demo import demo
from sealbench.client.cli.doctor import doctor
from sealbench.client.cli.image import image_app
from sealbench.client.cli.inbox import inbox
from sealbench.client.cli.keys import keys_app
from sealbench.client.cli.mock_tee import mock_tee_app
from sealbench.client.cli.model_export import model_check, model_export_command
from sealbench.client.cli.next import next_command
from sealbench.client.cli.policy import policy_app
from sealbench.client.cli.profile import profile_app
from sealbench.client.cli.result import result_app
from sealbench.client.cli.run import run as run_command
from sealbench.client.cli.score import benchmark_score
from sealbench.client.cli.test import test

__all__ = ["app", "main"]

_HELP = f"""Confidential federated evaluation of models: a benchmark's plug-in defines the task
(segmentation, classification, ...), the data and the metrics.

Benchmark authorities publish benchmarks; hospitals register, seal and evaluate their datasets
inside a TEE; model owners register and seal their models. Start with 'sealbench profile add',
or try everything locally with 'sealbench demo'.

{exit_codes_help()}
"""


@dataclass(frozen=True)
class RootOptions:
    verbose: bool


app = typer.Typer(
    name="sealbench",
    cls=BoundaryGroup,
    help=_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        try:
            out().print(f"sealbench {version('sealbench')}")
        except PackageNotFoundError:
            out().print("sealbench (version unknown)")
        raise typer.Exit(0)


@app.callback()
def root(
    ctx: typer.Context,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="log details and show tracebacks on errors")
    ] = False,
    show_version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="print the version"),
    ] = False,
) -> None:
    ctx.obj = RootOptions(verbose=verbose)
    setup_logging(verbose)


app.add_typer(profile_app, name="profile")
app.command("login")(login)
app.command("whoami")(whoami)
app.command("doctor")(doctor)
app.command("inbox")(inbox)
app.command("next")(next_command)
app.command("test")(test)
benchmark_app.command("score")(benchmark_score)
app.add_typer(benchmark_app, name="benchmark")
dataset_app.command("budget")(dataset_budget)
app.add_typer(dataset_app, name="dataset")
model_app.command("export")(model_export_command)
model_app.command("check")(model_check)
app.add_typer(model_app, name="model")
app.add_typer(association_app, name="association")
app.add_typer(keys_app, name="keys")
app.add_typer(policy_app, name="policy")
app.add_typer(image_app, name="image")
app.command("run")(run_command)
app.add_typer(result_app, name="result")
app.add_typer(mock_tee_app, name="mock-tee")
app.add_typer(audit_app, name="audit")
app.command("demo")(demo)


def main() -> None:
    """Console-script entry point (``sealbench = sealbench.client.cli:main``)."""
    app()


if __name__ == "__main__":
    main()
