"""The enclave finds the platform that attested it through the registry, by the token's issuer,
and reads the token through that platform; a token of no installed platform goes nowhere."""

from __future__ import annotations

import base64
import json
import socket
from typing import Any

import pytest

from sealbench.cloud.platform import load_platform
from sealbench.crypto.digest import sha256_digest
from sealbench.enclave.errors import AttestationUnavailable
from sealbench.enclave.platforms import evidence_of, resolve_platform
from sealbench.mocktee.verifier import WorkloadLaunch, build_claims

GOOGLE = "https://confidentialcomputing.googleapis.com"
IMAGE = sha256_digest(b"image")


def _unsigned(issuer: str, **changes: Any) -> str:
    launch = WorkloadLaunch(IMAGE, f"r@{IMAGE}", {"SEALBENCH_RUN_ID": "r1"})
    claims = build_claims(launch, issuer=issuer, audience="aud", nonces=("n" * 20,), now=1)
    claims.update(changes)

    def b64(doc: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()

    return f"{b64({'alg': 'RS256', 'kid': 'k'})}.{b64(claims)}.c2ln"


def test_launcher_token_read_through_its_platform() -> None:
    workload = evidence_of(_unsigned(GOOGLE))
    assert (workload.iss, workload.aud, workload.image_digest) == (GOOGLE, "aud", IMAGE)
    assert dict(workload.env_override) == {"SEALBENCH_RUN_ID": "r1"}
    assert workload.eat_nonce == ("n" * 20,)


def test_token_of_a_platform_not_installed_is_refused() -> None:
    only_mock = [load_platform("insecure-mock")]
    with pytest.raises(AttestationUnavailable, match="no platform"):
        evidence_of(_unsigned(GOOGLE), only_mock)


@pytest.mark.parametrize("token", ["", "a.b", "e30.e30", "x.e30.y", "!!.!!.!!"])
def test_unreadable_launcher_token_refused(token: str) -> None:
    with pytest.raises(AttestationUnavailable):
        evidence_of(token)


def test_token_without_issuer_refused() -> None:
    with pytest.raises(AttestationUnavailable, match="no issuer"):
        evidence_of(_unsigned(GOOGLE, iss=None))


def test_claims_outside_the_platforms_schema_refused() -> None:
    with pytest.raises(AttestationUnavailable, match="cannot be read"):
        evidence_of(_unsigned(GOOGLE, submods={"container": {}}))


def test_destinations_of_each_platform() -> None:
    assert resolve_platform(GOOGLE) is None
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(AttestationUnavailable, match="insecure-mock platform names no token"):
        resolve_platform(f"http://127.0.0.1:{port}")
    with pytest.raises(AttestationUnavailable, match="no platform"):
        resolve_platform("https://verifier.attacker.example")
