"""The aggregator's contract documents (issue 27): the pool inputs the authority names (each run
and each dataset once), the aggregator's run spec through the attested environment (round trip,
refusals naming the variable), and the pooled release's nonce, domain-separated from the result
and failure nonces."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest
from pydantic import ValidationError

from sealbench.contract.pool import (
    AGGREGATE_ENV_NAMES,
    AggregateSpec,
    PoolAnchor,
    PooledInput,
    PooledRelease,
    PoolInput,
    PoolInputs,
    pooled_nonce,
)
from sealbench.contract.result import ResultFormatError, ResultSummary, WithheldSummary
from sealbench.contract.spec import AssetLocation, RunSpecError
from sealbench.crypto.attestation import failure_nonce, result_nonce
from sealbench.crypto.digest import sha256_digest
from sealbench.crypto.note import SignerKey
from sealbench.crypto.sealing import generate_recipient_key, public_key_to_raw

POOL = "projects/2/locations/global/workloadIdentityPools/hospital-pool/providers/attestation"
#: A registry's pool-release key as a benchmark records it (base64 X25519), its log key, the pool
#: anchor they make and its digest: the aggregator's recipient (other tests import these).
POOL_KEY = generate_recipient_key()
POOL_RECIPIENT_KEY = base64.b64encode(public_key_to_raw(POOL_KEY.public_key())).decode()
POOL_LOG_SIGNER = SignerKey.generate("test.example/sealbench-log")
POOL_ANCHOR = PoolAnchor(recipient_key=POOL_RECIPIENT_KEY,
                         log_key=POOL_LOG_SIGNER.verifier().to_string())
POOL_RECIPIENT = POOL_ANCHOR.digest()
MODEL_DIGEST = sha256_digest(b"model")


def _commitment(n: int) -> str:
    return "sha256:" + hashlib.sha256(f"statistics {n}".encode()).hexdigest()


def _input(n: int, *, dataset: int | None = None, run: int | None = None) -> PoolInput:
    d = n if dataset is None else dataset
    return PoolInput(
        run_id=f"run-{n if run is None else run}",
        dataset=AssetLocation(
            asset_id=f"ds-{d}",
            uri=f"gs://hospital-{d}/datasets/ds-{d}",
            kms_key=f"projects/h{d}/locations/global/keyRings/r/cryptoKeys/data",
            pool_provider=POOL,
        ),
        data_digest=sha256_digest(f"data {d}".encode()),
        statistics_uri=f"gs://hospital-{d}/results/run-{n}",
        commitment=_commitment(n),
    )


def _inputs(*inputs: PoolInput) -> PoolInputs:
    return PoolInputs(
        pool_id="pool-1",
        benchmark_id="7",
        metrics_version="wdbc/1",
        model_id="model-1",
        model_digest=MODEL_DIGEST,
        inputs=inputs,
    )


def test_pool_inputs_round_trip_and_digest() -> None:
    doc = _inputs(_input(1), _input(2), _input(3))
    data = doc.to_bytes()
    assert PoolInputs.from_bytes(data) == doc
    assert doc.digest() == sha256_digest(data)
    assert doc.digest() != _inputs(_input(1), _input(2)).digest()


def test_pool_inputs_refuse_a_run_twice() -> None:
    with pytest.raises(ValidationError, match="a run appears twice"):
        _inputs(_input(1), _input(2, run=1))


def test_pool_inputs_refuse_a_dataset_twice() -> None:
    """One result per dataset: two runs of one dataset would count its cases twice."""
    with pytest.raises(ValidationError, match="a dataset appears twice"):
        _inputs(_input(1), _input(2, dataset=1))


def test_pool_inputs_refuse_duplicates_read_from_bytes() -> None:
    """The aggregator reads the document from storage: the same refusal, as a format error."""
    doc = json.loads(_inputs(_input(1), _input(2)).to_bytes())
    doc["inputs"][1]["run_id"] = "run-1"
    with pytest.raises(ResultFormatError, match="malformed PoolInputs"):
        PoolInputs.from_bytes(json.dumps(doc).encode())


def test_pool_inputs_refuse_none_and_bad_commitments() -> None:
    with pytest.raises(ValidationError):
        _inputs()
    doc = json.loads(_inputs(_input(1)).to_bytes())
    doc["inputs"][0]["commitment"] = "sha256:" + "A" * 64
    with pytest.raises(ResultFormatError):
        PoolInputs.from_bytes(json.dumps(doc).encode())


def _spec(**changes: Any) -> AggregateSpec:
    values: dict[str, Any] = {
        "run_id": "pool-1-run",
        "benchmark_id": "7",
        "metrics_version": "wdbc/1",
        "model_digest": MODEL_DIGEST,
        "recipient_public_key": POOL_RECIPIENT_KEY,
        "recipient_digest": POOL_RECIPIENT,
        "log_key": POOL_ANCHOR.log_key,
        "inputs_uri": "gs://authority/pools/pool-1",
        "inputs_digest": _inputs(_input(1)).digest(),
        "result_uri": "gs://authority/pools/pool-1",
    }
    return AggregateSpec.model_validate({**values, **changes})


def test_aggregate_spec_environ_round_trip() -> None:
    spec = _spec(result_pool_provider=POOL, iam_wait_s="120")
    environ = spec.to_environ()
    assert set(environ) <= set(AGGREGATE_ENV_NAMES)
    assert AggregateSpec.from_environ(environ) == spec
    # the optional members are left out when unset, and still round trip
    bare = _spec()
    assert "SEALBENCH_RESULT_POOL_PROVIDER" not in bare.to_environ()
    assert AggregateSpec.from_environ(bare.to_environ()) == bare


def test_aggregate_spec_reads_only_its_own_variables() -> None:
    environ = {**_spec().to_environ(), "SEALBENCH_EPSILON": "100", "PATH": "/bin"}
    assert AggregateSpec.from_environ(environ) == _spec()


@pytest.mark.parametrize("name", [
    "SEALBENCH_RUN_ID", "SEALBENCH_POOL_INPUTS_URI", "SEALBENCH_POOL_INPUTS_DIGEST",
    "SEALBENCH_RESULT_URI",
])
def test_aggregate_spec_missing_variable_is_named(name: str) -> None:
    environ = _spec().to_environ()
    del environ[name]
    with pytest.raises(RunSpecError, match=name):
        AggregateSpec.from_environ(environ)


def test_aggregate_spec_refuses_a_log_key_or_witnesses_the_anchor_digest_does_not_name() -> None:
    """The uid's recipient is the pool anchor's digest: the operator's own log key (to forge
    authorizations) or dropping the witnesses changes it, refused naming the recipient."""
    forger = SignerKey.generate("operator.example/log").verifier().to_string()
    environ = {**_spec().to_environ(), "SEALBENCH_POOL_LOG_KEY": forger}
    with pytest.raises(RunSpecError, match="SEALBENCH_RECIPIENT_DIGEST"):
        AggregateSpec.from_environ(environ)
    from tests.pool_ledger import witness_key

    witness = witness_key("witness.example/w1").verifier().to_string()
    witnessed = PoolAnchor(recipient_key=POOL_RECIPIENT_KEY, log_key=POOL_ANCHOR.log_key,
                           witnesses=(witness,), quorum=1)
    spec = AggregateSpec.for_anchor(witnessed, **{
        k: v for k, v in _spec().model_dump().items()
        if k not in {"recipient_public_key", "recipient_digest", "log_key", "witnesses",
                     "witness_quorum"} and v is not None})
    assert AggregateSpec.from_environ(spec.to_environ()).anchor() == witnessed
    environ = spec.to_environ()
    del environ["SEALBENCH_POOL_WITNESSES"], environ["SEALBENCH_POOL_WITNESS_QUORUM"]
    with pytest.raises(RunSpecError, match="SEALBENCH_RECIPIENT_DIGEST"):
        AggregateSpec.from_environ(environ)


def test_pool_anchor_refuses_bad_witness_sets() -> None:
    from tests.pool_ledger import witness_key

    witness = witness_key("witness.example/w1").verifier().to_string()
    with pytest.raises(ValidationError, match="quorum"):
        PoolAnchor(recipient_key=POOL_RECIPIENT_KEY, log_key=POOL_ANCHOR.log_key,
                   witnesses=(witness,), quorum=2)
    with pytest.raises(ValidationError, match="quorum is 0"):
        PoolAnchor(recipient_key=POOL_RECIPIENT_KEY, log_key=POOL_ANCHOR.log_key,
                   witnesses=(witness,), quorum=0)
    with pytest.raises(ValidationError, match="twice"):
        PoolAnchor(recipient_key=POOL_RECIPIENT_KEY, log_key=POOL_ANCHOR.log_key,
                   witnesses=(witness, witness), quorum=1)
    with pytest.raises(ValidationError, match="key type"):  # a note key is no witness
        PoolAnchor(recipient_key=POOL_RECIPIENT_KEY, log_key=POOL_ANCHOR.log_key,
                   witnesses=(POOL_ANCHOR.log_key,), quorum=1)


def test_aggregate_spec_refuses_a_recipient_key_its_digest_does_not_name() -> None:
    """The uid binds the recipient's digest; a key that does not hash to it (the launcher's
    own, to read the release) is refused, naming the recipient variable; a missing key too."""
    other = base64.b64encode(public_key_to_raw(generate_recipient_key().public_key())).decode()
    environ = {**_spec().to_environ(), "SEALBENCH_RECIPIENT_PUBLIC_KEY": other}
    with pytest.raises(RunSpecError, match="SEALBENCH_RECIPIENT_DIGEST"):
        AggregateSpec.from_environ(environ)
    environ = {**_spec().to_environ(),
               "SEALBENCH_RECIPIENT_DIGEST": sha256_digest(b"someone's key")}
    with pytest.raises(RunSpecError, match="SEALBENCH_RECIPIENT_DIGEST"):
        AggregateSpec.from_environ(environ)
    environ = _spec().to_environ()
    del environ["SEALBENCH_RECIPIENT_PUBLIC_KEY"]
    with pytest.raises(RunSpecError, match="SEALBENCH_RECIPIENT_PUBLIC_KEY"):
        AggregateSpec.from_environ(environ)


@pytest.mark.parametrize(("name", "value"), [
    ("SEALBENCH_POOL_INPUTS_DIGEST", "sha256:xyz"),
    ("SEALBENCH_POOL_INPUTS_URI", "http://authority/pool"),
    ("SEALBENCH_IAM_WAIT", "-1"),
    ("SEALBENCH_RUN_ID", "../escape"),
])
def test_aggregate_spec_bad_value_is_named(name: str, value: str) -> None:
    environ = {**_spec().to_environ(), name: value}
    with pytest.raises(RunSpecError, match=name):
        AggregateSpec.from_environ(environ)


def _release() -> bytes:
    return PooledRelease(
        pool_id="pool-1",
        benchmark_id="7",
        metrics_version="wdbc/1",
        model_id="model-1",
        model_digest=MODEL_DIGEST,
        inputs_digest=_inputs(_input(1)).digest(),
        inputs=(PooledInput(run_id="run-1", dataset_id="ds-1", commitment=_commitment(1)),),
        n_cases=50,
        aggregates={"auroc": 0.9},
    ).to_bytes()


def test_pooled_nonce_binds_the_release_bytes() -> None:
    release = _release()
    nonce = pooled_nonce(release)
    assert len(nonce) == 64 and int(nonce, 16) >= 0
    assert pooled_nonce(release) == nonce
    assert pooled_nonce(release.replace(b"0.9", b"0.8")) != nonce
    assert PooledRelease.from_bytes(release).to_bytes() == release


def test_pooled_nonce_is_domain_separated() -> None:
    """The same bytes give three different nonces as a pooled release, a failure record and a
    result (summary document), and the pooled nonce is not a bare hash of the bytes: no token
    of one kind passes for another."""
    release = _release()
    nonce = pooled_nonce(release)
    assert nonce != failure_nonce(release)
    assert nonce != result_nonce(json.loads(release), sha256_digest(release))
    assert nonce != hashlib.sha256(release).hexdigest()
    assert failure_nonce(release) != result_nonce(json.loads(release), sha256_digest(release))


def _summary(**changes: Any) -> ResultSummary:
    values: dict[str, Any] = {"run_id": "run-1", "benchmark_id": "7",
                              "metrics_version": "wdbc/1", "aggregates": {"n_cases": 50}}
    return ResultSummary.model_validate({**values, **changes})


def test_summary_carries_the_commitment_published_or_withheld() -> None:
    """The commitment is a member of the canonical summary (so the result nonce covers it),
    beside aggregates or beside a withheld note; absent when None, as summaries read before."""
    published = _summary(pool_statistics=_commitment(1))
    data = published.to_bytes()
    assert json.loads(data)["pool_statistics"] == _commitment(1)
    assert ResultSummary.from_bytes(data) == published
    withheld = _summary(aggregates={}, pool_statistics=_commitment(1),
                        withheld=WithheldSummary(rule="cases", n_cases=3, minimum=5))
    assert ResultSummary.from_bytes(withheld.to_bytes()) == withheld
    assert "pool_statistics" not in json.loads(_summary().to_bytes())
    sealed = sha256_digest(b"sealed")
    assert (result_nonce(json.loads(data), sealed)
            != result_nonce(json.loads(_summary(pool_statistics=_commitment(2)).to_bytes()),
                            sealed))


def test_withheld_summary_with_aggregates_still_refused() -> None:
    for commitment in (None, _commitment(1)):
        held = _summary(pool_statistics=commitment,
                        withheld=WithheldSummary(rule="cases", n_cases=3, minimum=5))
        with pytest.raises(ResultFormatError, match="a withheld summary carries no aggregates"):
            held.to_bytes()


def test_summary_refuses_a_malformed_commitment() -> None:
    with pytest.raises(ValidationError):
        _summary(pool_statistics="sha256:" + "Z" * 64)
