"""The data owner's provider admits the aggregator (issue 27): its mapping writes ``-`` for a
token without data digest (the aggregator's), the shape clause still checks a digest that is
present, the known-overrides clause is the union of both workloads' names, and a data owner's
policy grants a data-less identity only to the public-release recipient. Evaluated with the
mock STS's cel-python, as the STS evaluates the rendered expressions."""

from __future__ import annotations

from typing import Any

import pytest

from sealbench.contract.inputs import ALL_OVERRIDE_NAMES, ConditionContext
from sealbench.contract.pool import AGGREGATE_ENV_NAMES
from sealbench.contract.spec import ENV_OVERRIDE_NAMES
from sealbench.contract.workload import ENV_DATA_DIGEST, NO_DATA, WorkloadIdentity
from sealbench.crypto.digest import sha256_digest
from sealbench.gcp.confidential_space import (
    ConfidentialSpacePlatform,
    env_shape_condition,
    render_condition,
    uid_mapping_expression,
)
from sealbench.gcp.policy import (
    MAX_CONDITION_CHARS,
    AssetPolicy,
    PoolProvider,
    attribute_condition,
    condition_context,
)
from sealbench.mocktee.cel import CelError, evaluate_bool, evaluate_string
from sealbench.platforms.errors import PolicyInputError
from tests.unit.contract.test_pool import POOL_RECIPIENT

IMAGE, AGGREGATOR = sha256_digest(b"evaluation"), sha256_digest(b"aggregator")
DATA, MODEL, RECIPIENT = sha256_digest(b"d"), sha256_digest(b"m"), sha256_digest(b"r")
PIN = "brats-2023-gli/1"
EVALUATION = WorkloadIdentity(IMAGE, DATA, MODEL, RECIPIENT, "7", PIN)
AGGREGATE = WorkloadIdentity(AGGREGATOR, None, MODEL, POOL_RECIPIENT, "7", PIN)
POOL = PoolProvider("200000000002", "hospital-pool", "attestation")
KEY = "projects/h/locations/global/keyRings/r/cryptoKeys/k"


def _assertion(image: str, env: dict[str, str]) -> dict[str, Any]:
    return {"assertion": {"submods": {"container": {"image_digest": image, "env_override": env}}}}


def test_mapping_writes_no_data_for_a_token_without_data_digest() -> None:
    mapping = uid_mapping_expression(include_data=True)
    assert evaluate_string(mapping, _assertion(AGGREGATOR, AGGREGATE.env_overrides())) == (
        AGGREGATE.uid())
    assert AGGREGATE.uid().split("::")[1] == NO_DATA
    # with the digest present the mapping reads it, as before
    assert evaluate_string(mapping, _assertion(IMAGE, EVALUATION.env_overrides())) == (
        EVALUATION.uid())
    # the model owner's mapping is unchanged: always '-'
    assert evaluate_string(uid_mapping_expression(include_data=False),
                           _assertion(IMAGE, EVALUATION.env_overrides())) == (
        EVALUATION.without_data().uid())


def test_mapping_still_fails_closed_without_another_uid_field() -> None:
    env = AGGREGATE.env_overrides()
    del env["SEALBENCH_MODEL_DIGEST"]
    with pytest.raises(CelError):
        evaluate_string(uid_mapping_expression(include_data=True), _assertion(AGGREGATOR, env))


@pytest.mark.parametrize("value", ["-", "", f"{DATA}::x", DATA.upper(), "sha256:" + "0" * 63])
def test_a_present_data_digest_is_still_shape_checked(value: str) -> None:
    shape = env_shape_condition(include_data=True)
    assert evaluate_bool(shape, _assertion(AGGREGATOR, AGGREGATE.env_overrides()))
    assert evaluate_bool(shape, _assertion(IMAGE, EVALUATION.env_overrides()))
    env = AGGREGATE.env_overrides() | {ENV_DATA_DIGEST: value}
    assert not evaluate_bool(shape, _assertion(AGGREGATOR, env))


def test_known_overrides_are_both_workloads_names() -> None:
    assert set(ALL_OVERRIDE_NAMES) == set(ENV_OVERRIDE_NAMES) | set(AGGREGATE_ENV_NAMES)
    assert len(ALL_OVERRIDE_NAMES) == len(set(ALL_OVERRIDE_NAMES))
    condition = render_condition(ConditionContext(frozenset({IMAGE, AGGREGATOR}), True))
    for name in ALL_OVERRIDE_NAMES:
        assert f"'{name}'" in condition


def _policy(*workloads: WorkloadIdentity, include_data: bool = True) -> AssetPolicy:
    return AssetPolicy(provider=POOL, key_name=KEY, bucket=None, include_data=include_data,
                       workloads=frozenset(workloads))


def test_a_data_owner_grants_a_data_less_identity_to_the_aggregator_only() -> None:
    policy = _policy(EVALUATION, AGGREGATE)
    assert policy.uids() == {EVALUATION.uid(), AGGREGATE.uid()}
    for other in (EVALUATION.without_data(),  # the evaluation image, dataset left open
                  WorkloadIdentity(AGGREGATOR, None, MODEL, RECIPIENT, "7", PIN)):
        with pytest.raises(PolicyInputError, match="dataset digest"):
            _policy(EVALUATION, other)


def test_the_condition_with_aggregators_stays_under_googles_cap() -> None:
    """Forty benchmarks' evaluation and aggregator images in one pool: the images are the only
    part of the condition that grows (the uid fields are in the grants)."""
    workloads = [w for n in range(40) for w in (
        WorkloadIdentity(sha256_digest(f"eval {n}".encode()), DATA, MODEL, RECIPIENT, str(n + 1),
                         PIN),
        WorkloadIdentity(sha256_digest(f"agg {n}".encode()), None, MODEL,
                         POOL_RECIPIENT, str(n + 1), PIN))]
    small = attribute_condition(condition_context(_policy(EVALUATION, AGGREGATE)))
    assert len(small) < 2400  # two images: room for about 22 more
    with pytest.raises(PolicyInputError, match="exceeds 4096"):
        attribute_condition(condition_context(_policy(*workloads)))
    fits = attribute_condition(condition_context(_policy(*workloads[:16])))
    assert len(fits) <= MAX_CONDITION_CHARS


def test_confidential_space_launches_the_aggregator_spec_only_with_known_names() -> None:
    platform = ConfidentialSpacePlatform()
    metadata = platform.launch_environment(dict.fromkeys(AGGREGATE_ENV_NAMES, "v"))
    assert set(metadata) == {f"tee-env-{n}" for n in AGGREGATE_ENV_NAMES}
    with pytest.raises(ValueError, match="LD_PRELOAD"):
        platform.launch_environment({"LD_PRELOAD": "/tmp/x.so"})
