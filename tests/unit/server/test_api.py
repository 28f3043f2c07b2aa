"""HTTP behaviour: body caps and nesting limits enforced before the database, pagination, error
format, health and version, OpenAPI."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sealbench.server.limits import json_depth_exceeds
from sealbench.server.migrate import head_revision

API = "/api/v1"


def _count_datasets(client: TestClient, actor: Any) -> int:
    return len(client.get(f"{API}/datasets?limit=200", headers=actor.headers).json()["items"])


def _audit_len(client: TestClient, admin: Any) -> int:
    return len(client.get(f"{API}/audit?limit=200", headers=admin.headers).json()["items"])


@pytest.fixture
def pair(make_user: Any) -> tuple[Any, Any]:
    return make_user("user@x.test"), make_user("admin@x.test", admin=True)


def test_oversized_body_refused_before_parsing(client: TestClient, pair: Any, h: Any) -> None:
    user, admin = pair
    before = _audit_len(client, admin)
    body = {
        "name": "big",
        "digest": h.digest_of("b"),
        "case_count": 1,
        "statistics": {"pad": "x" * (2 << 20)},
    }
    r = client.post(f"{API}/datasets", json=body, headers=user.headers)
    assert r.status_code == 413 and r.json()["code"] == "payload_too_large"
    assert _count_datasets(client, user) == 0 and _audit_len(client, admin) == before


def test_oversized_chunked_body_refused_while_streaming(client: TestClient, pair: Any) -> None:
    user, _admin = pair
    sent = 0

    def chunks() -> Iterator[bytes]:
        nonlocal sent
        yield (
            b'{"name":"big","digest":"sha256:' + b"0" * 64 + b'","case_count":1,"statistics":{"p":"'
        )
        for _ in range(64):
            sent += 1
            yield b"x" * (64 << 10)
        yield b'"}}'

    headers = {**user.headers, "Content-Type": "application/json"}
    r = client.post(f"{API}/datasets", content=chunks(), headers=headers)
    assert r.status_code == 413
    assert _count_datasets(client, user) == 0


def test_deeply_nested_json_refused(client: TestClient, pair: Any, h: Any) -> None:
    user, admin = pair
    before = _audit_len(client, admin)
    nested = "[" * 100_000 + "1" + "]" * 100_000
    raw = '{{"name":"deep","digest":"{}","case_count":1,"statistics":{{"n":{}}}}}'.format(
        h.digest_of("d"),
        nested,
    )
    r = client.post(
        f"{API}/datasets", content=raw, headers={**user.headers, "Content-Type": "application/json"}
    )
    assert r.status_code == 422 and r.json()["code"] == "json_too_deep"
    assert _count_datasets(client, user) == 0 and _audit_len(client, admin) == before


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"{not json", "application/json"),
        (b"", "application/json"),
        (b"[]", "application/json"),
        (b'{"name": "x"}', "text/plain"),
        (
            '{"name":"\u00e9t\u00e9","digest":"sha256:zz","case_count":-1}'.encode(),
            "application/json",
        ),
        (
            b'{"name":"ok","digest":"sha256:'
            + b"0" * 64
            + b'","case_count":1,"statistics":{"a":NaN}}',
            "application/json",
        ),
        (
            b'{"name":"ok","digest":"sha256:' + b"0" * 64 + b'","case_count":99999999999999999999}',
            "application/json",
        ),
    ],
)
def test_bad_input_gets_4xx_never_500(
    client: TestClient, pair: Any, body: bytes, content_type: str
) -> None:
    user, _admin = pair
    r = client.post(
        f"{API}/datasets", content=body, headers={**user.headers, "Content-Type": content_type}
    )
    assert 400 <= r.status_code < 500, r.text
    assert set(r.json()) == {"code", "message", "details"}


def test_huge_path_id_is_404_or_422_not_500(client: TestClient, pair: Any) -> None:
    user, _admin = pair
    assert client.get(f"{API}/benchmarks/{2**40}", headers=user.headers).status_code == 422
    assert client.get(f"{API}/benchmarks/{2**31 - 1}", headers=user.headers).status_code == 404
    assert client.get(f"{API}/datasets?owner_id={2**40}", headers=user.headers).status_code == 422


def test_pagination_walks_every_row_once(client: TestClient, pair: Any, h: Any) -> None:
    user, _admin = pair
    for i in range(7):
        body = {"name": f"site-{i}", "digest": h.digest_of(str(i)), "case_count": i}
        h.ok(client.post(f"{API}/datasets", json=body, headers=user.headers), 201)
    seen, offset = [], 0
    while offset is not None:
        page = h.ok(client.get(f"{API}/datasets?limit=3&offset={offset}", headers=user.headers))
        assert len(page["items"]) <= 3
        seen += [d["name"] for d in page["items"]]
        offset = page["next_offset"]
    assert seen == [f"site-{i}" for i in range(7)]
    assert client.get(f"{API}/datasets?limit=0", headers=user.headers).status_code == 422
    assert client.get(f"{API}/datasets?limit=201", headers=user.headers).status_code == 422
    mine = h.ok(client.get(f"{API}/datasets?owner_id={user.user_id}", headers=user.headers))
    assert len(mine["items"]) == 7


def test_health_version_and_openapi(client: TestClient) -> None:
    assert client.get("/health").json() == {"status": "ok"}
    version = client.get("/version").json()
    assert version["api"] == "v1" and version["schema_revision"] == head_revision()
    schema = client.get("/openapi.json").json()
    assert "/api/v1/benchmarks/{benchmark_id}/leaderboard" in schema["paths"]
    assert "BenchmarkCreate" in schema["components"]["schemas"]
    assert client.get("/docs").status_code == 200


def test_unknown_route_and_method_use_error_format(client: TestClient, pair: Any) -> None:
    user, _admin = pair
    r = client.get(f"{API}/nothing-here", headers=user.headers)
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    r = client.delete(f"{API}/benchmarks", headers=user.headers)
    assert r.status_code == 405 and r.json()["code"] == "method_not_allowed"


def test_validation_error_does_not_echo_input(client: TestClient, pair: Any) -> None:
    user, _admin = pair
    secret = "s3cr3t-value-that-must-not-echo"
    r = client.post(
        f"{API}/datasets",
        json={"name": secret, "digest": secret, "case_count": "x"},
        headers=user.headers,
    )
    assert r.status_code == 422 and secret not in r.text


@pytest.mark.parametrize(
    ("body", "depth", "exceeds"),
    [
        (b"[[[]]]", 3, False),
        (b"[[[[]]]]", 3, True),
        (b'{"a":"[[[[[[[["}', 2, False),
        (b'{"a":"\\"[[[[","b":[[1]]}', 3, False),
        (b'{"a":"\\"[[[[","b":[[[1]]]}', 3, True),
        (b"", 1, False),
    ],
)
def test_json_depth_counts_brackets_outside_strings(body: bytes, depth: int, exceeds: bool) -> None:
    assert json_depth_exceeds(body, depth) is exceeds
