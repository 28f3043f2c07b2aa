"""The enclave's steps end to end in-process (local buckets, in-memory KMS stand-ins): the owner
opens what the enclave sealed and finds exactly the plain evaluation; re-runs are bit-identical;
failing cases are recorded, never skipped; logs reveal nothing about cases."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sealbench.benchmarks.brats import (
    BRATS_2023_GLI_METRICS,
    CaseFailure,
    CaseResult,
    InferenceError,
    OnnxSegmenter,
    load_case_from_bytes,
    score_or_fail,
)
from sealbench.benchmarks.release import LocalExact
from sealbench.client.runs.result_open import download_result, open_result
from sealbench.contract.pool import POOL_STATISTICS_OBJECT
from sealbench.contract.result import (
    FAILURE_OBJECT,
    FAILURE_TOKEN_OBJECT,
    SEALED_OBJECT,
    SUMMARY_OBJECT,
    TOKEN_OBJECT,
    WRITE_CHECK_OBJECT,
    FailureRecord,
)
from sealbench.platforms import LocalBlobStore


def plain_results(prepared: Path, model: bytes, contract: Any) -> list[CaseResult]:
    """The same evaluation with no encryption, no storage and no TEE."""
    segmenter = OnnxSegmenter(model, contract)
    results: list[CaseResult] = []
    for folder in sorted((prepared / "data" / "cases").iterdir()):
        files = {f"cases/{folder.name}/{p.name}": p.read_bytes() for p in folder.iterdir()}
        case = load_case_from_bytes(files, contract)
        assert case.seg is not None
        prediction = segmenter.segment(case)
        results.append(
            score_or_fail(
                case.case_id, prediction, case.seg, BRATS_2023_GLI_METRICS, contract.spacing_mm
            )
        )
    return results


def opened(world: Any, results_dir: Path | None = None) -> Any:
    store = LocalBlobStore(results_dir or world.results())
    return open_result(download_result(store, ""), world.recipient)


@pytest.fixture
def five_prepared(tmp_path: Path, prepared_factory: Any) -> Path:
    """Five cases: the BraTS plug-in's small-cell minimum, so the summary is published."""
    return prepared_factory(tmp_path / "prep5", (1, 2, 3, 4, 5))


def test_owner_opens_result_equal_to_plain_evaluation(
    tmp_path: Path, five_prepared: Path, world_factory: Any, small_contract: Any
) -> None:
    world = world_factory(tmp_path / "w", prepared=five_prepared)
    report = world.run()
    result = opened(world)
    expected = plain_results(world.prepared, world.model_bytes, small_contract)
    assert list(result.cases) == expected
    # the published summary is a release of these cases: OpenDP noise on the exact sums
    release = result.aggregates.release
    assert release.mechanism == "gaussian" and release.library.startswith("opendp ")
    assert result.aggregates.n_cases == 5 and release.epsilon == 1.0
    for region in ("WT", "TC", "ET"):
        exact = sum(c.regions[region].dice for c in expected)
        assert release.column(f"dice:{region}").sum != exact  # noise was drawn
    assert not result.withheld and result.summary.withheld is None
    assert result.summary.aggregates == result.aggregates.to_json()
    assert result.per_case.cases == tuple(c.to_json() for c in expected)
    assert result.sealed_result_sha256 == report.published.sealed_digest
    assert result.claims.aud == "sealbench-result"
    names = set(LocalBlobStore(world.results()).list())
    assert names == {WRITE_CHECK_OBJECT, SEALED_OBJECT, POOL_STATISTICS_OBJECT, SUMMARY_OBJECT,
                     TOKEN_OBJECT}
    summary = (world.results() / SUMMARY_OBJECT).read_text()
    for folder in (world.prepared / "data" / "cases").iterdir():
        assert folder.name not in summary
    doc = json.loads(summary)
    assert set(doc) == {
        "aggregates",
        "benchmark_id",
        "format",
        "metrics_version",
        "pool_statistics",
        "run_id",
        "version",
    }
    assert "cases" not in doc["aggregates"] and doc["aggregates"]["n_cases"] == 5


def test_too_few_cases_give_a_withheld_summary_and_the_owner_still_opens_every_case(
    world: Any, small_contract: Any
) -> None:
    """Three cases, under BraTS's small-cell minimum of 5: the public summary says so in counts
    only; the per-case results are sealed to the hospital as always and open."""
    world.run()
    doc = json.loads((world.results() / SUMMARY_OBJECT).read_text())
    assert doc["aggregates"] == {}
    assert doc["withheld"] == {"rule": "cases", "n_cases": 3, "minimum": 5}
    result = opened(world)
    expected = plain_results(world.prepared, world.model_bytes, small_contract)
    assert result.withheld and list(result.cases) == expected
    # the hospital's own exact figures, computed locally (never published)
    assert result.aggregates == result.benchmark.summarise(expected, LocalExact())
    assert result.aggregates.release.exact


def test_owner_refuses_a_withheld_summary_the_rule_does_not_give(
    tmp_path: Path, five_prepared: Path, world_factory: Any
) -> None:
    """A withheld summary must be exactly what the small-cell rule withholds: five cases
    published cannot be passed off as withheld (nor three withheld as published)."""
    from sealbench.client.runs.result_open import ResultVerificationError, _check_consistent
    from sealbench.contract.result import PerCaseResults, ResultSummary, WithheldSummary

    world = world_factory(tmp_path / "w", prepared=five_prepared)
    world.run()
    result = opened(world)
    forged = ResultSummary(
        run_id=result.summary.run_id, benchmark_id=result.summary.benchmark_id,
        metrics_version=result.summary.metrics_version, aggregates={},
        withheld=WithheldSummary(rule="cases", n_cases=5, minimum=5))
    per_case = PerCaseResults.from_bytes(result.per_case.to_bytes())
    with pytest.raises(ResultVerificationError, match="not as the small-cell rule withholds"):
        _check_consistent(forged, per_case)
    few = per_case.model_copy(update={"cases": per_case.cases[:3]})
    with pytest.raises(ResultVerificationError, match="not a release of the sealed results"):
        _check_consistent(result.summary, few)


def test_each_run_draws_fresh_noise(tmp_path: Path, five_prepared: Path,
                                    world_factory: Any) -> None:
    """The same cases and model twice: identical per-case results, but two different releases
    (noise from the OS's randomness, drawn anew; no party can replay a draw)."""
    world = world_factory(tmp_path / "w", prepared=five_prepared)
    world.run()
    first = opened(world)
    world.run(world.with_spec(result_uri=f"file://{world.results('results-2')}"))
    second = opened(world, world.results("results-2"))
    assert first.per_case.to_bytes() == second.per_case.to_bytes()
    one, two = first.aggregates.release, second.aggregates.release
    assert [c.sum for c in one.columns] != [c.sum for c in two.columns]
    assert [c.sd for c in one.columns] == [c.sd for c in two.columns]


def test_rerun_gives_bit_identical_metrics_and_summary(world: Any) -> None:
    world.run()
    first = opened(world)
    second_spec = world.with_spec(result_uri=f"file://{world.results('results-2')}")
    world.run(second_spec)
    second = opened(world, world.results("results-2"))
    assert first.per_case.to_bytes() == second.per_case.to_bytes()
    one, two = (json.loads((world.results(name) / SUMMARY_OBJECT).read_bytes())
                for name in ("results", "results-2"))
    # the statistics' commitment is salted afresh per run: the same results do not repeat it
    assert one.pop("pool_statistics") != two.pop("pool_statistics")
    assert one == two


class _FailOnSecondCase:
    def __init__(self, benchmark: Any, model: bytes) -> None:
        self._inner = benchmark.load_model(model)
        self._calls = 0

    def predict(self, case: Any) -> Any:
        self._calls += 1
        if self._calls == 2:
            raise InferenceError("inference failed on an input of shape (4, 32, 32, 24)")
        return self._inner.predict(case)


def test_inference_failure_recorded_as_flagged_case_not_skipped(world: Any) -> None:
    world.run(make_runner=_FailOnSecondCase)
    result = opened(world)
    failures = [c for c in result.cases if isinstance(c, CaseFailure)]
    assert len(result.cases) == 3 and len(failures) == 1
    assert failures[0].flagged and "inference failed" in failures[0].reason
    assert sum(c.failed for c in result.cases) == 1  # the release enters it as Dice 0


def test_undecodable_case_recorded_as_failed_case(
    tmp_path: Path, prepared_factory: Any, world_factory: Any
) -> None:
    prepared = prepared_factory(tmp_path / "p", (4, 5))
    victim = sorted((prepared / "data" / "cases").iterdir())[0]
    broken = next(victim.glob("*-t1c.nii.gz"))
    broken.write_bytes(b"\x1f\x8b not really gzip")  # authentic (sealed as is) but unreadable
    world = world_factory(tmp_path / "w", prepared=prepared)
    world.run()
    result = opened(world)
    failures = [c for c in result.cases if isinstance(c, CaseFailure)]
    assert [f.case_id for f in failures] == [victim.name]
    assert "could not be loaded" in failures[0].reason


def test_prediction_with_wrong_labels_is_flagged_failure(world: Any) -> None:
    class BadLabels:
        def __init__(self, benchmark: Any, model: bytes) -> None:
            pass

        def predict(self, case: Any) -> Any:
            return np.full(case.shape, 7, dtype=np.uint8)

    world.run(make_runner=BadLabels)
    cases = opened(world).cases
    assert all(isinstance(c, CaseFailure) for c in cases) and len(cases) == 3


def test_logs_name_steps_and_counts_but_no_case_ids_metrics_or_secrets(
    world: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Scope the level to our logger: a CLI run earlier in the same process may have set it.
    with caplog.at_level(logging.DEBUG, logger="sealbench"):
        report = world.run()
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "case 2/3" in text and "step 7/7" in text
    for folder in (world.prepared / "data" / "cases").iterdir():
        assert folder.name not in text
    result = opened(world)
    for case in result.cases:
        assert not isinstance(case, CaseFailure)
        for scores in case.regions.values():
            for value in (scores.dice, scores.hd95, scores.lesion_dice):
                if value not in (0.0, 1.0):
                    assert repr(value) not in text and f"{value:.4f}" not in text
    assert report.published.token not in text
    assert report.published.token.split(".")[1] not in text


def test_failure_record_written_and_no_result_uploaded(world: Any) -> None:
    (world.model_bucket.root / "weights.sealed").write_bytes(b"not the sealed weights")
    with pytest.raises(Exception) as info:
        world.run()
    assert type(info.value).__name__ == "AssetIntegrityError"
    names = set(LocalBlobStore(world.results()).list())
    assert names == {WRITE_CHECK_OBJECT, FAILURE_OBJECT, FAILURE_TOKEN_OBJECT}
    raw = (world.results() / FAILURE_OBJECT).read_bytes()
    record = FailureRecord.from_bytes(raw)
    assert record.exit_code == 14 and record.run_id == "run-1"
    assert record.step == "download, verify and load the model"
    # the enclave attested its own record: audience sealbench-failure, nonce over its bytes
    from sealbench.crypto.attestation import FAILURE_AUDIENCE, failure_nonce, unverified_payload

    claims = unverified_payload((world.results() / FAILURE_TOKEN_OBJECT).read_text())
    assert claims["aud"] == FAILURE_AUDIENCE
    nonces = claims["eat_nonce"]
    assert failure_nonce(raw) in (nonces if isinstance(nonces, list) else [nonces])


def test_failure_before_attestation_is_not_signed(world: Any) -> None:
    from sealbench.contract.errors import SpecError

    spec = world.with_spec(metrics_version="no-such-plugin/1")
    with pytest.raises(SpecError):
        world.run(spec)
    assert not (world.results() / FAILURE_TOKEN_OBJECT).exists()
    assert not (world.results() / FAILURE_OBJECT).exists()  # no destination yet: nothing


def test_model_outside_the_benchmark_contract_rejected_before_any_case(world: Any) -> None:
    from sealbench.client.assets.store import seal_model
    from sealbench.contract.errors import AssetRejected

    bucket = LocalBlobStore(world.root / "other-model-bucket")
    (world.root / "not-onnx.onnx").write_bytes(b"these bytes are not an ONNX model")
    sealed = seal_model(
        world.root / "not-onnx.onnx",
        asset_id="model-1",
        key_wrapper=world.access.wrappers[world.spec.model.kms_key],
        store=bucket,
        prefix="",
    )
    spec = world.with_spec(
        model=world.spec.model.model_copy(update={"uri": f"file://{bucket.root}"}),
        model_digest=sealed.digest,
    )
    with pytest.raises(AssetRejected, match="contract"):
        world.run(spec)
    record = FailureRecord.from_bytes((world.results() / FAILURE_OBJECT).read_bytes())
    assert record.exit_code == 15


def test_failure_record_goes_unsigned_when_the_attester_gives_no_failure_token(
    world: Any,
) -> None:
    """An attester that refuses the failure token does not stop the record: it is written
    unsigned (a claim, as before), and the run's own error is what the caller gets."""
    from sealbench.crypto.attestation import FAILURE_AUDIENCE
    from sealbench.enclave.run import run_enclave
    from sealbench.platforms.errors import AttesterError

    attester = world.attester()
    minted = attester.token

    def token(audience: str | None = None, nonces: Any = ()) -> str:
        if audience == FAILURE_AUDIENCE:
            raise AttesterError("the launcher refused the request")
        return minted(audience, nonces)

    attester.token = token
    (world.model_bucket.root / "weights.sealed").write_bytes(b"not the sealed weights")
    with pytest.raises(Exception) as info:
        run_enclave(world.spec.to_environ(), attester, access=lambda _run: world.access)
    assert type(info.value).__name__ == "AssetIntegrityError"
    assert set(LocalBlobStore(world.results()).list()) == {WRITE_CHECK_OBJECT, FAILURE_OBJECT}
