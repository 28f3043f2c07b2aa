"""The platform seam: both implementations found by entry point, each owning its issuer, and each
method doing its platform's job (claims, rules, endpoints, launch settings, key release).

Tokens are minted by the real mock verifier (production and debug profiles, the Confidential
Space claim set) and signed with its key; the mock's discovery document is served over real
loopback HTTP, as the enclave reads it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import pytest

from sealbench.contract.inputs import ConditionContext, ConditionInputError
from sealbench.contract.spec import ENV_OVERRIDE_NAMES, ServiceEndpoints
from sealbench.contract.workload import WorkloadIdentity
from sealbench.crypto.attestation import RESULT_AUDIENCE, Jwks
from sealbench.crypto.digest import sha256_digest
from sealbench.crypto.errors import IssuerMismatchError, PolicyViolationError, TokenInvalidError
from sealbench.gcp._cs_claims import GOOGLE_ENDPOINTS
from sealbench.mocktee.state import MockState
from sealbench.mocktee.verifier import MockVerifier, WorkloadLaunch
from sealbench.platforms.attester import DEFAULT_SOCKET_PATH, LauncherAttester
from sealbench.platforms.platform import (
    PLATFORM_GROUP,
    AttestedWorkload,
    Platform,
    UnknownPlatformError,
    WorkloadRequirements,
    available_platforms,
    load_platform,
    platform_for_issuer,
)

GOOGLE = "https://confidentialcomputing.googleapis.com"
MOCK_ISSUER = "http://127.0.0.1:7000"
IMAGE = sha256_digest(b"evaluation image")
DATA = sha256_digest(b"dataset")
MODEL = sha256_digest(b"model")
RECIPIENT = sha256_digest(b"recipient key")
NONCE = "n" * 64
NOW = 1_800_000_000
MOCK_URLS = ServiceEndpoints(
    sts_url="http://127.0.0.1:7001/v1/token",
    kms_endpoint="http://127.0.0.1:7002",
    storage_endpoint="http://127.0.0.1:7003",
)


@pytest.fixture(scope="module")
def cs() -> Platform:
    return load_platform("confidential-space")


@pytest.fixture(scope="module")
def mock() -> Platform:
    return load_platform("insecure-mock")


@pytest.fixture(scope="module")
def verifier(tmp_path_factory: pytest.TempPathFactory) -> MockVerifier:
    return MockVerifier(MockState(tmp_path_factory.mktemp("mock")), GOOGLE, clock=lambda: NOW)


def _launch(**changes: Any) -> WorkloadLaunch:
    env = {
        "SEALBENCH_DATA_DIGEST": DATA,
        "SEALBENCH_MODEL_DIGEST": MODEL,
        "SEALBENCH_RECIPIENT_DIGEST": RECIPIENT,
        "SEALBENCH_BENCHMARK_ID": "1",
        "SEALBENCH_METRICS_VERSION": "brats-2023-gli/1",
    }
    fields: dict[str, Any] = {
        "image_digest": IMAGE,
        "image_reference": f"registry.example/eval@{IMAGE}",
        "env_overrides": env,
    }
    fields.update(changes)
    return WorkloadLaunch(**fields)


def _requirements() -> WorkloadRequirements:
    return WorkloadRequirements(
        allowed_image_digests=frozenset({IMAGE}),
        expected_env_overrides={"SEALBENCH_DATA_DIGEST": DATA, "SEALBENCH_MODEL_DIGEST": MODEL},
        expected_nonce=NONCE,
        allowed_extra_env_overrides=frozenset({"SEALBENCH_RECIPIENT_DIGEST",
                                               "SEALBENCH_BENCHMARK_ID",
                                               "SEALBENCH_METRICS_VERSION"}),
    )


def _jwks(verifier: MockVerifier) -> Jwks:
    return Jwks.from_json(json.dumps(verifier.jwks()))


# -- the registry ------------------------------------------------------------------------------


def test_both_platforms_are_found_by_name() -> None:
    platforms = {p.name: p for p in available_platforms()}
    assert set(platforms) >= {"confidential-space", "insecure-mock"}
    assert platforms["confidential-space"].insecure is False
    assert platforms["insecure-mock"].insecure is True
    assert all(isinstance(p, Platform) for p in platforms.values())
    assert PLATFORM_GROUP == "sealbench.platforms"


def test_unknown_platform_name_lists_the_installed_ones() -> None:
    with pytest.raises(UnknownPlatformError, match=r"'nitro'.*confidential-space"):
        load_platform("nitro")


def test_finding_googles_platform_constructs_no_other(monkeypatch: pytest.MonkeyPatch) -> None:
    """``issues`` is known to the class: a production lookup never constructs the mock's."""
    from sealbench.mocktee.platform import InsecureMockPlatform

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("the mock's platform was constructed")

    monkeypatch.setattr(InsecureMockPlatform, "__init__", forbidden)
    assert platform_for_issuer(GOOGLE).name == "confidential-space"


def test_each_issuer_belongs_to_exactly_its_platform() -> None:
    assert platform_for_issuer(GOOGLE).name == "confidential-space"
    assert platform_for_issuer(MOCK_ISSUER).name == "insecure-mock"
    assert platform_for_issuer("http://localhost:8080").name == "insecure-mock"


@pytest.mark.parametrize(
    "issuer",
    [
        "https://verifier.attacker.example",
        GOOGLE + "/",  # Google's issuer carries no trailing slash
        "https://confidentialcomputing.googleapis.com.attacker.example",
        "http://confidentialcomputing.googleapis.com",
        "https://127.0.0.1:7000",  # the mock is plain http on loopback only
        "http://127.0.0.1:7000.attacker.example",
        "http://127.0.0.1:7000/elsewhere",
        "http://10.0.0.5:7000",
        "",
    ],
)
def test_lookalike_issuer_belongs_to_no_platform(issuer: str) -> None:
    with pytest.raises(UnknownPlatformError, match="no platform"):
        platform_for_issuer(issuer)


def test_two_platforms_claiming_one_issuer_is_refused(cs: Platform) -> None:
    with pytest.raises(UnknownPlatformError, match="2 platforms"):
        platform_for_issuer(GOOGLE, [cs, load_platform("confidential-space")])


# -- evidence: the claim schema and the rules ----------------------------------------------------


def test_genuine_token_verifies_to_the_neutral_view(cs: Platform, verifier: MockVerifier) -> None:
    token = verifier.mint(_launch(), RESULT_AUDIENCE, [NONCE])
    workload = cs.verify(
        token, _jwks(verifier), issuer=GOOGLE, audience=RESULT_AUDIENCE, now=NOW,
        requirements=_requirements(),
    )
    assert workload == AttestedWorkload(
        iss=GOOGLE, aud=RESULT_AUDIENCE, image_digest=IMAGE,
        env_override=dict(_launch().env_overrides), eat_nonce=(NONCE,),
    )
    assert WorkloadIdentity.from_env_overrides(workload.image_digest, workload.env_override) == (
        WorkloadIdentity(IMAGE, DATA, MODEL, RECIPIENT, "1", "brats-2023-gli/1")
    )


@pytest.mark.parametrize(
    ("launch", "claim"),
    [
        (_launch(debug=True), "dbgstat"),
        (_launch(hwmodel="GCP_SHIELDED_VM"), "hwmodel"),
        (_launch(secboot=False), "secboot"),
        (_launch(image_digest=sha256_digest(b"patched image")), "image_digest"),
        (_launch(cmd_override=("sh", "-c", "cat /keys")), "cmd_override"),
    ],
    ids=["debug-image", "shielded-vm", "no-secure-boot", "other-image", "command-override"],
)
def test_rules_refuse_on_both_platforms(
    cs: Platform, mock: Platform, verifier: MockVerifier, launch: WorkloadLaunch, claim: str
) -> None:
    token = verifier.mint(launch, RESULT_AUDIENCE, [NONCE])
    for platform in (cs, mock):
        with pytest.raises(PolicyViolationError, match=claim):
            platform.verify(
                token, _jwks(verifier), issuer=GOOGLE, audience=RESULT_AUDIENCE, now=NOW,
                requirements=_requirements(),
            )


def test_unreviewed_override_refused(cs: Platform, verifier: MockVerifier) -> None:
    env = {**_launch().env_overrides, "LD_PRELOAD": "/tmp/x.so"}
    token = verifier.mint(_launch(env_overrides=env), RESULT_AUDIENCE, [NONCE])
    with pytest.raises(PolicyViolationError, match="LD_PRELOAD"):
        cs.verify(
            token, _jwks(verifier), issuer=GOOGLE, audience=RESULT_AUDIENCE, now=NOW,
            requirements=_requirements(),
        )


def test_replayed_nonce_refused(cs: Platform, verifier: MockVerifier) -> None:
    token = verifier.mint(_launch(), RESULT_AUDIENCE, ["o" * 64])
    with pytest.raises(PolicyViolationError, match="eat_nonce"):
        cs.verify(
            token, _jwks(verifier), issuer=GOOGLE, audience=RESULT_AUDIENCE, now=NOW,
            requirements=_requirements(),
        )


def test_token_of_another_issuer_refused(cs: Platform, verifier: MockVerifier) -> None:
    token = verifier.mint(_launch(), RESULT_AUDIENCE, [NONCE])
    with pytest.raises(IssuerMismatchError):
        cs.verify(token, _jwks(verifier), issuer=MOCK_ISSUER, audience=RESULT_AUDIENCE, now=NOW)


def test_payload_outside_the_claim_schema_refused(cs: Platform, mock: Platform) -> None:
    for platform in (cs, mock):
        with pytest.raises(TokenInvalidError, match="malformed at: sub, secboot"):
            platform.evidence({"iss": GOOGLE, "aud": "x", "iat": 1, "nbf": 1, "exp": 2})


def test_requirements_need_an_image() -> None:
    with pytest.raises(ValueError, match="at least one image"):
        WorkloadRequirements(allowed_image_digests=frozenset())
    with pytest.raises(ValueError):
        WorkloadRequirements(allowed_image_digests=frozenset({"latest"}))


# -- endpoints, attester, launch settings --------------------------------------------------------


def test_confidential_space_endpoints_are_googles_own(cs: Platform) -> None:
    google = cs.token_destinations(GOOGLE)
    assert google.fixed and google.spec_overrides is None
    assert google.endpoints == GOOGLE_ENDPOINTS
    with pytest.raises(ValueError):
        cs.token_destinations(MOCK_ISSUER)


class _Discovery(BaseHTTPRequestHandler):
    document: ClassVar[dict[str, Any]] = {}

    def do_GET(self) -> None:
        body = json.dumps(self.document).encode()
        self.send_response(200 if self.path == "/.well-known/openid-configuration" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def discovery() -> Iterator[tuple[str, type[_Discovery]]]:
    handler = type("Handler", (_Discovery,), {"document": {}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def test_mock_endpoints_come_from_its_discovery_document(
    mock: Platform, discovery: tuple[str, type[_Discovery]], tmp_path: Path
) -> None:
    issuer, handler = discovery
    verifier = MockVerifier(MockState(tmp_path), issuer)
    verifier.service_endpoints = {
        "sts_url": MOCK_URLS.sts_url,
        "kms_endpoint": MOCK_URLS.kms_endpoint,
        "storage_endpoint": MOCK_URLS.storage_endpoint,
    }
    handler.document = verifier.openid_configuration()
    named = mock.token_destinations(issuer)
    assert named.endpoints == MOCK_URLS and not named.fixed
    assert named.spec_overrides == MOCK_URLS


def test_mock_discovery_without_endpoints_names_none(
    mock: Platform, discovery: tuple[str, type[_Discovery]]
) -> None:
    issuer, handler = discovery
    handler.document = {"issuer": issuer}
    with pytest.raises(ValueError, match="does not name its platform's endpoints"):
        mock.token_destinations(issuer)
    with pytest.raises(ValueError, match="not a mock verifier"):
        mock.token_destinations(GOOGLE)


def test_attesters(cs: Platform, mock: Platform, tmp_path: Path) -> None:
    assert isinstance(cs.attester(), LauncherAttester)
    with pytest.raises(ValueError, match="fixed path"):
        cs.attester(tmp_path)
    # The Docker backend mounts the mock's socket folder at the real launcher's path.
    assert str(DEFAULT_SOCKET_PATH) in repr(mock.attester())
    attester = mock.attester(tmp_path)
    assert isinstance(attester, LauncherAttester)
    assert str(tmp_path / "teeserver.sock") in repr(attester)


def test_run_spec_reaches_the_workload(cs: Platform, mock: Platform) -> None:
    spec = {"SEALBENCH_RUN_ID": "r1", "SEALBENCH_MODEL_DIGEST": MODEL}
    assert cs.launch_environment(spec) == {
        "tee-env-SEALBENCH_MODEL_DIGEST": MODEL,
        "tee-env-SEALBENCH_RUN_ID": "r1",
    }
    assert mock.launch_environment(spec) == spec
    for platform in (cs, mock):
        with pytest.raises(ValueError, match="LD_PRELOAD"):
            platform.launch_environment({**spec, "LD_PRELOAD": "/tmp/x.so"})
        assert set(platform.launch_environment(dict.fromkeys(ENV_OVERRIDE_NAMES, "v")))


# -- key release ---------------------------------------------------------------------------------


def _context(endpoints: ServiceEndpoints | None) -> ConditionContext:
    return ConditionContext(frozenset({IMAGE}), True, endpoints)


def test_each_platform_pins_its_own_endpoints(cs: Platform, mock: Platform) -> None:
    production = cs.key_release_condition(_context(None))
    assert "!has(assertion.submods.container.env_override.SEALBENCH_STS_URL)" in production
    assert "'CONFIDENTIAL_SPACE'" in production and IMAGE in production
    with pytest.raises(ConditionInputError, match="takes no endpoints"):
        cs.key_release_condition(_context(MOCK_URLS))
    pinned = mock.key_release_condition(_context(MOCK_URLS))
    assert f"SEALBENCH_STS_URL == '{MOCK_URLS.sts_url}'" in pinned
    with pytest.raises(ConditionInputError, match="must pin"):
        mock.key_release_condition(_context(None))


def test_grantee_is_the_pools_principal_set(cs: Platform, mock: Platform) -> None:
    uid = WorkloadIdentity(IMAGE, DATA, MODEL, RECIPIENT, "1", "brats-2023-gli/1").uid()
    pool = "projects/123456/locations/global/workloadIdentityPools/hospital-pool"
    expected = f"principalSet://iam.googleapis.com/{pool}/attribute.workload_uid/{uid}"
    assert cs.grantee(pool, uid) == expected
    assert mock.grantee(pool, uid) == expected
    with pytest.raises(ValueError):
        cs.grantee("projects/p/locations/global/workloadIdentityPools/x", uid)
    with pytest.raises(ValueError):
        cs.grantee(pool, "not-a-uid")
    with pytest.raises(ValueError):
        cs.grantee(pool + "/../other", uid)


def test_launcher_backends() -> None:
    assert load_platform("confidential-space").launcher_backends == ("confidential-space",)
    assert set(load_platform("insecure-mock").launcher_backends) == {"mock", "docker"}


def test_choosing_the_mock_is_logged_as_insecure(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="sealbench.platforms"):
        platform_for_issuer(GOOGLE)
        assert "INSECURE" not in caplog.text
        platform_for_issuer(MOCK_ISSUER)
    assert "INSECURE platform insecure-mock" in caplog.text


def test_loading_every_platform_pulls_in_no_sdk_and_no_mock_service() -> None:
    """The evaluation image (extras ``enclave,gcp``) and the registry (``server``) load every
    installed platform to find one: neither may need the ``mock`` extra or a cloud SDK."""
    import subprocess
    import sys

    code = (
        "import json, sys\n"
        "from sealbench.platforms.platform import available_platforms\n"
        "names = [p.name for p in available_platforms()]\n"
        "heavy = ('celpy', 'gcp_storage_emulator', 'google.cloud', 'google.auth',\n"
        "         'sealbench.mocktee.server', 'sealbench.mocktee.sts')\n"
        "print(json.dumps([names, sorted(m for m in heavy if m in sys.modules)]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    names, loaded = json.loads(proc.stdout)
    assert {"confidential-space", "insecure-mock"} <= set(names)
    assert loaded == []


def test_googles_verifier_is_named_once_by_its_platform() -> None:
    """The registry's default trust, the client's result checks and the platform's own token
    verification name one verifier, the one Google's platform publishes; the mock publishes
    none (each running mock has its own) and the third platform is reached the same way."""
    from sealbench.client.runs.attestation_keys import gcp_key_source
    from sealbench.gcp.confidential_space import (
        CONFIDENTIAL_SPACE_ISSUER,
        CONFIDENTIAL_SPACE_JWKS_URL,
        ConfidentialSpacePlatform,
    )
    from sealbench.mocktee.platform import InsecureMockPlatform
    from sealbench.server.settings import ServerSettings

    keys = ConfidentialSpacePlatform.verifier
    assert (keys.issuer, keys.jwks_url) == (CONFIDENTIAL_SPACE_ISSUER, CONFIDENTIAL_SPACE_JWKS_URL)
    [trusted] = ServerSettings().trusted_issuers
    assert (trusted.issuer, trusted.jwks_url, trusted.platform) == (
        keys.issuer, keys.jwks_url, "confidential-space")
    source = gcp_key_source({})
    assert (source.issuer, source.jwks_url) == (keys.issuer, keys.jwks_url)
    assert InsecureMockPlatform.verifier is None


def test_only_a_platform_that_is_not_a_mock_attests_hardware(
    third_platform: ModuleType,
) -> None:
    from sealbench.gcp.confidential_space import CONFIDENTIAL_SPACE_ISSUER
    from sealbench.platforms.platform import attests_hardware

    assert attests_hardware(CONFIDENTIAL_SPACE_ISSUER)
    assert not attests_hardware(third_platform.ISSUER)  # the double says it is insecure
    assert not attests_hardware("https://attestation.test.invalid")  # nobody's
