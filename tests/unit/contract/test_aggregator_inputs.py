"""The aggregator's operator inputs in the one table (issue 27) and the identity a data owner
grants it."""

from __future__ import annotations

import pytest

from sealbench.contract.inputs import (
    ALL_OVERRIDE_NAMES,
    ENV_INPUTS,
    POOL_ONLY_NAMES,
    InputClass,
    Rule,
)
from sealbench.contract.pool import (
    AGGREGATE_ENV_NAMES,
    ENV_POOL_INPUTS_DIGEST,
    ENV_POOL_INPUTS_URI,
    ENV_POOL_LOG_KEY,
    ENV_POOL_WITNESS_QUORUM,
    ENV_POOL_WITNESSES,
    ENV_RESULT_POOL_PROVIDER,
    aggregator_identity,
)
from sealbench.contract.spec import ENV_OVERRIDE_NAMES
from sealbench.contract.workload import WorkloadIdentity
from sealbench.crypto.digest import sha256_digest
from tests.unit.contract.test_pool import POOL_ANCHOR, POOL_RECIPIENT


def test_the_aggregators_own_inputs_are_classified() -> None:
    anchor = {ENV_POOL_LOG_KEY, ENV_POOL_WITNESSES, ENV_POOL_WITNESS_QUORUM}
    assert {ENV_POOL_INPUTS_URI, ENV_POOL_INPUTS_DIGEST,
            ENV_RESULT_POOL_PROVIDER} | anchor == POOL_ONLY_NAMES
    for name in anchor:  # the pool anchor's members: bound through its digest in the uid
        assert (ENV_INPUTS[name].klass, ENV_INPUTS[name].rule) == (InputClass.BOUND,
                                                                   Rule.BOUND_BY_DIGEST)
    assert ENV_INPUTS[ENV_POOL_INPUTS_URI].klass is InputClass.INERT
    assert ENV_INPUTS[ENV_RESULT_POOL_PROVIDER].klass is InputClass.INERT
    digest = ENV_INPUTS[ENV_POOL_INPUTS_DIGEST]
    assert (digest.klass, digest.rule) == (InputClass.BOUND, Rule.RELEASE_BOUND)


def test_every_name_of_either_workload_has_one_entry() -> None:
    assert ALL_OVERRIDE_NAMES[:len(ENV_OVERRIDE_NAMES)] == ENV_OVERRIDE_NAMES
    assert set(ALL_OVERRIDE_NAMES) == set(ENV_OVERRIDE_NAMES) | set(AGGREGATE_ENV_NAMES)
    assert set(ENV_INPUTS) == set(ALL_OVERRIDE_NAMES)


def test_the_aggregator_identity_keeps_the_evaluations_model_benchmark_and_pin() -> None:
    """... and names the benchmark's pool recipient, not the data owner's result key."""
    evaluation = WorkloadIdentity(sha256_digest(b"eval"), sha256_digest(b"d"),
                                  sha256_digest(b"m"), sha256_digest(b"r"), "12", "wdbc/1")
    aggregator = aggregator_identity(sha256_digest(b"agg"), POOL_ANCHOR, evaluation)
    assert aggregator.uid() == "::".join((
        sha256_digest(b"agg"), "-", sha256_digest(b"m"), POOL_RECIPIENT, "12",
        "wdbc/1"))
    assert WorkloadIdentity.from_uid(aggregator.uid()) == aggregator
    with pytest.raises(ValueError):
        aggregator_identity("not a digest", POOL_ANCHOR, evaluation)
