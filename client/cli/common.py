"""What every ``sealbench`` command shares: the common options (``--profile``, ``--json``), the
session (resolved profile and registry client), output helpers (tables, JSON, progress bars) and
the one error boundary (:class:`BoundaryGroup`), which prints a client error's cause and hint and
exits with its documented code; ``sealbench -v`` shows the traceback."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.core
from pydantic import BaseModel
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from typer._click.core import Context as ClickContext  # typer vendors click

from sealbench.benchmarks.interface import EXACT_SUFFIX
from sealbench.client.errors import EXIT_CODES, ClientError, ConfigError
from sealbench.client.extras import missing_extra
from sealbench.client.registry.api import RegistryClient
from sealbench.client.registry.profiles import ProfileStore, ResolvedProfile
from sealbench.client.runs.inbox import consent_warning, privacy_cost
from sealbench.client.views.table import out, table
from sealbench.contract.pin import BenchmarkPin
from sealbench.server.schemas import BenchmarkPublic

__all__ = [
    "BoundaryGroup",
    "ClientFactory",
    "ConsentExactOpt",
    "JsonOpt",
    "MockTeeOpt",
    "ProfileOpt",
    "Session",
    "connect_registry",
    "emit_json",
    "err_console",
    "exit_codes_help",
    "one_of",
    "out",
    "progress_bar",
    "provider_label",
    "session",
    "table",
    "using_client_factory",
    "warn_experimental",
    "warn_privacy_cost",
]

log = logging.getLogger("sealbench.client")

ProfileOpt = Annotated[
    str | None,
    typer.Option(
        "--profile",
        "-p",
        help="profile to act as (default: $SEALBENCH_PROFILE, else the current one)",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print machine-readable JSON")]
#: ``--mock-tee DIR``: the commands that may use a mock TEE (policy sync, run, result fetch).
MockTeeOpt = Annotated[
    Path | None,
    typer.Option(help="state directory of the mock TEE (default: the profile's)"),
]


#: The data owner's explicit consent to a benchmark that publishes exact (non-private) figures.
ConsentExactOpt = Annotated[bool, typer.Option(
    "--consent-exact-release",
    help="consent to a benchmark whose pin ends in '-exact': each run publishes this dataset's "
         "figures exactly, without noise and without a privacy bound (refused without it)")]


def warn_experimental(benchmark: BenchmarkPublic) -> None:
    """Print :func:`~sealbench.client.runs.inbox.consent_warning` (when there is one) before an
    owner's consent to ``benchmark``."""
    warning = consent_warning(benchmark)
    if warning is not None:
        out().print(warning, style="bold red", markup=False, highlight=False, soft_wrap=True)


def warn_privacy_cost(client: RegistryClient, benchmark: BenchmarkPublic, dataset_id: int,
                      *, consent_exact: bool = False) -> None:
    """Print :func:`~sealbench.client.runs.inbox.privacy_cost` before a data owner consents to
    ``benchmark`` for dataset ``dataset_id`` (the cost read from the benchmark's plug-in, the
    budget from the registry); say how to see it when the plug-in is not installed here. A
    benchmark that publishes exact figures (its pin ends in ``-exact``, or its plug-in says so)
    is refused here unless ``consent_exact`` (``--consent-exact-release``): :class:`ConfigError`
    naming the flag, before anything is sent."""
    from sealbench.benchmarks.interface import publishes_site_release
    from sealbench.benchmarks.pooling import pooled_release_spec
    from sealbench.client.extras import MissingExtraError
    from sealbench.client.plugins import plugin_for

    exact = benchmark.metrics_version.version.removesuffix("-pool").endswith(EXACT_SUFFIX)
    try:
        plugin = plugin_for(benchmark)
        spec = plugin.release_spec
    except (ConfigError, MissingExtraError):
        if not exact:
            out().print(f"PRIVACY: each run publishes a release that spends dataset "
                        f"{dataset_id}'s privacy budget; this machine lacks the benchmark's "
                        f"plug-in to say how much ('sealbench dataset budget {dataset_id}' "
                        "shows it once associated)")
        else:
            out().print(f"PRIVACY: benchmark {benchmark.name} {benchmark.version} "
                        f"(#{benchmark.id}) publishes EXACT (not differentially private) "
                        "figures of your cases.", style="bold red")
    else:
        pooled = (None if benchmark.aggregator_image_digest is None
                  else pooled_release_spec(plugin))
        site = spec if publishes_site_release(plugin) else None
        exact = exact or (site is not None and site.exact) or (
            pooled is not None and pooled.exact)
        out().print(privacy_cost(benchmark, site, client.dataset_budget(dataset_id), pooled),
                    style="bold red" if exact else "bold", markup=False, highlight=False,
                    soft_wrap=True)
    if exact and not consent_exact:
        raise ConfigError(
            f"benchmark {benchmark.id} publishes each site's figures exactly (pin "
            f"{benchmark.metrics_version}): no noise and no bound on what they reveal about a "
            "patient. Nothing was sent. If your data governance allows it, consent explicitly by "
            "running the same command with --consent-exact-release")


def err_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True, markup=False)


def exit_codes_help() -> str:
    rows = "\n".join(f"  {code}  {text}" for code, text in EXIT_CODES)
    return f"\b\nExit codes:\n{rows}"


#: Builds the registry client of a session from its resolved profile.
ClientFactory = Callable[[ResolvedProfile], RegistryClient]


def connect_registry(profile: ResolvedProfile) -> RegistryClient:
    """The real client: its own connection pool to the profile's server, with its token."""
    return RegistryClient.connect(profile.server, profile.token)


#: The factory :func:`session` uses when none is passed (tests set another with
#: :func:`using_client_factory`, to run commands in-process against an ASGI registry).
_CLIENT_FACTORY: ContextVar[ClientFactory] = ContextVar(
    "sealbench_client_factory", default=connect_registry
)


@contextmanager
def using_client_factory(factory: ClientFactory) -> Iterator[None]:
    """Within the block, every :func:`session` without its own factory builds its client with
    ``factory`` (e.g. over a FastAPI ``TestClient``'s transport, for in-process CLI tests)."""
    token = _CLIENT_FACTORY.set(factory)
    try:
        yield
    finally:
        _CLIENT_FACTORY.reset(token)


@dataclass
class Session:
    """The resolved profile and a lazily connected registry client for one command."""

    profile: ResolvedProfile
    store: ProfileStore
    connect: ClientFactory = field(default=connect_registry, repr=False)
    _client: RegistryClient | None = field(default=None, repr=False)

    @property
    def client(self) -> RegistryClient:
        if self._client is None:
            self._client = self.connect(self.profile)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


@contextmanager
def session(profile: str | None, *, connect: ClientFactory | None = None) -> Iterator[Session]:
    """The session of one command as ``profile`` (None: the current one); its client is built
    on first use by ``connect`` (default: :func:`connect_registry`, or the factory set by
    :func:`using_client_factory`) and closed at the end."""
    store = ProfileStore.from_environment(os.environ)
    current = Session(store.resolve(profile), store, connect or _CLIENT_FACTORY.get())
    try:
        yield current
    finally:
        current.close()


def _jsonable(value: Any) -> Any:
    if isinstance(value, BenchmarkPin):  # a pin is its text on every wire
        return str(value)
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def emit_json(value: Any) -> None:
    typer.echo(json.dumps(_jsonable(value), indent=2, sort_keys=True, default=str))


def one_of(value: str | None, choices: Sequence[str], option: str) -> str | None:
    """``value`` when it is None or one of ``choices``; a ConfigError naming ``option`` and the
    choices otherwise."""
    if value is not None and value not in choices:
        raise ConfigError(f"{option} must be one of {', '.join(choices)}, received {value!r}")
    return value


def provider_label(provider: str | None) -> str:
    """An ONNX Runtime execution provider as a table shows it: ``CPU`` for
    ``CPUExecutionProvider``."""
    return "" if provider is None else provider.removesuffix("ExecutionProvider")


def user_label(user_id: int | None, me: int | None) -> str:
    """A user id as tables show it: ``3 (you)`` when it is the caller's."""
    if user_id is None:
        return "-"
    return f"{user_id} (you)" if user_id == me else str(user_id)


def progress_bar(transient: bool = False) -> Progress:
    """A rich progress bar for long work (sealing, preparation, runs)."""
    return Progress(
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console(),
        transient=transient,
    )


def setup_logging(verbose: bool) -> None:
    from sealbench.mocktee.state import warn_insecure_once

    warn_insecure_once.cache_clear()  # each INSECURE notice once per command
    logger = logging.getLogger("sealbench")
    for handler in list(logger.handlers):
        if getattr(handler, "_sealbench_cli", False):
            logger.removeHandler(handler)
    handler = RichHandler(console=err_console(), show_time=False, show_path=False)
    handler._sealbench_cli = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING)


def plural(count: int, noun: str) -> str:
    """``1 case``, ``2 cases`` (English nouns that take an s)."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def report_error(exc: BaseException, verbose: bool) -> int:
    """Print ``exc`` as the boundary does and return the exit code."""
    console = err_console()
    if isinstance(exc, ClientError):
        if verbose:
            log.error("traceback", exc_info=exc)
        console.print(f"[bold red]error:[/] {escape(str(exc))}", markup=True, highlight=False)
        if exc.hint:
            console.print(f"[bold]what to do:[/] {escape(exc.hint)}", markup=True, highlight=False)
        return exc.exit_code
    log.error("unexpected %s", type(exc).__name__, exc_info=exc if verbose else None)
    console.print(
        f"[bold red]error:[/] unexpected {type(exc).__name__}: {escape(str(exc))}", markup=True
    )
    console.print(
        "[bold]what to do:[/] run again as 'sealbench -v ...' and report the traceback",
        markup=True,
    )
    return 1


class BoundaryGroup(typer.core.TyperGroup):
    """The CLI's one error boundary: every command runs inside :meth:`invoke`."""

    def invoke(self, ctx: ClickContext) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except Exception as exc:  # the CLI's one boundary; anything else is a bug to report
            verbose = bool(ctx.obj and getattr(ctx.obj, "verbose", False))
            shown: BaseException = missing_extra(exc) or exc  # a package of an absent extra
            raise typer.Exit(report_error(shown, verbose)) from exc


def with_progress(
    description: str, total: int | None
) -> tuple[Progress, Callable[[int, int], None]]:
    """A started progress bar and a ``(done, total)`` callback that advances it."""
    bar = progress_bar()
    task = bar.add_task(description, total=total)

    def update(done: int, total_now: int) -> None:
        bar.update(task, completed=done, total=total_now)

    return bar, update
