"""``sealbench audit`` and the log key pinned by ``profile add``, through typer's CliRunner
against a real registry on a loopback port: pinning, the full check on this machine, gossip
between two profiles, and a witness."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from sealbench.client.cli import app
from sealbench.crypto.note import Note, VerifierKey

Cli = Callable[..., Result]


@pytest.fixture
def cli(runner: CliRunner, cli_home: Path, live_registry: Any) -> Cli:
    for name, token in live_registry.tokens.items():
        result = runner.invoke(app, ["profile", "add", name, "--server", live_registry.url,
                                     "--token", token, "--no-use",
                                     "--log-key", live_registry.log_key])
        assert result.exit_code == 0, result.output

    def run(*args: str) -> Result:
        return runner.invoke(app, list(args))

    return run


def _profiles(home: Path) -> dict[str, Any]:
    return json.loads((home / "profiles.json").read_text())["profiles"]  # type: ignore[no-any-return]


def test_profile_add_pins_the_log_key_and_holds_a_checkpoint(cli: Cli, cli_home: Path) -> None:
    key = _profiles(cli_home)["hospital"]["log_key"]
    pinned = VerifierKey.from_string(key)
    held = cli_home / "profiles" / "hospital" / "log" / "checkpoint"
    assert stat.S_IMODE(held.stat().st_mode) == 0o600
    signed = Note.parse(held.read_bytes())
    assert signed.verify([pinned]) == (pinned,)
    assert {p["log_key"] for p in _profiles(cli_home).values()} == {key}


def test_profile_add_with_another_log_key_fails_loudly(
    cli: Cli, cli_home: Path, live_registry: Any
) -> None:
    origin = VerifierKey.from_string(_profiles(cli_home)["admin"]["log_key"]).name
    from sealbench.crypto.note import SignerKey

    other = SignerKey.generate(origin).verifier().to_string()
    r = cli("profile", "add", "suspicious", "--server", live_registry.url, "--token",
            live_registry.tokens["hospital"], "--log-key", other, "--no-use")
    assert r.exit_code == 10, r.output
    assert "none of which is a trusted key" in r.output and "--log-key KEY" in r.output


def test_profile_without_a_log_key_refuses_audit_checks_and_says_how_to_get_it(
    cli: Cli, cli_home: Path, live_registry: Any
) -> None:
    r = cli("profile", "add", "unpinned", "--server", live_registry.url, "--token",
            live_registry.tokens["hospital"], "--no-use")
    assert r.exit_code == 0, r.output
    assert "no transparency-log key is pinned" in r.output
    assert _profiles(cli_home)["unpinned"]["log_key"] is None
    assert not (cli_home / "profiles" / "unpinned" / "log" / "checkpoint").exists()
    for args in (("audit", "checkpoint"), ("audit", "verify")):
        refused = cli(*args, "--profile", "unpinned")
        assert refused.exit_code == 3, refused.output
        said = " ".join(refused.output.split())
        assert "no transparency-log key is pinned" in said
        assert "sealbench-server key show" in said and "--log-key KEY" in said
    shown = json.loads(cli("profile", "show", "unpinned", "--json").stdout)
    assert shown["log key"].startswith("none: audit checks refused")


def test_trust_on_first_use_is_an_explicit_recorded_choice(
    cli: Cli, cli_home: Path, live_registry: Any
) -> None:
    both = cli("profile", "add", "x", "--server", live_registry.url, "--token",
               live_registry.tokens["admin"], "--log-key", live_registry.log_key,
               "--trust-on-first-use")
    assert both.exit_code == 2
    r = cli("profile", "add", "tofu", "--server", live_registry.url, "--token",
            live_registry.tokens["admin"], "--trust-on-first-use", "--no-use")
    assert r.exit_code == 0, r.output
    assert "on first use" in r.output
    stored = _profiles(cli_home)["tofu"]
    assert stored["trust_on_first_use"] is True and stored["log_key"] == live_registry.log_key
    shown = json.loads(cli("profile", "show", "tofu", "--json").stdout)
    assert shown["log key"].endswith("(trusted on first use)")
    verified = cli("audit", "verify", "--profile", "tofu")
    assert verified.exit_code == 0, verified.output
    assert "TRUST ON FIRST USE" in verified.output
    report = json.loads(cli("audit", "verify", "--profile", "tofu", "--json").stdout)
    assert report["log_key_trusted_on_first_use"] is True
    pinned = cli("audit", "verify", "--profile", "admin")
    assert pinned.exit_code == 0 and "TRUST ON FIRST USE" not in pinned.output
    assert json.loads(cli("profile", "show", "admin", "--json").stdout)["log key"].endswith(
        "(given out of band)")


def test_audit_verify_checks_the_whole_log_on_this_machine(cli: Cli, cli_home: Path) -> None:
    r = cli("audit", "verify", "--profile", "admin")
    assert r.exit_code == 0, r.output
    assert "audit chain intact:" in r.output and "transparency log" in r.output
    leaves = cli_home / "profiles" / "admin" / "log" / "leaves"
    assert leaves.stat().st_size % 32 == 0 and leaves.stat().st_size > 0
    again = cli("audit", "verify", "--profile", "admin", "--json")
    report = json.loads(again.stdout)
    assert again.exit_code == 0 and report["previous_size"] is not None
    assert cli("audit", "verify", "--profile", "hospital").exit_code == 4  # events: admins only


def test_gossip_between_two_profiles_of_one_history(cli: Cli, tmp_path: Path) -> None:
    shared = tmp_path / "hospital.checkpoint"
    r = cli("audit", "checkpoint", "--profile", "hospital", "--out", str(shared))
    assert r.exit_code == 0 and r.output.startswith(Note.parse(shared.read_bytes()).text)
    r = cli("audit", "compare", str(shared), "--profile", "authority")
    assert r.exit_code == 0, r.output
    assert "one history" in r.output


def test_witness_cosigns_and_clients_can_require_it(
    cli: Cli, cli_home: Path, live_registry: Any
) -> None:
    r = cli("audit", "witness", "--profile", "authority")
    assert r.exit_code == 0, r.output
    witness = r.output.split("witness key ")[1].split()[0]
    assert VerifierKey.from_string(witness).name == "sealbench-witness/authority"
    assert "cosigned" in r.output
    key_file = cli_home / "profiles" / "authority" / "witness.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert cli("audit", "witness", "--profile", "authority").exit_code == 0  # again: same key
    r = cli("profile", "add", "careful", "--server", live_registry.url, "--token",
            live_registry.tokens["modelco"], "--witness", witness, "--no-use",
            "--log-key", live_registry.log_key)
    assert r.exit_code == 0, r.output
    assert cli("audit", "checkpoint", "--profile", "careful").exit_code == 0
    unknown = "sealbench-witness/nobody+" + witness.split("+", 1)[1]
    r = cli("profile", "add", "strict", "--server", live_registry.url, "--token",
            live_registry.tokens["modelco"], "--witness", unknown, "--no-use")
    assert r.exit_code == 3  # a mangled key (its key ID no longer matches) is refused


def test_witness_without_a_registry_to_reach_says_so(cli: Cli) -> None:
    r = cli("audit", "witness", "--profile", "authority", "--registry", "http://127.0.0.1:9")
    assert r.exit_code == 5, r.output
