"""The enclave finds the platform that attested it through the registry, by the token's issuer,
and reads the token through that platform; a token of no installed platform goes nowhere. Its
evidence comes from the platforms' own sources, and the platform is the one whose source and
verifier agree: an operator-chosen location names no platform."""

from __future__ import annotations

import base64
import json
import socket
import socketserver
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import pytest

from sealbench.contract.errors import AttestationUnavailable
from sealbench.crypto.digest import sha256_digest
from sealbench.enclave.platforms import EvidenceSource, evidence_of, resolve_platform
from sealbench.gcp._cs_claims import GOOGLE_ENDPOINTS
from sealbench.mocktee.verifier import WorkloadLaunch, build_claims
from sealbench.platforms.attester import Attester, LauncherAttester
from sealbench.platforms.platform import Platform, load_platform

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
    google = resolve_platform(GOOGLE)
    assert google.fixed and google.spec_overrides is None
    assert google.endpoints == GOOGLE_ENDPOINTS  # the default lives in the platform
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(AttestationUnavailable, match="insecure-mock platform names no token"):
        resolve_platform(f"http://127.0.0.1:{port}")
    with pytest.raises(AttestationUnavailable, match="no platform"):
        resolve_platform("https://verifier.attacker.example")


# -- where the evidence comes from: what the evidence proves, never what the operator says ------


class _Launcher(BaseHTTPRequestHandler):
    """The launcher socket protocol (``GET /v1/token``), answering one fixed token."""

    token: ClassVar[str] = ""
    requests: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.requests.append(self.path)
        body = self.token.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def address_string(self) -> str:
        return "unix"

    def log_message(self, *args: Any) -> None:
        pass


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[tuple[Path, type[_Launcher]]]:
    handler = type("Handler", (_Launcher,), {"token": "", "requests": []})
    folder = tmp_path / "launcher"
    folder.mkdir()
    server = _UnixServer(str(folder / "teeserver.sock"), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield folder, handler
    finally:
        server.shutdown()
        server.server_close()


class _Relocated:
    """A real platform whose evidence source is at ``folder`` (the fixed path cannot be
    created in a test); everything else is the platform's own."""

    def __init__(self, platform: Platform, folder: Path) -> None:
        self._platform = platform
        self._folder = folder

    def __getattr__(self, name: str) -> Any:
        return getattr(self._platform, name)

    def attester(self, launcher_dir: Path | None = None) -> Attester:
        if launcher_dir is not None:
            raise ValueError("fixed location")
        return LauncherAttester(self._folder / "teeserver.sock")


MOCK_ISSUER = "http://127.0.0.1:7000"


def test_launcher_dir_is_the_mocks_location_and_the_token_proves_it(
    launcher: tuple[Path, type[_Launcher]],
) -> None:
    folder, handler = launcher
    handler.token = _unsigned(MOCK_ISSUER)
    evidence = EvidenceSource(folder).first()
    assert evidence.platform.name == "insecure-mock" and evidence.workload.iss == MOCK_ISSUER
    assert evidence.token == handler.token and handler.requests == ["/v1/token"]


def test_a_google_token_at_an_operator_chosen_location_is_refused(
    launcher: tuple[Path, type[_Launcher]],
) -> None:
    # --launcher-dir is only a location the mock's source accepts: a (replayed) Google token
    # served there does not make the run a Confidential Space run, nor a mock one.
    folder, handler = launcher
    handler.token = _unsigned(GOOGLE)
    with pytest.raises(AttestationUnavailable, match="--launcher-dir") as info:
        EvidenceSource(folder).first()
    assert "insecure-mock" in str(info.value)


def test_production_platform_asked_first_at_the_fixed_location(
    launcher: tuple[Path, type[_Launcher]],
) -> None:
    folder, handler = launcher
    names = ("insecure-mock", "confidential-space")
    platforms = [_Relocated(load_platform(n), folder) for n in names]
    handler.token = _unsigned(GOOGLE)
    evidence = EvidenceSource(None, platforms).first()  # type: ignore[arg-type]
    assert evidence.platform.name == "confidential-space"
    assert handler.requests == ["/v1/token"]  # the mock never asked this launcher
    # The Docker backend mounts the mock's socket at the fixed path: Confidential Space's
    # source finds a token that is not Google's, and the mock's own source proves its platform.
    handler.requests.clear()
    handler.token = _unsigned(MOCK_ISSUER)
    evidence = EvidenceSource(None, platforms).first()  # type: ignore[arg-type]
    assert evidence.platform.name == "insecure-mock" and len(handler.requests) == 2


def test_no_evidence_source_answering_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AttestationUnavailable, match="no token is sent anywhere"):
        EvidenceSource(tmp_path).first()  # no socket there
    cs_only = [load_platform("confidential-space")]
    with pytest.raises(AttestationUnavailable, match="no installed platform takes evidence"):
        EvidenceSource(tmp_path, cs_only).first()
