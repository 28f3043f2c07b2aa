"""The world every role's CLI test starts from: a mock TEE (``MockCloud``), a registry server
process with an account per role, and a CLI profile per account pointing at both, the registry's
log key pinned as it is given out of band. The CLI runs in-process (``typer``'s runner) with
its own configuration folder; nothing of the caller's environment reaches it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from sealbench.client.cli import app
from sealbench.client.registry.local import create_accounts, publish_log_key, registry_process
from sealbench.mocktee import MockCloud

__all__ = ["Cli", "CliWorld", "cli_world", "json_of", "ok"]

Cli = Callable[..., Result]
#: The variables the CLI would otherwise read from the caller's environment.
_CLEARED = ("SEALBENCH_DATA_DIR", "SEALBENCH_PROFILE", "SEALBENCH_SERVER", "SEALBENCH_TOKEN")


def ok(result: Result) -> Result:
    """``result``, asserting that its command succeeded (its output otherwise)."""
    assert result.exit_code == 0, result.output
    return result


def json_of(result: Result) -> Any:
    """The JSON a successful ``--json`` command printed."""
    return json.loads(ok(result).stdout)


@dataclass(frozen=True)
class CliWorld:
    cli: Cli
    tmp: Path
    url: str
    #: account name (also its profile's) -> API token
    tokens: dict[str, str]
    cloud: MockCloud


@contextmanager
def cli_world(tmp: Path, accounts: Mapping[str, tuple[str, bool]], *,
              data_dir: Path | None = None, cwd: Path | None = None) -> Iterator[CliWorld]:
    """The world under ``tmp`` for ``accounts`` (name -> (e-mail, admin)); ``data_dir``: the
    CLI's data folder (default: each profile's own), ``cwd``: where the commands run."""
    patch = pytest.MonkeyPatch()
    if cwd is not None:
        patch.chdir(cwd)
    patch.setenv("SEALBENCH_CONFIG_DIR", str(tmp / "home"))
    for name in _CLEARED:
        patch.delenv(name, raising=False)
    if data_dir is not None:
        patch.setenv("SEALBENCH_DATA_DIR", str(data_dir))
    runner = CliRunner()

    def cli(*args: str) -> Result:
        return runner.invoke(app, list(args))

    try:
        with MockCloud(tmp / "mock") as cloud:
            tokens = create_accounts(tmp / "registry", accounts)
            log_key = publish_log_key(tmp / "registry")  # the operator's, given out of band
            with registry_process(tmp / "registry", cloud.endpoints, tmp / "server.log") as url:
                for name, token in tokens.items():
                    ok(cli("profile", "add", name, "--server", url, "--token", token,
                           "--mock-tee", str(tmp / "mock"), "--log-key", log_key))
                yield CliWorld(cli, tmp, url, tokens, cloud)
    finally:
        patch.undo()
