"""The enclave as a child process against the mock TEE, keys released by the production path:
the data owner opens the sealed result and finds exactly the plain evaluation of the same cases;
the result token verifies against the mock issuer; a debug image gets no key; tampering in the
bucket fails closed with no result uploaded."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from sealbench.benchmarks.brats import (
    BRATS_2023_GLI_METRICS,
    CaseResult,
    OnnxSegmenter,
    load_case_from_bytes,
    score_or_fail,
)
from sealbench.benchmarks.release import LocalExact
from sealbench.client.runs.launchers import EnclaveRunFailed
from sealbench.client.runs.result_open import download_result, open_result
from sealbench.contract.errors import AssetIntegrityError, KeyReleaseDenied
from sealbench.contract.result import (
    FAILURE_OBJECT,
    FAILURE_TOKEN_OBJECT,
    WRITE_CHECK_OBJECT,
    FailureRecord,
)
from sealbench.crypto.attestation import Jwks, unverified_payload
from sealbench.gcp.confidential_space import claims_from_payload

RESULT_OBJECTS = ["pool.sealed", "result.sealed", "result.token", "summary.json",
                  "write-check.json"]


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


def _check_matches_plain(world: Any, dataset: str, model: str) -> None:
    spec = world.spec(dataset, model)
    lines: list[str] = []
    result = world.launcher().launch(spec, on_output=lines.append, timeout=600)
    assert result.image_digest == world.image_digest
    assert any("step 7/7" in line for line in lines)
    assert world.result_objects(spec) == RESULT_OBJECTS
    opened = world.open_result(spec)
    ds = world.datasets[dataset]
    expected = plain_results(ds.prepared, world.models[model].weights, ds.contract)
    assert list(opened.cases) == expected
    exact = opened.benchmark.summarise(expected, LocalExact())
    if opened.summary.withheld is not None:  # under the small-cell minimum: nothing published
        assert opened.aggregates == exact  # the hospital's own exact figures, computed locally
    else:  # a release of exactly these cases: OpenDP noise on their sums
        released = opened.aggregates.release
        assert released.mechanism == "gaussian" and released.n_cases == exact.n_cases
        for noisy, truth in zip(released.columns, exact.release.columns, strict=True):
            assert noisy.key == truth.key and abs(noisy.sum - truth.sum) <= 6 * noisy.sd
    assert opened.per_case.image_digest == world.image_digest


def test_sealed_run_on_mock_tee_matches_plain_evaluation(enclave_world: Any) -> None:
    _check_matches_plain(enclave_world, "small", "tiny")


def test_reference_model_run_on_mock_tee_matches_plain_evaluation(enclave_world: Any) -> None:
    from sealbench.benchmarks.brats.definition import load_definition, load_model_bytes

    weights = load_model_bytes(load_definition().reference_model)
    enclave_world.seal_model("reference", weights)
    enclave_world.authorize(
        [("small", "tiny"), ("few", "tiny"), ("many", "tiny"), ("small", "reference")]
    )
    _check_matches_plain(enclave_world, "small", "reference")


def test_result_token_verifies_against_the_mock_issuer(enclave_world: Any) -> None:
    spec = enclave_world.spec("small", "tiny")
    enclave_world.launcher().launch(spec, timeout=600)
    objects = download_result(
        enclave_world.owner_store(enclave_world.hospital), f"results/{spec.run_id}/"
    )
    opened = open_result(
        objects,
        enclave_world.recipient,
        jwks=Jwks.from_json(enclave_world.cloud.verifier.jwks()),
        issuer=enclave_world.cloud.endpoints.issuer,
        now=time.time(),
    )
    env = opened.claims.env_override
    assert env["SEALBENCH_DATA_DIGEST"] == spec.data_digest
    assert opened.claims.image_digest == enclave_world.image_digest
    # The neutral view is the platform's reading of the very token that was verified.
    claims = claims_from_payload(unverified_payload(opened.token))
    assert claims.submods.container.image_digest == enclave_world.image_digest
    assert (claims.submods.container.env_override or {}) == dict(env)


def test_debug_image_denied_its_keys(enclave_world: Any) -> None:
    spec = enclave_world.spec("small", "tiny")
    with pytest.raises(EnclaveRunFailed) as info:
        enclave_world.launcher(debug=True).launch(spec, timeout=600)
    assert info.value.exit_code == 13 and info.value.error_class is KeyReleaseDenied
    assert "dbgstat" in info.value.reason
    assert "result.token" not in enclave_world.result_objects(spec)


def test_swapped_case_objects_in_the_bucket_fail_closed(enclave_world: Any) -> None:
    world = enclave_world
    store = world.owner_store(world.hospital)
    source = world.datasets["small"].prefix
    copy = "datasets/small-tampered/"
    names = [n.removeprefix(source) for n in store.list(source)]
    for name in names:
        store.put_bytes(copy + name, store.get_bytes(source + name, 1 << 30))
    cases = sorted(n for n in names if n.startswith("cases/"))
    store.put_bytes(copy + cases[0], store.get_bytes(source + cases[1], 1 << 30))
    store.put_bytes(copy + cases[1], store.get_bytes(source + cases[0], 1 << 30))
    spec = world.spec("small", "tiny")
    spec = spec.model_copy(
        update={
            "dataset": spec.dataset.model_copy(
                update={"uri": f"gs://{world.hospital.bucket}/{copy}"}
            )
        }
    )
    with pytest.raises(EnclaveRunFailed) as info:
        world.launcher().launch(spec, timeout=600)
    assert info.value.error_class is AssetIntegrityError
    assert world.result_objects(spec) == [FAILURE_OBJECT, FAILURE_TOKEN_OBJECT, WRITE_CHECK_OBJECT]
    record = FailureRecord.from_bytes(
        store.get_bytes(f"results/{spec.run_id}/{FAILURE_OBJECT}", 1 << 20)
    )
    assert record.exit_code == 14 and "case object" in record.reason


def test_registry_accepts_the_uploaded_result_and_refuses_an_altered_summary(
    enclave_world: Any,
) -> None:
    from sealbench.server.errors import ResultRejectedError
    from sealbench.server.jwks import JwksCache, UrllibJwksFetcher
    from sealbench.server.schemas.results import ResultCreate
    from sealbench.server.settings import TrustedIssuer
    from sealbench.server.verification import ResultVerifier

    world = enclave_world
    spec = world.spec("small", "tiny")
    world.launcher().launch(spec, timeout=600)
    opened = world.open_result(spec)
    body = ResultCreate(
        benchmark_id=1,
        dataset_id=1,
        model_id=1,
        summary=opened.summary_json,
        sealed_result_digest=opened.sealed_result_sha256,
        attestation_token=opened.token,
    )
    ep = world.cloud.endpoints
    verifier = ResultVerifier(
        (TrustedIssuer.model_validate(ep.trusted_issuer()),),
        JwksCache(UrllibJwksFetcher(), ttl=60, clock=time.time),
        time.time,
    )
    facts = {
        "image_digest": world.image_digest,
        "benchmark_id": spec.benchmark_id,
        "metrics_version": spec.metrics_version,
        "dataset_digest": spec.data_digest,
        "model_digest": spec.model_digest,
        "sealed_result_digest": body.sealed_result_digest,
    }
    verified = verifier.verify(body.attestation_token, summary=body.summary, **facts)
    assert verified.image_digest == world.image_digest
    altered = {**body.summary, "run_id": "another-run"}
    with pytest.raises(ResultRejectedError, match="eat_nonce"):
        verifier.verify(body.attestation_token, summary=altered, **facts)


def test_run_past_its_timeout_is_killed_and_reported(enclave_world: Any) -> None:
    from sealbench.client.runs.launchers import LaunchError

    spec = enclave_world.spec("small", "tiny")
    with enclave_world.launcher().start(spec) as workload:
        with pytest.raises(LaunchError, match="did not finish"):
            workload.wait(timeout=0.01)
        with pytest.raises(LaunchError, match="did not finish"):  # reaped once, reported again
            workload.wait()
    assert "result.token" not in enclave_world.result_objects(spec)


def test_small_dataset_run_under_the_full_size_pin_is_refused(enclave_world: Any) -> None:
    """The owners approve the full-size pin too, so the keys are released; the enclave, bound
    to brats-2023-gli/1 by the attested run spec, refuses the 32x32x24 dataset before any
    case, uploads no result, and the failure record says why."""
    from sealbench.contract.errors import AssetRejected

    world = enclave_world
    spec = world.spec("small", "tiny", pin="brats-2023-gli/1")
    with pytest.raises(EnclaveRunFailed) as info:
        world.launcher().launch(spec, timeout=600)
    assert info.value.exit_code == 15 and info.value.error_class is AssetRejected
    assert world.result_objects(spec) == [FAILURE_OBJECT, FAILURE_TOKEN_OBJECT, WRITE_CHECK_OBJECT]
    store = world.owner_store(world.hospital)
    record = FailureRecord.from_bytes(
        store.get_bytes(f"results/{spec.run_id}/{FAILURE_OBJECT}", 1 << 20)
    )
    assert "grid 32x32x24" in record.reason and "brats-2023-gli/1-32x32x24" in record.reason
