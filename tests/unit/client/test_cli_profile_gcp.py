"""A profile that names a Google Cloud project: what 'profile add --cloud gcp' stores, what
'profile show' says it will touch, the usage errors for a half-given cloud, and that the
commands' owner cloud is then the production one (Confidential Space's issuer, Google's
endpoints, the owner's Application Default Credentials, looked up only when a call needs them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sealbench.client.assets.owner import owner_cloud
from sealbench.client.cli import app
from sealbench.client.registry.profiles import ProfileStore, ResolvedProfile

GCP = ["--cloud", "gcp", "--project", "hospital-a-prod", "--project-number", "123456789012",
       "--bucket", "hospital-a-sealed", "--zone", "europe-west4-a",
       "--service-account", "runner@hospital-a-prod.iam.gserviceaccount.com"]


def _add(runner: CliRunner, *options: str) -> object:
    return runner.invoke(app, ["profile", "add", "hospital", "--server",
                               "http://127.0.0.1:9", "--token", "", *options])


def test_gcp_profile_is_stored_and_shows_what_it_touches(
    runner: CliRunner, cli_home: Path
) -> None:
    added = _add(runner, *GCP)
    assert added.exit_code == 0, added.output  # type: ignore[attr-defined]
    saved = json.loads((cli_home / "profiles.json").read_text())["profiles"]["hospital"]
    assert saved["account"]["platform"] == "confidential-space"
    assert saved["account"]["settings"]["project"] == "hospital-a-prod"
    shown = runner.invoke(app, ["profile", "show", "hospital", "--json"])
    assert shown.exit_code == 0, shown.output
    rows = json.loads(shown.stdout)
    assert rows["KMS key"] == (
        "projects/hospital-a-prod/locations/global/keyRings/sealbench/cryptoKeys/assets"
    )
    assert rows["bucket"] == "gs://hospital-a-sealed"
    assert rows["bucket location"] == "not chosen (required to create it)"
    assert rows["KMS location"] == "global"
    assert rows["pool provider"] == (
        "projects/123456789012/locations/global/workloadIdentityPools/sealbench/providers/"
        "attestation"
    )
    assert rows["attestation issuer"] == "https://confidentialcomputing.googleapis.com/"
    assert rows["credentials"] == "Application Default Credentials"
    assert rows["VM zone"] == "europe-west4-a"


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--cloud", "gcp", "--project", "hospital-a-prod"],
         "could not look up the number of project hospital-a-prod"),
        (["--cloud", "gcp"], "--cloud gcp needs --project"),
        (["--cloud", "gcp", "--project", "Bad_Project", "--project-number", "1"], "--project"),
        (["--cloud", "aws"], "no TEE platform named 'aws' is installed"),
        (["--project", "hospital-a-prod", "--project-number", "1", "--mock-tee", "/tmp/x"],
         "not --mock-tee"),
    ],
)
def test_a_half_given_cloud_is_a_usage_error(
    runner: CliRunner, cli_home: Path, options: list[str], says: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # no credentials to look the project number up with (and no metadata server to ask)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(cli_home / "no-such-adc.json"))
    result = _add(runner, *options)
    assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
    assert says in " ".join(result.output.split())  # type: ignore[attr-defined]
    assert not (cli_home / "profiles.json").exists()


def test_a_gcp_profile_gives_the_production_owner_cloud(
    runner: CliRunner, cli_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _add(runner, *GCP, "--impersonate-service-account",
                "sealer@hospital-a-prod.iam.gserviceaccount.com").exit_code == 0  # type: ignore[attr-defined]
    store = ProfileStore.from_environment()
    profile = dict(store.names())["hospital"]
    asked: list[str | None] = []

    def adc(impersonate: str | None = None) -> object:
        asked.append(impersonate)
        return object()

    monkeypatch.setattr("sealbench.gcp.owner_cloud.gcp_credentials", adc)
    cloud = owner_cloud(
        ResolvedProfile("hospital", profile, cli_home / "s", cli_home / "d"), None, None  # type: ignore[arg-type]
    )
    assert repr(cloud).startswith("GcpOwnerCloud(")  # the platform's own, called directly
    assert cloud.platform.endpoints is None and "googleapis.com" in cloud.apis.kms
    assert asked == []  # nothing looked up until a call needs credentials
    cloud.credentials()
    cloud.credentials()
    assert asked == ["sealer@hospital-a-prod.iam.gserviceaccount.com"]  # once, impersonating


def test_endpoint_overrides_are_stored_shown_and_pinned_by_the_policy(
    runner: CliRunner, cli_home: Path
) -> None:
    added = _add(runner, *GCP, "--api-endpoint", "kms=https://cloudkms.private.example",
                 "--api-endpoint=sts=https://sts.private.example/v1/token")
    assert added.exit_code == 0, added.output  # type: ignore[attr-defined]
    rows = json.loads(runner.invoke(app, ["profile", "show", "hospital", "--json"]).stdout)
    assert rows["kms endpoint"] == "https://cloudkms.private.example"
    assert rows["attestation issuer"] == "https://confidentialcomputing.googleapis.com/"
    profile = dict(ProfileStore.from_environment().names())["hospital"]
    cloud = owner_cloud(
        ResolvedProfile("hospital", profile, cli_home / "s", cli_home / "d"), None, None  # type: ignore[arg-type]
    )
    assert repr(cloud).startswith("GcpOwnerCloud(")  # the platform's own, called directly
    assert cloud.apis.kms == "https://cloudkms.private.example"
    assert cloud.apis.storage == "https://storage.googleapis.com"
    # the policy pins exactly the destinations runs will name: the overridden two, Google's third
    pinned = cloud.platform.endpoints
    assert pinned is not None
    assert (pinned.kms_endpoint, pinned.sts_url, pinned.storage_endpoint) == (
        "https://cloudkms.private.example", "https://sts.private.example/v1/token",
        "https://storage.googleapis.com",
    )
    from sealbench.client.assets.owner import spec_endpoints

    resolved = ResolvedProfile("hospital", profile, cli_home / "s", cli_home / "d")
    assert spec_endpoints(resolved) == pinned


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("kms", "NAME=URL"),
        ("vault=https://vault.example", "unknown API 'vault'"),
        ("kms=http://cloudkms.example", "not an https URL"),
        ("kms=https://user:pw@cloudkms.example", "not an https URL"),
    ],
)
def test_a_bad_endpoint_override_is_a_usage_error(
    runner: CliRunner, cli_home: Path, override: str, says: str
) -> None:
    result = _add(runner, *GCP, "--api-endpoint", override)
    assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
    assert says in " ".join(result.output.split())  # type: ignore[attr-defined]
    assert not (cli_home / "profiles.json").exists()


def test_login_keeps_the_profiles_google_cloud_project(
    runner: CliRunner, cli_home: Path, live_registry: Any
) -> None:
    added = runner.invoke(app, ["profile", "add", "hospital", "--server", live_registry.url,
                                "--token", "", *GCP[:-4]])
    assert added.exit_code == 0, added.output
    again = runner.invoke(app, ["login", "--token", live_registry.tokens["hospital"],
                                "--profile", "hospital"])
    assert again.exit_code == 0, again.output
    saved = json.loads((cli_home / "profiles.json").read_text())["profiles"]["hospital"]
    assert saved["account"]["settings"]["project"] == "hospital-a-prod" and saved["token"]
