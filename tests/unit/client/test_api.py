"""The typed registry client against the real app in-process, and its transport behaviour
(retries, timeouts, error translation) against httpx's MockTransport."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from fastapi.testclient import TestClient

from sealbench.client.errors import (
    AuthenticationFailed,
    ConflictError,
    InvalidRequestError,
    NotAllowedError,
    NotFoundError,
    RegistryError,
    ResultRejectedError,
    ServerUnavailableError,
)
from sealbench.client.registry.api import PAGE_SIZE, RegistryClient
from sealbench.crypto.digest import sha256_digest
from sealbench.server.schemas import (
    BenchmarkCreate,
    CoordinatesUpdate,
    DatasetCreate,
    ModelCreate,
    ResultCreate,
)

IMAGE = sha256_digest(b"evaluation image")
Body = Callable[..., BenchmarkCreate]


def _approved_benchmark(api: dict[str, RegistryClient], benchmark_body: Body) -> int:
    created = api["authority"].create_benchmark(benchmark_body())
    assert created.state == "pending"
    return api["admin"].approve_benchmark(created.id).id


def test_full_registry_flow_through_the_typed_client(
    api: dict[str, RegistryClient], benchmark_body: Body
) -> None:
    b = _approved_benchmark(api, benchmark_body)
    assert [x.id for x in api["hospital"].list_benchmarks("approved")] == [b]
    dataset = api["hospital"].register_dataset(
        DatasetCreate(name="h1", digest=sha256_digest(b"d"), case_count=3)
    )
    model = api["modelco"].register_model(
        ModelCreate(name="m1", version="1", digest=sha256_digest(b"m"))
    )
    assert api["hospital"].request_association("dataset", b, dataset.id).status == "pending"
    assert api["modelco"].request_association("model", b, model.id).status == "pending"
    api["authority"].decide_association("dataset", b, dataset.id, approve=True)
    api["authority"].decide_association("model", b, model.id, approve=True)
    assert {a.asset_id for a in api["hospital"].list_associations("dataset", b, "approved")} == {
        dataset.id
    }
    coords = CoordinatesUpdate(
        kms_key_name="projects/p/locations/global/keyRings/r/cryptoKeys/k",
        storage_uri="gs://bucket-a/datasets/1",
        wip_provider="projects/1/locations/global/workloadIdentityPools/pool/providers/prov",
    )
    api["hospital"].put_coordinates("dataset", dataset.id, coords)
    # the model owner is an approved party of the same benchmark, so it may read them
    assert api["modelco"].get_coordinates("dataset", dataset.id).storage_uri == coords.storage_uri
    assert len(api["authority"].association_history("dataset", b, dataset.id)) == 2
    assert api["authority"].leaderboard(b).entries == ()
    assert api["admin"].audit_verify().ok
    assert api["hospital"].me().email == "hospital@test.example"


def test_wrong_token_is_authentication_failed_with_login_hint(http: TestClient) -> None:
    client = RegistryClient(http, "sbt_not-a-real-token")
    with pytest.raises(AuthenticationFailed) as info:
        client.me()
    assert info.value.exit_code == 6
    assert "sealbench login" in info.value.hint
    assert "not-a-real-token" not in str(info.value)


def test_initiator_cannot_approve_own_association(
    api: dict[str, RegistryClient], benchmark_body: Body
) -> None:
    b = _approved_benchmark(api, benchmark_body)
    d = api["hospital"].register_dataset(
        DatasetCreate(name="h2", digest=sha256_digest(b"d2"), case_count=1)
    )
    api["hospital"].request_association("dataset", b, d.id)
    with pytest.raises(NotAllowedError) as info:
        api["hospital"].decide_association("dataset", b, d.id, approve=True)
    assert "initiator" in str(info.value)


def test_missing_benchmark_is_not_found(api: dict[str, RegistryClient]) -> None:
    with pytest.raises(NotFoundError):
        api["hospital"].get_benchmark(4242)


def test_duplicate_benchmark_is_conflict(
    api: dict[str, RegistryClient], benchmark_body: Body
) -> None:
    api["authority"].create_benchmark(benchmark_body("dup"))
    with pytest.raises(ConflictError):
        api["authority"].create_benchmark(benchmark_body("dup"))


def test_non_admin_cannot_approve_benchmark(
    api: dict[str, RegistryClient], benchmark_body: Body
) -> None:
    created = api["authority"].create_benchmark(benchmark_body("needs-admin"))
    with pytest.raises(NotAllowedError):
        api["authority"].approve_benchmark(created.id)


def test_forged_result_token_is_rejected(
    api: dict[str, RegistryClient], benchmark_body: Body
) -> None:
    b = _approved_benchmark(api, benchmark_body)
    d = api["hospital"].register_dataset(
        DatasetCreate(name="h3", digest=sha256_digest(b"d3"), case_count=1)
    )
    m = api["modelco"].register_model(
        ModelCreate(name="m3", version="1", digest=sha256_digest(b"m3"))
    )
    api["hospital"].request_association("dataset", b, d.id)
    api["modelco"].request_association("model", b, m.id)
    api["authority"].decide_association("dataset", b, d.id, approve=True)
    api["authority"].decide_association("model", b, m.id, approve=True)
    forged = ResultCreate(
        benchmark_id=b,
        dataset_id=d.id,
        model_id=m.id,
        summary={"n_cases": 1},
        sealed_result_digest=IMAGE,
        attestation_token="eyJhbGciOiJub25lIn0.e30.",
    )
    with pytest.raises(ResultRejectedError) as info:
        api["hospital"].submit_result(forged)
    assert info.value.status == 422
    assert "rerun" in info.value.hint


def test_schema_violation_is_invalid_request_with_field(api: dict[str, RegistryClient]) -> None:
    body = DatasetCreate.model_construct(
        name="h4", digest="sha256:zz", case_count=1, statistics={}, prepared_for_id=None
    )
    with pytest.raises(InvalidRequestError) as info:
        api["hospital"].register_dataset(body)
    assert "digest" in str(info.value)


# -- transport behaviour -------------------------------------------------------------------------


def _counting(handler_status: int, body: bytes = b"") -> tuple[httpx.MockTransport, list[str]]:
    calls: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        return httpx.Response(handler_status, content=body)

    return httpx.MockTransport(handle), calls


def _client(transport: httpx.BaseTransport, sleeps: list[float]) -> RegistryClient:
    http = httpx.Client(base_url="http://registry.test", transport=transport)
    return RegistryClient(http, "tok", sleep=sleeps.append)


def test_idempotent_get_is_retried_with_backoff_then_fails() -> None:
    transport, calls = _counting(503)
    sleeps: list[float] = []
    with pytest.raises(ServerUnavailableError):
        _client(transport, sleeps).list_benchmarks()
    assert calls == ["GET", "GET", "GET"]
    assert sleeps == [0.25, 0.5]


def test_post_is_never_retried() -> None:
    transport, calls = _counting(503)
    sleeps: list[float] = []
    with pytest.raises(ServerUnavailableError):
        _client(transport, sleeps).approve_benchmark(1)
    assert calls == ["POST"]
    assert sleeps == []


def test_connection_refused_names_the_server_and_what_to_do() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    sleeps: list[float] = []
    with pytest.raises(ServerUnavailableError) as info:
        _client(httpx.MockTransport(refuse), sleeps).me()
    assert "http://registry.test" in str(info.value)
    assert "profile ls" in info.value.hint
    assert info.value.exit_code == 5
    assert len(sleeps) == 2


def test_wrong_server_without_error_body_says_check_url() -> None:
    transport, _ = _counting(404, b"<html>nginx</html>")
    with pytest.raises(RegistryError) as info:
        _client(transport, []).me()
    assert "server URL" in info.value.hint


def test_listing_follows_pages() -> None:
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        offset = int(request.url.params["offset"])
        seen.append(request.url.params["limit"])
        items = (
            []
            if offset
            else [
                {
                    "id": 1,
                    "owner_id": 1,
                    "name": "a",
                    "version": "1",
                    "digest": IMAGE,
                    "format": "onnx",
                    "io_contract": {},
                    "state": "registered",
                    "created_at": "2026-01-01T00:00:00Z",
                }
            ]
        )
        return httpx.Response(
            200,
            json={
                "items": items,
                "limit": PAGE_SIZE,
                "offset": offset,
                "next_offset": None if offset else 1,
            },
        )

    models = _client(httpx.MockTransport(handle), []).list_models()
    assert [m.name for m in models] == ["a"]
    assert seen == [str(PAGE_SIZE), str(PAGE_SIZE)]


def test_unexpected_response_shape_is_a_registry_error() -> None:
    transport, _ = _counting(200, b'{"unexpected": true}')
    with pytest.raises(RegistryError) as info:
        _client(transport, []).me()
    assert "versions match" in info.value.hint
