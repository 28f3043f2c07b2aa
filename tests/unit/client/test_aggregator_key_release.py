"""Key release admits the benchmark's aggregator, by consent (issue 27). The authority names the
aggregator image when it creates the benchmark; a data owner's grants (``policy sync``'s, and
the digest the registry requires) gain the aggregator's identity per model approved beside the
dataset; model owners' grants do not change. Each token below is what the operator could obtain
by launching an image with its chosen attested overrides, judged as Google (and the mock's STS,
the same code) judges it: the data owner's provider condition holds and the uid its mapping
computes is granted. The registry, the approvals and the grants are real."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sealbench.client.assets.grants import AllowedWorkload, allowed_workloads, grants_digest
from sealbench.client.assets.prepare import RECIPIENT_STATISTIC
from sealbench.client.errors import ClientError
from sealbench.client.images import pinned
from sealbench.client.registry import definitions
from sealbench.client.registry.api import RegistryClient
from sealbench.contract.pool import AggregateSpec, PoolAnchor
from sealbench.contract.spec import ServiceEndpoints
from sealbench.contract.workload import WorkloadIdentity
from sealbench.crypto.digest import sha256_digest
from sealbench.gcp.confidential_space import uid_mapping_expression
from sealbench.gcp.policy import AssetPolicy, PoolProvider, attribute_condition, condition_context
from sealbench.mocktee.cel import evaluate_bool, evaluate_string
from sealbench.server.schemas import BenchmarkCreate, DatasetCreate, ModelCreate
from tests.unit.contract.test_pool import POOL_RECIPIENT, POOL_RECIPIENT_KEY

POOL = PoolProvider("200000000002", "hospital-pool", "attestation")
KEY = "projects/h/locations/global/keyRings/r/cryptoKeys/k"
IMAGE = sha256_digest(b"the evaluation image")
AGGREGATOR = sha256_digest(b"the aggregator image")
RECIPIENT = sha256_digest(b"hospital result key")
AUTHORITY_POOL = ("projects/300000000003/locations/global/workloadIdentityPools/authority/"
                  "providers/results")
MOCK = ServiceEndpoints(
    "http://127.0.0.1:7001/v1/token", "http://127.0.0.1:7002", "http://127.0.0.1:7003")
#: The mock verifier's issuer (a loopback URL): its provider pins the mock's endpoints.
MOCK_ISSUER = "http://127.0.0.1:7000/"


def _benchmark(api: dict[str, RegistryClient], name: str, aggregator: str | None) -> int:
    definition = definitions.load_benchmark_definition("brats-small")
    body: BenchmarkCreate = definitions.benchmark_body(
        definition, image=pinned.EvaluationImage(f"r/eval@{IMAGE}", IMAGE),
        reference_model_id=None, aggregator_digest=aggregator)
    b = api["authority"].create_benchmark(body.model_copy(update={"name": name})).id
    api["admin"].approve_benchmark(b)
    return b


def _world(api: dict[str, RegistryClient]) -> dict[str, int]:
    """Benchmark 'pooled' (with the aggregator) and 'plain' (without); models m1, m2 in
    'pooled', m1 in 'plain'; dataset d joins both."""
    ids = {"pooled": _benchmark(api, "pooled", AGGREGATOR), "plain": _benchmark(api, "plain", None)}
    for name in ("m1", "m2"):
        ids[name] = api["modelco"].register_model(
            ModelCreate(name=name, version="1", digest=sha256_digest(name.encode()))).id
    ids["d"] = api["hospital"].register_dataset(DatasetCreate(
        name="d", digest=sha256_digest(b"d"), case_count=1,
        statistics={RECIPIENT_STATISTIC: RECIPIENT})).id
    for b, models in (("pooled", ("m1", "m2")), ("plain", ("m1",))):
        api["hospital"].request_association("dataset", ids[b], ids["d"])
        api["authority"].decide_association("dataset", ids[b], ids["d"], approve=True)
        for m in models:
            api["modelco"].request_association("model", ids[b], ids[m])
            api["authority"].decide_association("model", ids[b], ids[m], approve=True)
    return ids


def _policy(grants: tuple[AllowedWorkload, ...], endpoints: ServiceEndpoints | None = None,
            ) -> AssetPolicy:
    """What ``sealbench policy sync`` writes for the hospital's pool (client/assets/owner.py)."""
    mock = {} if endpoints is None else {"issuer_uri": MOCK_ISSUER, "endpoints": endpoints}
    return AssetPolicy(provider=POOL, key_name=KEY, bucket=None, include_data=True,
                       workloads=frozenset(g.identity for g in grants), **mock)


def _claims(image: str, env: dict[str, str]) -> dict[str, Any]:
    """The verifier's claims for a launch of ``image`` with ``env`` on production hardware."""
    return {
        "swname": "CONFIDENTIAL_SPACE", "dbgstat": "disabled-since-boot",
        "hwmodel": "GCP_INTEL_TDX", "secboot": True,
        "submods": {
            "confidential_space": {"support_attributes": ["LATEST", "STABLE", "USABLE"]},
            "container": {"image_digest": image, "cmd_override": None, "env_override": env},
        },
    }


def _recipient_key(api: dict[str, RegistryClient], benchmark: int) -> str:
    """The benchmark's pool recipient: the registry's pool-release key, recorded at creation."""
    key = api["hospital"].get_benchmark(benchmark).pool_recipient_key
    assert key is not None
    return key


def _anchor(api: dict[str, RegistryClient], benchmark: int) -> PoolAnchor:
    anchor = PoolAnchor.of(api["hospital"].get_benchmark(benchmark))
    assert anchor is not None
    return anchor


def _aggregator_env(api: dict[str, RegistryClient], benchmark: int, model: str, pin: str,
                    endpoints: ServiceEndpoints | None = None, *,
                    recipient_key: str | None = None) -> dict[str, str]:
    """The attested overrides of a genuine aggregator launch (its spec's, as the authority's
    ``benchmark pool`` sets them; ``recipient_key``: another than the benchmark's)."""
    anchor = _anchor(api, benchmark)
    if recipient_key is not None:
        anchor = anchor.model_copy(update={"recipient_key": recipient_key})
    cloud = {} if endpoints is None else {
        "sts_url": endpoints.sts_url, "kms_endpoint": endpoints.kms_endpoint,
        "storage_endpoint": endpoints.storage_endpoint}
    return AggregateSpec.for_anchor(
        anchor,
        run_id="pool-1", benchmark_id=str(benchmark), metrics_version=pin, model_digest=model,
        inputs_uri="gs://authority-bucket/pools/pool-1/pool-inputs.json",
        inputs_digest=sha256_digest(b"inputs"), result_uri="gs://authority-bucket/pools/pool-1",
        result_pool_provider=AUTHORITY_POOL, **cloud,
    ).to_environ()


def _released(policy: AssetPolicy, claims: dict[str, Any]) -> bool:
    activation = {"assertion": copy.deepcopy(claims)}
    try:
        condition = attribute_condition(condition_context(policy), policy.platform())
        if not evaluate_bool(condition, activation):
            return False
        uid = evaluate_string(uid_mapping_expression(include_data=True), activation)
    except Exception:  # noqa: BLE001 - a condition that cannot be evaluated denies (as GCP)
        return False
    return uid in policy.uids()


def _pin(api: dict[str, RegistryClient], b: int) -> str:
    return str(api["hospital"].get_benchmark(b).metrics_version)


def test_the_benchmark_shows_its_aggregator(api: dict[str, RegistryClient]) -> None:
    ids = _world(api)
    assert api["hospital"].get_benchmark(ids["pooled"]).aggregator_image_digest == AGGREGATOR
    assert api["hospital"].get_benchmark(ids["plain"]).aggregator_image_digest is None
    # its pool recipient is the registry's own key, not one the authority chose; none without
    assert _anchor(api, ids["pooled"]).digest() != POOL_RECIPIENT
    assert _anchor(api, ids["pooled"]).recipient_key == _recipient_key(api, ids["pooled"])
    assert api["hospital"].get_benchmark(ids["plain"]).pool_recipient_key is None


def test_an_aggregator_whose_release_the_launcher_could_read_gets_no_key(
    api: dict[str, RegistryClient]
) -> None:
    """Launched with the authority's own key as recipient (to read each noise draw and rerun
    the pool), the aggregator's uid names another recipient than the benchmark's: no key."""
    ids = _world(api)
    policy = _policy(allowed_workloads(api["hospital"], "dataset", ids["d"]))
    pin = _pin(api, ids["pooled"])
    env = _aggregator_env(api, ids["pooled"], sha256_digest(b"m1"), pin,
                          recipient_key=POOL_RECIPIENT_KEY)
    assert not _released(policy, _claims(AGGREGATOR, env))
    assert _released(policy, _claims(AGGREGATOR, _aggregator_env(
        api, ids["pooled"], sha256_digest(b"m1"), pin)))


def test_the_aggregator_is_never_the_evaluation_image(api: dict[str, RegistryClient]) -> None:
    with pytest.raises(ClientError, match="aggregator_image_digest"):
        _benchmark(api, "same", IMAGE)


def test_a_dataset_grants_the_aggregator_per_approved_model(
    api: dict[str, RegistryClient]
) -> None:
    ids = _world(api)
    pin = _pin(api, ids["pooled"])
    grants = allowed_workloads(api["hospital"], "dataset", ids["d"])
    aggregators = {g.identity for g in grants if g.identity.image_digest == AGGREGATOR}
    assert aggregators == {
        WorkloadIdentity(AGGREGATOR, None, sha256_digest(m.encode()),
                         _anchor(api, ids["pooled"]).digest(),
                         str(ids["pooled"]), pin) for m in ("m1", "m2")}
    assert len(grants) == 3 + 2  # the evaluations (pooled x2, plain x1) and two aggregators
    # the registry requires exactly what policy sync writes: the owner is not told to resync
    status = api["hospital"].get_grants("dataset", ids["d"])
    assert status.required_digest == grants_digest(grants)
    assert status.required_count == 5


def test_model_owners_grants_never_name_the_aggregator(api: dict[str, RegistryClient]) -> None:
    ids = _world(api)
    for m in ("m1", "m2"):
        grants = allowed_workloads(api["modelco"], "model", ids[m])
        assert grants
        assert {g.identity.image_digest for g in grants} == {IMAGE}
        assert api["modelco"].get_grants("model", ids[m]).required_digest == grants_digest(grants)


@pytest.mark.parametrize("endpoints", [None, MOCK], ids=["production", "mock"])
def test_the_aggregator_is_released_the_datasets_key(
    api: dict[str, RegistryClient], endpoints: ServiceEndpoints | None
) -> None:
    ids = _world(api)
    policy = _policy(allowed_workloads(api["hospital"], "dataset", ids["d"]), endpoints)
    pin = _pin(api, ids["pooled"])
    for m in ("m1", "m2"):
        env = _aggregator_env(api, ids["pooled"], sha256_digest(m.encode()), pin, endpoints)
        assert _released(policy, _claims(AGGREGATOR, env)), m
    # and the evaluation still is
    evaluation = WorkloadIdentity(IMAGE, sha256_digest(b"d"), sha256_digest(b"m1"), RECIPIENT,
                                  str(ids["pooled"]), pin)
    env = evaluation.env_overrides()
    if endpoints is not None:
        env |= endpoints.env_names()
    assert _released(policy, _claims(IMAGE, env))


def test_an_evaluation_launched_without_the_data_digest_gets_no_key(
    api: dict[str, RegistryClient]
) -> None:
    """Its uid's data field maps to '-', as the aggregator's, but only the aggregator image is
    granted a uid without a dataset; even with the public recipient marker it gets nothing."""
    ids = _world(api)
    policy = _policy(allowed_workloads(api["hospital"], "dataset", ids["d"]))
    pin = _pin(api, ids["pooled"])
    for recipient in (RECIPIENT, _anchor(api, ids["pooled"]).digest()):
        run = WorkloadIdentity(IMAGE, None, sha256_digest(b"m1"), recipient, str(ids["pooled"]),
                               pin)
        assert not _released(policy, _claims(IMAGE, run.env_overrides())), recipient
    # the evaluation image with the aggregator's whole environment
    env = _aggregator_env(api, ids["pooled"], sha256_digest(b"m1"), pin)
    assert not _released(policy, _claims(IMAGE, env))


def _tampered(env: dict[str, str], **changes: str | None) -> dict[str, str]:
    out = dict(env)
    for name, value in changes.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def test_a_tampered_aggregator_launch_gets_no_key(api: dict[str, RegistryClient]) -> None:
    ids = _world(api)
    policy = _policy(allowed_workloads(api["hospital"], "dataset", ids["d"]))
    pin = _pin(api, ids["pooled"])
    env = _aggregator_env(api, ids["pooled"], sha256_digest(b"m1"), pin)
    assert _released(policy, _claims(AGGREGATOR, env))
    attacks = {
        "a model the benchmark did not approve": _tampered(
            env, SEALBENCH_MODEL_DIGEST=sha256_digest(b"m3")),
        "another benchmark (no aggregator there)": _tampered(
            env, SEALBENCH_BENCHMARK_ID=str(ids["plain"])),
        "another pin": _tampered(env, SEALBENCH_METRICS_VERSION="brats-2023-gli/1"),
        "a recipient other than the public marker": _tampered(
            env, SEALBENCH_RECIPIENT_DIGEST=RECIPIENT),
        "a data digest (no aggregator grant names one)": _tampered(
            env, SEALBENCH_DATA_DIGEST=sha256_digest(b"d")),
        "a malformed data digest": _tampered(env, SEALBENCH_DATA_DIGEST="-"),
        "an unknown override": _tampered(env, LD_PRELOAD="/tmp/steal.so"),
        "a would-be noise knob": _tampered(env, SEALBENCH_RELEASE_EPSILON="100"),
        "an endpoint override": _tampered(
            env, SEALBENCH_KMS_ENDPOINT="https://attacker.example:8443/capture"),
        "a separator smuggled into the model": _tampered(
            env, SEALBENCH_MODEL_DIGEST=f"{sha256_digest(b'm1')}::x"),
    }
    for what, tampered in attacks.items():
        assert not _released(policy, _claims(AGGREGATOR, tampered)), what
    assert not _released(policy, _claims(sha256_digest(b"another aggregator"), env))
    with_command = _claims(AGGREGATOR, env)
    with_command["submods"]["container"]["cmd_override"] = ["/bin/sh"]
    assert not _released(policy, with_command)
    debug = _claims(AGGREGATOR, env)
    debug["dbgstat"] = "enabled"
    assert not _released(policy, debug)


def test_the_aggregator_gets_no_key_where_the_dataset_did_not_join(
    api: dict[str, RegistryClient]
) -> None:
    """A second hospital's dataset joined only the plain benchmark: its pool grants no
    aggregator, so the aggregator of 'pooled' gets nothing from it."""
    ids = _world(api)
    other = api["hospital"].register_dataset(DatasetCreate(
        name="d2", digest=sha256_digest(b"d2"), case_count=1,
        statistics={RECIPIENT_STATISTIC: RECIPIENT})).id
    api["hospital"].request_association("dataset", ids["plain"], other)
    api["authority"].decide_association("dataset", ids["plain"], other, approve=True)
    grants = allowed_workloads(api["hospital"], "dataset", other)
    assert {g.identity.image_digest for g in grants} == {IMAGE}
    env = _aggregator_env(api, ids["pooled"], sha256_digest(b"m1"), _pin(api, ids["pooled"]))
    assert not _released(_policy(grants), _claims(AGGREGATOR, env))
