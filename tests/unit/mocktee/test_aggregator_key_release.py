"""The mock STS federates the aggregator's token through a data owner's provider exactly as the
policy writer renders it (issue 27): the provider body of a data owner's policy that grants the
benchmark's aggregator, a token the mock verifier mints for a launch, the STS exchange (mapping
and condition with cel-python), and the member sets of the access token it issues against the
members the policy binds on the key."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from sealbench.contract.pool import AggregateSpec
from sealbench.contract.spec import ServiceEndpoints
from sealbench.contract.workload import WorkloadIdentity
from sealbench.crypto.attestation import Jwks
from sealbench.crypto.digest import sha256_digest
from sealbench.gcp.policy import AssetPolicy, PoolProvider, provider_body
from sealbench.mocktee._http import Request
from sealbench.mocktee.identity import Caller, Identity
from sealbench.mocktee.state import MockState
from sealbench.mocktee.sts import GRANT_TYPE, MockSts
from sealbench.mocktee.verifier import MockVerifier, WorkloadLaunch
from tests.unit.contract.test_pool import POOL_ANCHOR, POOL_RECIPIENT, POOL_RECIPIENT_KEY

MakeRequest = Callable[..., Request]
POOL = PoolProvider("111", "pool-a", "prov-a")
ENDPOINTS = ServiceEndpoints(
    "http://127.0.0.1:7001/v1/token", "http://127.0.0.1:7002", "http://127.0.0.1:7003")
IMAGE, AGGREGATOR = sha256_digest(b"evaluation"), sha256_digest(b"aggregator")
DATA, MODEL, RECIPIENT = sha256_digest(b"d"), sha256_digest(b"m"), sha256_digest(b"r")
PIN = "brats-2023-gli/1"
EVALUATION = WorkloadIdentity(IMAGE, DATA, MODEL, RECIPIENT, "7", PIN)
AGGREGATE = WorkloadIdentity(AGGREGATOR, None, MODEL, POOL_RECIPIENT, "7", PIN)


def _aggregator_env() -> dict[str, str]:
    return AggregateSpec(
        run_id="pool-1", benchmark_id="7", metrics_version=PIN, model_digest=MODEL,
        recipient_public_key=POOL_RECIPIENT_KEY, recipient_digest=POOL_RECIPIENT,
        log_key=POOL_ANCHOR.log_key, inputs_uri="gs://authority/p/pool-inputs.json",
        inputs_digest=sha256_digest(b"inputs"), result_uri="gs://authority/p",
        result_pool_provider="projects/3/locations/global/workloadIdentityPools/auth/providers/"
        "results",
        sts_url=ENDPOINTS.sts_url, kms_endpoint=ENDPOINTS.kms_endpoint,
        storage_endpoint=ENDPOINTS.storage_endpoint,
    ).to_environ()


@pytest.fixture
def world(
    state: MockState, identity: Identity, verifier: MockVerifier, clock: Callable[[], float]
) -> tuple[MockSts, AssetPolicy]:
    """The data owner's pool holds the provider ``policy sync`` writes for its evaluation and
    the benchmark's aggregator."""
    policy = AssetPolicy(
        provider=POOL, key_name="projects/p1/locations/global/keyRings/r/cryptoKeys/k",
        bucket=None, workloads=frozenset({EVALUATION, AGGREGATE}), include_data=True,
        issuer_uri=verifier.issuer + "/", endpoints=ENDPOINTS)
    with state.edit() as doc:
        doc["pools"][POOL.pool_name] = {"disabled": False}
        doc["providers"][POOL.name] = provider_body(policy)
    jwks = Jwks.from_json(verifier.jwks())
    return MockSts(state, identity, lambda: jwks, clock), policy


def _exchange(world: tuple[MockSts, AssetPolicy], identity: Identity, verifier: MockVerifier,
              make_request: MakeRequest, launch: WorkloadLaunch) -> tuple[int, str, bool]:
    """(HTTP status, error description, whether the access token holds a member the policy
    binds on the key)."""
    sts, policy = world
    token = verifier.mint(launch)
    response = sts.handle(make_request("POST", "/v1/token", form={
        "grant_type": GRANT_TYPE, "audience": "//iam.googleapis.com/" + POOL.name,
        "subject_token": token, "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
        "requested_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "scope": "https://www.googleapis.com/auth/cloud-platform"}))
    body = json.loads(response.body)
    if response.status != 200:
        return response.status, str(body.get("error_description", "")), False
    caller = identity.authenticate(make_request("GET", "/", None, body["access_token"]))
    assert isinstance(caller, Caller)
    return 200, "", bool(caller.members & policy.members())


def test_the_aggregator_federates_to_its_granted_uid(
    world: tuple[MockSts, AssetPolicy], identity: Identity, verifier: MockVerifier,
    make_request: MakeRequest,
) -> None:
    launch = WorkloadLaunch(AGGREGATOR, "r/agg", _aggregator_env())
    assert _exchange(world, identity, verifier, make_request, launch) == (200, "", True)
    evaluation = WorkloadLaunch(IMAGE, "r/eval", EVALUATION.env_overrides()
                                | ENDPOINTS.env_names())
    assert _exchange(world, identity, verifier, make_request, evaluation) == (200, "", True)


def test_an_evaluation_without_data_digest_federates_to_nothing_granted(
    world: tuple[MockSts, AssetPolicy], identity: Identity, verifier: MockVerifier,
    make_request: MakeRequest,
) -> None:
    for env in (EVALUATION.without_data().env_overrides(), _aggregator_env()):
        launch = WorkloadLaunch(IMAGE, "r/eval", env | ENDPOINTS.env_names())
        status, _, granted = _exchange(world, identity, verifier, make_request, launch)
        assert status == 200 and not granted  # federated, but its uid is bound to nothing


@pytest.mark.parametrize(("name", "value", "clause"), [
    ("LD_PRELOAD", "/tmp/steal.so", "env_override.all"),
    ("SEALBENCH_KMS_ENDPOINT", "http://127.0.0.1:6666/capture", "SEALBENCH_KMS_ENDPOINT"),
    ("SEALBENCH_DATA_DIGEST", "-", "SEALBENCH_DATA_DIGEST"),
])
def test_a_tampered_aggregator_launch_is_refused_by_the_condition(
    world: tuple[MockSts, AssetPolicy], identity: Identity, verifier: MockVerifier,
    make_request: MakeRequest, name: str, value: str, clause: str,
) -> None:
    launch = WorkloadLaunch(AGGREGATOR, "r/agg", _aggregator_env() | {name: value})
    status, why, granted = _exchange(world, identity, verifier, make_request, launch)
    assert (status, granted) == (400, False)
    assert "attribute condition" in why and clause in why


def test_the_aggregator_with_another_model_is_granted_nothing(
    world: tuple[MockSts, AssetPolicy], identity: Identity, verifier: MockVerifier,
    make_request: MakeRequest,
) -> None:
    env = _aggregator_env() | {"SEALBENCH_MODEL_DIGEST": sha256_digest(b"other model")}
    status, _, granted = _exchange(world, identity, verifier, make_request,
                                   WorkloadLaunch(AGGREGATOR, "r/agg", env))
    assert status == 200 and not granted
