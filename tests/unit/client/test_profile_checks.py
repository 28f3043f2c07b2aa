"""What ``sealbench profile`` tells a user who mistypes: a profile name (the closest names),
a server URL without its scheme (http for this machine, as the demo's server speaks, https
elsewhere), the dashboard's URL instead of the registry's root, https for a server that speaks
plain HTTP, and a server that does not answer (checked once, a warning: the profile is saved)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sealbench.client.cli import app


def _cli(runner: CliRunner, *args: str) -> Any:
    return runner.invoke(app, list(args))


def _said(result: Any) -> str:
    return " ".join(result.output.split())


@pytest.mark.parametrize(
    ("server", "says"),
    [
        ("127.0.0.1:8000", "e.g. http://127.0.0.1:8000, as a server on this machine"),
        ("localhost:8000", "e.g. http://localhost:8000"),
        ("registry.example.org", "e.g. https://registry.example.org)"),
        ("http://127.0.0.1:8000/ui/", "it names its dashboard); use http://127.0.0.1:8000"),
        ("https://registry.example.org/ui/benchmarks/3", "use https://registry.example.org"),
    ],
)
def test_server_url_mistakes_are_usage_errors_saying_the_fix(
    runner: CliRunner, cli_home: Path, server: str, says: str
) -> None:
    result = _cli(runner, "profile", "add", "lab", "--server", server, "--token", "sbt_x")
    assert result.exit_code == 2, result.output
    assert says in _said(result)
    assert not (cli_home / "profiles.json").exists()


def test_a_mistyped_profile_name_gets_the_closest_names(
    runner: CliRunner, cli_home: Path
) -> None:
    for name in ("hospital-a", "hospital-b", "authority"):
        added = _cli(runner, "profile", "add", name, "--server", "http://127.0.0.1:9",
                     "--token", "", "--no-use")
        assert added.exit_code == 0, added.output
    typo = _cli(runner, "whoami", "--profile", "hospitl-a")
    assert typo.exit_code != 0
    assert "no profile named 'hospitl-a'; did you mean hospital-a" in _said(typo)
    far = _cli(runner, "profile", "use", "zebra")
    assert "profiles: authority, hospital-a, hospital-b" in _said(far)
    shown = _cli(runner, "profile", "show", "autority")
    assert "did you mean authority?" in _said(shown)


def test_https_for_a_plain_http_registry_is_pointed_to_http(
    runner: CliRunner, cli_home: Path, live_registry: Any
) -> None:
    https = live_registry.url.replace("http://", "https://")
    added = _cli(runner, "profile", "add", "lab", "--server", https, "--token",
                 live_registry.tokens["modelco"])
    assert added.exit_code == 0, added.output  # saved as given, with a warning
    assert f"It answers plain HTTP at {live_registry.url}" in _said(added)
    assert f"--server {live_registry.url}" in _said(added)
    saved = json.loads((cli_home / "profiles.json").read_text())["profiles"]["lab"]
    assert saved["server"] == https


def test_an_unreachable_registry_is_a_warning_even_without_a_token(
    runner: CliRunner, cli_home: Path
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connection refused
        added = _cli(runner, "profile", "add", "lab", "--server", f"http://127.0.0.1:{port}",
                     "--token", "")
    assert added.exit_code == 0, added.output
    assert f"the registry at http://127.0.0.1:{port} does not answer" in _said(added)
    assert (cli_home / "profiles.json").exists()
