"""Sites seal (issue 27): every run also writes ``pool.sealed`` beside its result, the site's
exact per-case results (failures included) encrypted under a key derived from the dataset's
DEK, and puts the document's commitment (and nothing else of it) in the public summary, withheld
or not, where the result token binds it. Run in-process against local buckets and in-memory KMS
stand-ins (the fixtures of this folder); the dataset DEK is unwrapped here as the aggregator
would, from ``dek.wrapped`` with the hospital's key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sealbench.benchmarks import pooling
from sealbench.benchmarks.brats import CaseFailure, InferenceError
from sealbench.client.runs.result_open import (
    ResultVerificationError,
    download_result,
    open_result,
)
from sealbench.contract.errors import EnclaveError
from sealbench.contract.pool import POOL_STATISTICS_OBJECT
from sealbench.contract.result import (
    FAILURE_OBJECT,
    SEALED_OBJECT,
    SUMMARY_OBJECT,
    TOKEN_OBJECT,
    FailureRecord,
    ResultSummary,
)
from sealbench.crypto.attestation import result_nonce
from sealbench.crypto.digest import parse_digest, sha256_digest
from sealbench.crypto.envelope import DataKey, WrappedKey, asset_aad, unwrap_key
from sealbench.crypto.errors import IntegrityError
from sealbench.crypto.pool_statistics import decrypt_statistics
from sealbench.enclave import publish as publish_module
from sealbench.enclave.publish import StatisticsUnsealable
from sealbench.platforms import LocalBlobStore

from .conftest import DATA_KEY


def _dataset_dek(world: Any) -> DataKey:
    """The dataset's DEK as any workload the hospital's key admits unwraps it."""
    wrapped = WrappedKey.from_bytes((world.data_bucket.root / "dek.wrapped").read_bytes())
    aad = asset_aad("dataset", world.spec.dataset.asset_id, parse_digest(world.spec.data_digest))
    return unwrap_key(world.access.wrappers[DATA_KEY], wrapped, aad)


def _opened(world: Any, results: Path | None = None) -> Any:
    store = LocalBlobStore(results or world.results())
    return open_result(download_result(store, ""), world.recipient)


def _statistics(world: Any, commitment: str, results: Path | None = None) -> bytes:
    blob = ((results or world.results()) / POOL_STATISTICS_OBJECT).read_bytes()
    return decrypt_statistics(_dataset_dek(world), world.spec.run_id, commitment, blob)


class _FailOnSecondCase:
    def __init__(self, benchmark: Any, model: bytes) -> None:
        self._inner = benchmark.load_model(model)
        self._calls = 0

    def predict(self, case: Any) -> Any:
        self._calls += 1
        if self._calls == 2:
            raise InferenceError("inference failed")
        return self._inner.predict(case)


def test_pool_sealed_opens_with_the_dataset_dek_to_the_committed_statistics(world: Any) -> None:
    """Three cases (a withheld summary: small sites are who pooling serves): the summary still
    carries the commitment, and pool.sealed decrypts with the dataset DEK to a document the
    plug-in's pooling accepts under that commitment, holding exactly the per-case results the
    hospital opens, failed case included."""
    world.run(make_runner=_FailOnSecondCase)
    result = _opened(world)
    assert result.summary.withheld is not None and result.summary.aggregates == {}
    commitment = result.summary.pool_statistics
    assert commitment is not None
    document = _statistics(world, commitment)
    assert pooling.commitment_of(document) == commitment
    statistics = pooling.open_statistics(result.benchmark, document, commitment,
                                         run_id=world.spec.run_id)
    assert statistics.run_id == world.spec.run_id
    assert statistics.pin == result.benchmark.ref
    assert statistics.results == result.cases
    assert sum(isinstance(c, CaseFailure) for c in statistics.results) == 1
    assert len(bytes.fromhex(statistics.salt)) == pooling.SALT_BYTES


def test_published_summary_carries_the_commitment_and_nothing_else_of_it(
    tmp_path: Path, world_factory: Any, prepared_factory: Any
) -> None:
    prepared = prepared_factory(tmp_path / "p", (1, 2, 3, 4, 5))
    world = world_factory(tmp_path / "w", prepared=prepared)
    world.run()
    result = _opened(world)
    assert result.summary.withheld is None and result.summary.aggregates
    commitment = result.summary.pool_statistics
    assert commitment is not None
    document = _statistics(world, commitment)
    statistics = pooling.open_statistics(result.benchmark, document, commitment,
                                         run_id=world.spec.run_id)
    assert statistics.results == result.cases
    # the public objects hold none of the document: no case id, no salt
    summary = (world.results() / SUMMARY_OBJECT).read_bytes()
    assert set(json.loads(summary)) >= {"pool_statistics"}
    for case in result.cases:
        assert case.case_id.encode() not in summary
    assert statistics.salt.encode() not in summary
    # and pool.sealed is ciphertext: neither the document nor a case id in the clear
    blob = (world.results() / POOL_STATISTICS_OBJECT).read_bytes()
    assert statistics.salt.encode() not in blob
    assert all(case.case_id.encode() not in blob for case in result.cases)


def test_the_result_token_binds_the_commitment(world: Any) -> None:
    """The token's nonce is result_nonce of the exact summary, commitment included: a summary
    whose commitment is changed no longer matches it, and the owner's verification refuses it."""
    world.run()
    result = _opened(world)
    summary = json.loads((world.results() / SUMMARY_OBJECT).read_bytes())
    sealed = sha256_digest((world.results() / SEALED_OBJECT).read_bytes())
    assert result_nonce(summary, sealed) in result.claims.eat_nonce
    other = "sha256:" + "0" * 64
    assert summary["pool_statistics"] != other
    changed = {**summary, "pool_statistics": other}
    assert result_nonce(changed, sealed) not in result.claims.eat_nonce
    dropped = {k: v for k, v in summary.items() if k != "pool_statistics"}
    assert result_nonce(dropped, sealed) not in result.claims.eat_nonce
    (world.results() / SUMMARY_OBJECT).write_bytes(
        ResultSummary.model_validate(changed).to_bytes())
    with pytest.raises(ResultVerificationError, match="nonce does not bind this summary"):
        _opened(world)


def test_pool_sealed_is_bound_to_its_run_and_commitment(world: Any) -> None:
    """Another run's statistics (a second run of the same dataset and model) do not open under
    the first run's id or commitment: a stale or moved object is refused."""
    world.run()
    second = world.results("results-2")
    world.run(world.with_spec(run_id="run-2", result_uri=f"file://{second}"))
    one = _opened(world).summary.pool_statistics
    two = _opened(world, second).summary.pool_statistics
    assert one is not None and two is not None and one != two
    moved = (second / POOL_STATISTICS_OBJECT).read_bytes()
    with pytest.raises(IntegrityError):
        decrypt_statistics(_dataset_dek(world), "run-1", one, moved)
    with pytest.raises(IntegrityError):
        decrypt_statistics(_dataset_dek(world), "run-1", two, moved)
    assert pooling.commitment_of(
        decrypt_statistics(_dataset_dek(world), "run-2", two, moved)) == two


def test_another_key_does_not_open_pool_sealed(world: Any) -> None:
    world.run()
    commitment = _opened(world).summary.pool_statistics
    assert commitment is not None
    blob = (world.results() / POOL_STATISTICS_OBJECT).read_bytes()
    with pytest.raises(IntegrityError):
        decrypt_statistics(DataKey.generate(), world.spec.run_id, commitment, blob)


def test_upload_order_puts_pool_sealed_before_summary_and_token(
    world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[str] = []
    put = LocalBlobStore.put_bytes

    def recording(self: LocalBlobStore, name: str, data: bytes) -> None:
        written.append(name.rsplit("/", 1)[-1])
        put(self, name, data)

    monkeypatch.setattr(LocalBlobStore, "put_bytes", recording)
    world.run()
    tail = [n for n in written if n in {SEALED_OBJECT, POOL_STATISTICS_OBJECT, SUMMARY_OBJECT,
                                        TOKEN_OBJECT}]
    assert tail == [SEALED_OBJECT, POOL_STATISTICS_OBJECT, SUMMARY_OBJECT, TOKEN_OBJECT]


def test_results_that_do_not_fit_the_document_fail_the_run_naming_no_value(
    world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plug-in whose results the statistics document cannot hold (here: its serialiser
    raising with a case's value in the message) fails the run with an enclave error that names
    no value; nothing but the failure record is published."""
    secret = "case BraTS-GLI-00001-000 dice 0.8317"

    def refuse(*_args: object) -> tuple[bytes, str]:
        raise ValueError(secret)

    monkeypatch.setattr(publish_module, "seal_statistics", refuse)
    with pytest.raises(StatisticsUnsealable) as caught:
        world.run()
    assert isinstance(caught.value, EnclaveError) and caught.value.exit_code == 1
    assert secret not in str(caught.value) and "0.8317" not in str(caught.value)
    names = {p.name for p in world.results().iterdir()}
    assert not names & {SEALED_OBJECT, POOL_STATISTICS_OBJECT, SUMMARY_OBJECT, TOKEN_OBJECT}
    record = FailureRecord.from_bytes((world.results() / FAILURE_OBJECT).read_bytes())
    assert record.step == "seal the per-case results"
    assert "0.8317" not in record.reason and "BraTS-GLI" not in record.reason
