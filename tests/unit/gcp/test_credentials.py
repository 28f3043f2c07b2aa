"""Workload credential configs and the launcher client's argument checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.auth import identity_pool

from sealbench.gcp.credentials import (
    credential_config,
    provider_audience,
    workload_credentials,
)
from sealbench.platforms.attester import LauncherAttester
from sealbench.platforms.errors import AttesterError, CredentialError

PROVIDER = "projects/123/locations/global/workloadIdentityPools/pool-a/providers/prov-a"
AUDIENCE = "//iam.googleapis.com/" + PROVIDER


def test_provider_given_either_way_gives_the_sts_audience() -> None:
    assert provider_audience(PROVIDER) == AUDIENCE
    assert provider_audience(AUDIENCE) == AUDIENCE


@pytest.mark.parametrize(
    "name",
    [
        "projects/my-project/locations/global/workloadIdentityPools/pool-a/providers/prov-a",
        "projects/123/locations/us/workloadIdentityPools/pool-a/providers/prov-a",
        "projects/123/locations/global/workloadIdentityPools/pool-a",
        PROVIDER + "/extra",
    ],
)
def test_malformed_pool_provider_rejected(name: str) -> None:
    with pytest.raises(CredentialError):
        provider_audience(name)


def test_credential_config_is_what_gcloud_writes(tmp_path: Path) -> None:
    config = credential_config(
        PROVIDER, token_file=tmp_path / "t", sts_url="http://127.0.0.1:1/v1/token"
    )
    assert config == {
        "type": "external_account",
        "audience": AUDIENCE,
        "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
        "token_url": "http://127.0.0.1:1/v1/token",
        "credential_source": {"file": str(tmp_path / "t")},
    }
    creds = workload_credentials(PROVIDER, token_file=tmp_path / "t")
    assert isinstance(creds, identity_pool.Credentials)
    assert creds.requires_scopes is False


def test_launcher_request_arguments_checked_before_sending(tmp_path: Path) -> None:
    attester = LauncherAttester(tmp_path / "missing.sock", tmp_path / "token")
    with pytest.raises(AttesterError, match="audience"):
        attester.token(nonces=["0123456789"])
    with pytest.raises(AttesterError, match="at most 6"):
        attester.token("aud", ["0123456789"] * 7)
    with pytest.raises(AttesterError, match="10-74 bytes"):
        attester.token("aud", ["short"])
    with pytest.raises(TypeError):
        attester.token("aud", "0123456789abc")
    with pytest.raises(AttesterError, match="unreachable"):
        attester.token()
