"""Result submission: the attestation token must bind the benchmark's image, the dataset and
model digests and the submitted summary + sealed-result digest; any alteration is refused with
a 4xx and nothing is stored. Readers: the dataset's owner and the benchmark's owner only."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sealbench.benchmarks.registry import load as load_benchmark
from sealbench.benchmarks.release import InsecureFixedNoise
from sealbench.contract.pin import BenchmarkPin
from sealbench.server.app import create_app
from sealbench.server.settings import ServerSettings, TrustedIssuer

API = "/api/v1"
#: A run's summary.json that the benchmark's plug-in (brats-2023-gli/1) validates.
_BRATS = load_benchmark(BenchmarkPin.parse("brats-2023-gli/1"))
SUMMARY: dict[str, Any] = {
    "format": "sealbench/result-summary", "version": 1, "run_id": "run-1", "benchmark_id": "1",
    "metrics_version": "brats-2023-gli/1",
    "aggregates": _BRATS.summarise([_BRATS.failure("BraTS-GLI-00001-000", "x")],
        InsecureFixedNoise()).to_json(),
}
SEALED = "sha256:" + "5" * 64


def _submission(world: Any, token: str, **override: Any) -> dict[str, Any]:
    body = {
        "benchmark_id": world.benchmark_id,
        "dataset_id": world.dataset_id,
        "model_id": world.model_id,
        "summary": SUMMARY,
        "sealed_result_digest": SEALED,
        "attestation_token": token,
    }
    body.update(override)
    return body


def _claims(world: Any, h: Any, **claims_override: Any) -> dict[str, Any]:
    claims: dict[str, Any] = h.result_claims(
        summary=SUMMARY,
        benchmark_id=world.benchmark_id,
        sealed_digest=SEALED,
        data_digest=world.dataset_digest,
        model_digest=world.model_digest,
    )
    claims.update(claims_override)
    return claims


def _token(world: Any, tokens: Any, h: Any, **claims_override: Any) -> str:
    return str(tokens.sign(_claims(world, h, **claims_override)))


def _stored(client: TestClient, world: Any) -> list[Any]:
    r = client.get(f"{API}/results", headers=world.bench_owner.headers)
    return list(r.json()["items"])


def _refused(client: TestClient, world: Any, body: dict[str, Any], *, needle: str) -> None:
    r = client.post(f"{API}/results", json=body, headers=world.data_owner.headers)
    assert r.status_code == 422, r.text
    assert r.json()["code"] == "result_rejected"
    assert needle in r.json()["message"]
    assert body["attestation_token"] not in r.text
    assert _stored(client, world) == []


def test_verified_result_stored_and_on_leaderboard(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    token = _token(world, tokens, h)
    row = h.ok(
        client.post(
            f"{API}/results", json=_submission(world, token), headers=world.data_owner.headers
        ),
        201,
    )
    assert row["summary"] == SUMMARY and row["token_issuer"] == h.TEST_ISSUER
    assert row["image_digest"] == h.IMAGE_DIGEST and len(row["nonce"]) == 64
    board = h.ok(
        client.get(
            f"{API}/benchmarks/{world.benchmark_id}/leaderboard", headers=world.bench_owner.headers
        )
    )
    assert [(e["model_id"], e["dataset_id"], e["summary"]) for e in board["entries"]] == [
        (world.model_id, world.dataset_id, SUMMARY)
    ]


def test_tampered_summary_rejected(client: TestClient, world: Any, tokens: Any, h: Any) -> None:
    aggregates = json.loads(json.dumps(SUMMARY["aggregates"]))
    aggregates["release"]["columns"][0]["sum"] += 0.99  # WT's Dice: still a valid release
    better = {**SUMMARY, "aggregates": aggregates}
    assert _BRATS.parse_summary(aggregates) != _BRATS.parse_summary(SUMMARY["aggregates"])
    _refused(
        client,
        world,
        _submission(world, _token(world, tokens, h), summary=better),
        needle="eat_nonce",
    )


def test_swapped_sealed_result_rejected(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    body = _submission(world, _token(world, tokens, h), sealed_result_digest="sha256:" + "6" * 64)
    _refused(client, world, body, needle="eat_nonce")


def test_altered_token_signature_rejected(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    token = _token(world, tokens, h)
    head, payload, sig = token.split(".")
    forged = f"{head}.{payload}.{sig[:-6]}{'AAAAAA' if sig[-6:] != 'AAAAAA' else 'BBBBBB'}"
    _refused(client, world, _submission(world, forged), needle="signature")


def test_altered_token_claims_rejected(client: TestClient, world: Any, tokens: Any, h: Any) -> None:
    honest = _token(world, tokens, h).split(".")
    other = _token(world, tokens, h, dbgstat="enabled").split(".")
    spliced = f"{honest[0]}.{other[1]}.{honest[2]}"
    _refused(client, world, _submission(world, spliced), needle="signature")


def test_token_from_other_image_rejected(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    claims = h.result_claims(
        summary=SUMMARY,
        benchmark_id=world.benchmark_id,
        sealed_digest=SEALED,
        data_digest=world.dataset_digest,
        model_digest=world.model_digest,
        image_digest="sha256:" + "2" * 64,
    )
    _refused(client, world, _submission(world, tokens.sign(claims)), needle="image_digest")


@pytest.mark.parametrize("which", ["data", "model"])
def test_token_for_other_asset_digest_rejected(
    client: TestClient, world: Any, tokens: Any, h: Any, which: str
) -> None:
    claims = h.result_claims(
        summary=SUMMARY,
        benchmark_id=world.benchmark_id,
        sealed_digest=SEALED,
        data_digest=h.digest_of("other data") if which == "data" else world.dataset_digest,
        model_digest=h.digest_of("other model") if which == "model" else world.model_digest,
    )
    name = "SEALBENCH_DATA_DIGEST" if which == "data" else "SEALBENCH_MODEL_DIGEST"
    _refused(client, world, _submission(world, tokens.sign(claims)), needle=name)


def test_result_computed_for_another_benchmark_rejected(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    # Same image, data and model, but the enclave was told it was scoring another benchmark.
    claims = h.result_claims(
        summary=SUMMARY,
        benchmark_id=world.benchmark_id + 1000,
        sealed_digest=SEALED,
        data_digest=world.dataset_digest,
        model_digest=world.model_digest,
    )
    token = tokens.sign(claims)
    _refused(client, world, _submission(world, token), needle="SEALBENCH_BENCHMARK_ID")


def test_result_computed_with_other_metrics_version_rejected(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    claims = h.result_claims(
        summary=SUMMARY,
        benchmark_id=world.benchmark_id,
        sealed_digest=SEALED,
        data_digest=world.dataset_digest,
        model_digest=world.model_digest,
        metrics_version="brats-2021/1",
    )
    _refused(
        client, world, _submission(world, tokens.sign(claims)), needle="SEALBENCH_METRICS_VERSION"
    )


def test_debug_image_token_rejected(client: TestClient, world: Any, tokens: Any, h: Any) -> None:
    token = _token(world, tokens, h, dbgstat="enabled")
    _refused(client, world, _submission(world, token), needle="dbgstat")


def test_expired_token_rejected(
    client: TestClient, world: Any, tokens: Any, h: Any, clock: Any
) -> None:
    token = _token(world, tokens, h)
    clock.advance(2 * 3600)
    _refused(client, world, _submission(world, token), needle="exp")


def test_wrong_audience_token_rejected(client: TestClient, world: Any, tokens: Any, h: Any) -> None:
    token = _token(world, tokens, h, aud="https://sts.googleapis.com")
    _refused(client, world, _submission(world, token), needle="aud")


def test_untrusted_issuer_rejected(client: TestClient, world: Any, h: Any) -> None:
    mock = h.TokenFactory(kid="mock-1")
    claims = h.result_claims(
        summary=SUMMARY,
        benchmark_id=world.benchmark_id,
        sealed_digest=SEALED,
        data_digest=world.dataset_digest,
        model_digest=world.model_digest,
        issuer="http://127.0.0.1:9999/mock-verifier",
    )
    _refused(client, world, _submission(world, mock.sign(claims)), needle="not trusted")


def test_token_signed_by_unknown_key_rejected(client: TestClient, world: Any, h: Any) -> None:
    impostor = h.TokenFactory()  # same kid, different key
    claims = h.result_claims(
        summary=SUMMARY,
        benchmark_id=world.benchmark_id,
        sealed_digest=SEALED,
        data_digest=world.dataset_digest,
        model_digest=world.model_digest,
    )
    _refused(client, world, _submission(world, impostor.sign(claims)), needle="signature")


def test_mock_issuer_trusted_only_when_configured(
    settings: ServerSettings, clock: Any, world: Any, h: Any
) -> None:
    mock = h.TokenFactory(kid="mock-1")
    mock_issuer, mock_jwks = "http://127.0.0.1:9999/mock-verifier", "http://127.0.0.1:9999/jwks"
    trusting = settings.model_copy(
        update={
            "trusted_issuers": (
                *settings.trusted_issuers,
                TrustedIssuer(issuer=mock_issuer, jwks_url=mock_jwks),
            )
        }
    )
    fetcher = h.FakeJwksFetcher({mock_jwks: mock.jwks})
    claims = h.result_claims(
        summary=SUMMARY,
        benchmark_id=world.benchmark_id,
        sealed_digest=SEALED,
        data_digest=world.dataset_digest,
        model_digest=world.model_digest,
        issuer=mock_issuer,
    )
    with TestClient(create_app(trusting, clock=clock, jwks_fetcher=fetcher)) as client:
        h.ok(
            client.post(
                f"{API}/results",
                json=_submission(world, mock.sign(claims)),
                headers=world.data_owner.headers,
            ),
            201,
        )
    assert (
        ServerSettings().trusted_issuers[0].issuer == "https://confidentialcomputing.googleapis.com"
    )
    assert len(ServerSettings().trusted_issuers) == 1


def test_replayed_result_refused(client: TestClient, world: Any, tokens: Any, h: Any) -> None:
    body = _submission(world, _token(world, tokens, h))
    h.ok(client.post(f"{API}/results", json=body, headers=world.data_owner.headers), 201)
    r = client.post(f"{API}/results", json=body, headers=world.data_owner.headers)
    assert r.status_code == 409
    assert len(_stored(client, world)) == 1


def test_only_dataset_owner_submits_result(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    body = _submission(world, _token(world, tokens, h))
    for actor in (world.bench_owner, world.model_owner, world.other, world.admin):
        r = client.post(f"{API}/results", json=body, headers=actor.headers)
        assert r.status_code == 403, actor.email
    assert _stored(client, world) == []


def test_result_requires_approved_dataset_and_model_associations(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    did = h.ok(
        client.post(
            f"{API}/datasets",
            json={"name": "pending-site", "digest": h.digest_of("p"), "case_count": 1},
            headers=world.data_owner.headers,
        ),
        201,
    )["id"]
    h.ok(
        client.post(
            f"{API}/benchmarks/{world.benchmark_id}/datasets",
            json={"asset_id": did},
            headers=world.data_owner.headers,
        ),
        201,
    )
    claims = h.result_claims(
        summary=SUMMARY,
        benchmark_id=world.benchmark_id,
        sealed_digest=SEALED,
        data_digest=h.digest_of("p"),
        model_digest=world.model_digest,
    )
    r = client.post(
        f"{API}/results",
        json=_submission(world, tokens.sign(claims), dataset_id=did),
        headers=world.data_owner.headers,
    )
    assert r.status_code == 409 and "not approved" in r.json()["message"]
    mid = h.ok(
        client.post(
            f"{API}/models",
            json={"name": "other", "version": "1", "digest": h.digest_of("o")},
            headers=world.model_owner.headers,
        ),
        201,
    )["id"]
    r = client.post(
        f"{API}/results",
        json=_submission(world, _token(world, tokens, h), model_id=mid),
        headers=world.data_owner.headers,
    )
    assert r.status_code == 409 and "model" in r.json()["message"]
    assert _stored(client, world) == []


def test_results_readable_by_dataset_owner_and_benchmark_owner_only(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    rid = h.ok(
        client.post(
            f"{API}/results",
            json=_submission(world, _token(world, tokens, h)),
            headers=world.data_owner.headers,
        ),
        201,
    )["id"]
    for actor in (world.data_owner, world.bench_owner):
        assert h.ok(client.get(f"{API}/results/{rid}", headers=actor.headers))["id"] == rid
        assert len(h.ok(client.get(f"{API}/results", headers=actor.headers))["items"]) == 1
    for actor in (world.model_owner, world.other, world.admin):
        assert client.get(f"{API}/results/{rid}", headers=actor.headers).status_code == 403
        assert h.ok(client.get(f"{API}/results", headers=actor.headers))["items"] == []
        board = h.ok(
            client.get(f"{API}/benchmarks/{world.benchmark_id}/leaderboard", headers=actor.headers)
        )
        assert board["entries"] == []


def test_result_for_retired_benchmark_refused(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    h.ok(
        client.post(
            f"{API}/benchmarks/{world.benchmark_id}/state",
            json={"state": "retired"},
            headers=world.bench_owner.headers,
        )
    )
    r = client.post(
        f"{API}/results",
        json=_submission(world, _token(world, tokens, h)),
        headers=world.data_owner.headers,
    )
    assert r.status_code == 409 and r.json()["code"] == "invalid_state"
    assert _stored(client, world) == []


# -- tokens of runs whose operator-controlled inputs were tampered (nothing is stored) ----------


def _with_env(world: Any, h: Any, **extra: str) -> dict[str, Any]:
    claims = _claims(world, h)
    claims["submods"]["container"]["env_override"].update(extra)
    return claims


@pytest.mark.parametrize(
    "name", ["SEALBENCH_STS_URL", "SEALBENCH_KMS_ENDPOINT", "SEALBENCH_STORAGE_ENDPOINT"]
)
def test_result_of_run_with_redirected_endpoint_rejected(
    client: TestClient, world: Any, tokens: Any, h: Any, name: str
) -> None:
    # The test issuer stands for Google's: a genuine run carries no endpoint override at all.
    claims = _with_env(world, h, **{name: "https://attacker.example/v1/token"})
    _refused(client, world, _submission(world, tokens.sign(claims)), needle=name)


def test_result_of_run_with_override_outside_allow_list_rejected(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    claims = _with_env(world, h, LD_PRELOAD="/tmp/steal.so")
    _refused(client, world, _submission(world, tokens.sign(claims)), needle="LD_PRELOAD")


def test_result_of_run_with_command_override_rejected(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    claims = _with_env(world, h)
    claims["submods"]["container"]["cmd_override"] = ["/bin/sh", "-c", "env"]
    _refused(client, world, _submission(world, tokens.sign(claims)), needle="cmd_override")


@pytest.mark.parametrize("hwmodel", ["GCP_SHIELDED_VM", "GCP_AMD_SEV_ES", "GCP_NEW_THING"])
def test_result_from_non_confidential_hardware_rejected(
    client: TestClient, world: Any, tokens: Any, h: Any, hwmodel: str
) -> None:
    token = _token(world, tokens, h, hwmodel=hwmodel)
    _refused(client, world, _submission(world, token), needle="hwmodel")


def test_result_without_secure_boot_rejected(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    token = _token(world, tokens, h, secboot=False)
    _refused(client, world, _submission(world, token), needle="secboot")


def _mock_issuer_app(settings: ServerSettings, h: Any) -> tuple[ServerSettings, Any, str]:
    mock = h.TokenFactory(kid="mock-2")
    issuer, jwks = "http://127.0.0.1:9998", "http://127.0.0.1:9998/jwks"
    entry = TrustedIssuer.model_validate(
        {"issuer": issuer, "jwks_url": jwks, "endpoints": dict(MOCK_ENDPOINTS)}
    )
    trusting = settings.model_copy(update={"trusted_issuers": (entry,)})
    return trusting, (mock, h.FakeJwksFetcher({jwks: mock.jwks})), issuer


MOCK_ENDPOINTS = {
    "sts_url": "http://127.0.0.1:9001/v1/token",
    "kms_endpoint": "http://127.0.0.1:9002",
    "storage_endpoint": "http://127.0.0.1:9003",
}
_MOCK_ENV = {
    "SEALBENCH_STS_URL": MOCK_ENDPOINTS["sts_url"],
    "SEALBENCH_KMS_ENDPOINT": MOCK_ENDPOINTS["kms_endpoint"],
    "SEALBENCH_STORAGE_ENDPOINT": MOCK_ENDPOINTS["storage_endpoint"],
}


@pytest.mark.parametrize("tampered", [None, *sorted(_MOCK_ENV)])
def test_mock_issuer_result_must_name_the_mocks_own_endpoints(
    settings: ServerSettings, clock: Any, world: Any, h: Any, tampered: str | None
) -> None:
    trusting, (mock, fetcher), issuer = _mock_issuer_app(settings, h)
    env = dict(_MOCK_ENV)
    if tampered is not None:
        env[tampered] = "http://127.0.0.1:6666/capture"
    claims = _with_env(world, h, **env)
    claims["iss"] = issuer
    body = _submission(world, mock.sign(claims))
    with TestClient(create_app(trusting, clock=clock, jwks_fetcher=fetcher)) as client:
        if tampered is None:
            h.ok(client.post(f"{API}/results", json=body, headers=world.data_owner.headers), 201)
        else:
            _refused(client, world, body, needle=tampered)
