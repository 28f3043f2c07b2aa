"""``sealbench result open`` on a Google Cloud profile checks the result token's signature with
Google's Confidential Space keys (fetched, cached in the profile's data directory), as the
registry does on submit: a forged result is refused where it is opened. Only the network fetch
is replaced (a test RSA key stands for Google's); verification is the real one. Without the
keys the command refuses, unless --unverified, which says so in its output and JSON.

Here because the result is a real run's (the enclave fixtures: its token is unsigned, with
Google's issuer, as a forger would write it)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from typer.testing import CliRunner, Result

from sealbench.client.assets.result_key import PRIVATE_KEY_FILE
from sealbench.client.cli import app
from sealbench.client.registry.profiles import PlatformAccount, Profile, ProfileStore
from sealbench.client.runs import attestation_keys
from sealbench.client.runs.attestation_keys import AttestationKeysUnavailableError
from sealbench.client.runs.records import RunRecord, RunStore
from sealbench.contract.result import TOKEN_OBJECT
from sealbench.crypto.attestation import Jwks
from sealbench.crypto.sealing import save_private_key
from sealbench.gcp.confidential_space import (
    CONFIDENTIAL_SPACE_ISSUER,
    CONFIDENTIAL_SPACE_JWKS_URL,
)

GOOGLE_KID = "google-test-key"
UNVERIFIED = "UNVERIFIED: signature not checked"


@pytest.fixture(scope="module")
def google_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class Network:
    """Google's key set endpoint, as this test serves it (or fails to: offline)."""

    def __init__(self, jwks: bytes) -> None:
        self.jwks = jwks
        self.online = True
        self.fetched: list[str] = []

    def fetch(self, url: str, limit: int) -> bytes:
        self.fetched.append(url)
        if not self.online:
            raise AttestationKeysUnavailableError(f"cannot fetch {url}: network unreachable")
        assert url == CONFIDENTIAL_SPACE_JWKS_URL
        return self.jwks[:limit]


@pytest.fixture
def network(google_key: rsa.RSAPrivateKey, monkeypatch: pytest.MonkeyPatch) -> Network:
    net = Network(Jwks.from_keys({GOOGLE_KID: google_key.public_key()}).to_json())
    monkeypatch.setattr(attestation_keys.HttpxKeySetFetcher, "fetch", net.fetch)
    return net


@pytest.fixture
def hospital(world: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Google Cloud profile holding one succeeded run of the world; returns its results."""
    world.run()
    home = tmp_path / "home"
    monkeypatch.setenv("SEALBENCH_CONFIG_DIR", str(home))
    for name in ("SEALBENCH_DATA_DIR", "SEALBENCH_PROFILE", "SEALBENCH_SERVER",
                 "SEALBENCH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    store = ProfileStore.from_environment()
    store.add("hospital", Profile(
        server="http://127.0.0.1:9", token="sbt_unused",
        account=PlatformAccount(platform="confidential-space", settings={
            "project": "hospital-project", "project_number": "123"}),
    ))
    profile = store.resolve("hospital")
    profile.secrets_dir.mkdir(parents=True, mode=0o700)
    save_private_key(profile.secrets_dir / PRIVATE_KEY_FILE, world.recipient)
    RunStore(profile.data_dir / "runs").save(RunRecord(
        run_id="run-1", benchmark_id=1, dataset_id=1, model_id=1, tee="confidential-space",
        image_digest="sha256:" + "0" * 64, result_uri=world.results().as_uri(),
        status="succeeded", started_at=datetime(2026, 1, 1, tzinfo=UTC),
    ))
    return world.results()  # type: ignore[no-any-return]


def _payload(token: str) -> dict[str, Any]:
    body = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))  # type: ignore[no-any-return]


def _resign(results: Path, key: rsa.RSAPrivateKey, kid: str = GOOGLE_KID) -> None:
    token = (results / TOKEN_OBJECT).read_text().strip()
    signed = jwt.encode(_payload(token), key, algorithm="RS256", headers={"kid": kid})
    (results / TOKEN_OBJECT).write_text(signed)


def _open(*args: str) -> Result:
    return CliRunner().invoke(app, ["result", "open", "run-1", "--profile", "hospital", *args])


def test_forged_result_opened_on_production_profile_refused(
    hospital: Path, network: Network
) -> None:
    # The run's token claims Google's issuer but carries no Google signature: a forgery.
    assert _payload((hospital / TOKEN_OBJECT).read_text())["iss"] == CONFIDENTIAL_SPACE_ISSUER
    opened = _open()
    assert opened.exit_code == 8, opened.output
    assert "does not verify" in opened.output
    assert network.fetched == [CONFIDENTIAL_SPACE_JWKS_URL]


def test_foreign_signed_result_opened_on_production_profile_refused(
    hospital: Path, network: Network
) -> None:
    attacker = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _resign(hospital, attacker)  # Google's key id, the attacker's signature
    assert _open().exit_code == 8
    _resign(hospital, attacker, kid="attacker")  # a key id Google never published
    assert _open().exit_code == 8


def test_result_signed_by_googles_key_opens_verified_and_the_keys_are_cached(
    hospital: Path, network: Network, google_key: rsa.RSAPrivateKey
) -> None:
    _resign(hospital, google_key)
    opened = _open()
    assert opened.exit_code == 0, opened.output
    assert f"signed by {CONFIDENTIAL_SPACE_ISSUER}" in opened.output
    assert UNVERIFIED not in opened.output
    network.online = False  # the copy kept in the profile's data directory answers now
    again = _open("--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["signature_verified"] is True
    assert network.fetched == [CONFIDENTIAL_SPACE_JWKS_URL]


def test_result_opened_offline_without_keys_refused(hospital: Path, network: Network,
                                                    google_key: rsa.RSAPrivateKey) -> None:
    _resign(hospital, google_key)
    network.online = False
    opened = _open()
    assert opened.exit_code == 3, opened.output
    assert "cannot check the result's signature" in opened.output
    assert "--unverified" in opened.output


def test_result_opened_offline_with_unverified_is_marked(
    hospital: Path, network: Network
) -> None:
    network.online = False
    opened = _open("--unverified")
    assert opened.exit_code == 0, opened.output
    assert UNVERIFIED in opened.output and "signed by" not in opened.output
    shown = _open("--unverified", "--json")
    assert shown.exit_code == 0
    doc = json.loads(shown.stdout)
    assert doc["signature_verified"] is False and doc["attestation"] == UNVERIFIED
    assert network.fetched == []  # --unverified asks nobody
