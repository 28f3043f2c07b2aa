"""The authorization matrix: every endpoint times {anonymous, other user, owner, benchmark owner,
admin}, with the expected status for each, table-driven. Targets that a call consumes (a
pending benchmark to approve, a pending association to decide) are made fresh for each role."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sealbench.benchmarks.registry import load as load_benchmark
from sealbench.benchmarks.release import InsecureFixedNoise
from sealbench.contract.pin import BenchmarkPin

# The registry's database takes no part in what this module checks (tests/unit/server/conftest.py).
pytestmark = pytest.mark.one_database(
    "who may call each endpoint is decided in Python from the rows' owners; the queries and "
    "writes behind each route run on both databases in their own modules"
)

API = "/api/v1"
ROLES = ("anonymous", "other", "owner", "benchmark_owner", "admin")
_n = itertools.count()
#: A run's summary.json that the benchmark's plug-in (brats-2023-gli/1) validates.
_BRATS = load_benchmark(BenchmarkPin.parse("brats-2023-gli/1"))
SUMMARY: dict[str, Any] = {
    "format": "sealbench/result-summary", "version": 1, "run_id": "run-1", "benchmark_id": "1",
    "metrics_version": "brats-2023-gli/1",
    "aggregates": _BRATS.summarise([_BRATS.failure("BraTS-GLI-00001-000", "x")],
        InsecureFixedNoise()).to_json(),
}
COORDS = {
    "kms_key_name": "projects/hospital/locations/global/keyRings/ring/cryptoKeys/key",
    "storage_uri": "gs://hospital-bucket/prefix",
    "wip_provider": "projects/123/locations/global/workloadIdentityPools/pool/providers/prov",
}

GRANTS = {"grants_digest": "sha256:" + "a" * 64, "synced_at": "2026-06-01T11:00:00+00:00"}


@dataclass
class Ctx:
    client: TestClient
    world: Any
    h: Any
    tokens: Any
    result_id: int

    def actor(self, role: str, owner: str) -> Any:
        w = self.world
        return {
            "other": w.other,
            "owner": getattr(w, owner),
            "benchmark_owner": w.bench_owner,
            "admin": w.admin,
        }.get(role)

    def create(self, path: str, body: dict[str, Any], actor: Any) -> int:
        return int(self.h.ok(self.client.post(path, json=body, headers=actor.headers), 201)["id"])

    def pending_benchmark(self) -> int:
        return self.create(
            f"{API}/benchmarks", self.h.benchmark_body(f"p{next(_n)}"), self.world.bench_owner
        )

    def approved_benchmark(self) -> int:
        bid = self.pending_benchmark()
        self.h.ok(
            self.client.post(f"{API}/benchmarks/{bid}/approve", headers=self.world.admin.headers)
        )
        return bid

    def dataset(self) -> int:
        name = f"d{next(_n)}"
        return self.create(
            f"{API}/datasets",
            {"name": name, "digest": self.h.digest_of(name), "case_count": 1},
            self.world.data_owner,
        )

    def model(self) -> int:
        name = f"m{next(_n)}"
        return self.create(
            f"{API}/models",
            {"name": name, "version": "1", "digest": self.h.digest_of(name)},
            self.world.model_owner,
        )

    def pending(self, kind: str) -> int:
        asset = self.dataset() if kind == "datasets" else self.model()
        owner = self.world.data_owner if kind == "datasets" else self.world.model_owner
        self.h.ok(
            self.client.post(
                f"{API}/benchmarks/{self.world.benchmark_id}/{kind}",
                json={"asset_id": asset},
                headers=owner.headers,
            ),
            201,
        )
        return asset

    def result_event_seq(self) -> int:
        """The audit event of the data owner's result (its actor is the data owner); 1 when
        there is no result (the route-coverage check only needs the path)."""
        receipt = self.client.get(
            f"{API}/audit/receipts/{self.result_id}", headers=self.world.data_owner.headers
        )
        return int(receipt.json()["event"]["seq"]) if receipt.status_code == 200 else 1

    def cosignature(self) -> dict[str, Any]:
        """A fresh witness's valid cosignature over the latest checkpoint."""
        from sealbench.crypto.note import ALG_COSIGNATURE, Checkpoint, SignerKey, cosign

        body = self.h.ok(
            self.client.get(f"{API}/audit/checkpoint", headers=self.world.other.headers)
        )
        cp = Checkpoint.from_text(body["checkpoint"].split("\n\n")[0] + "\n")
        witness = SignerKey.generate(f"witness.test/{next(_n)}", ALG_COSIGNATURE)
        return {
            "witness": witness.verifier().to_string(),
            "tree_size": cp.size,
            "signature": cosign(cp, witness, 1).line().rstrip("\n"),
        }

    def run_report(self) -> dict[str, Any]:
        return {
            "benchmark_id": self.world.benchmark_id,
            "dataset_id": self.world.dataset_id,
            "model_id": self.world.model_id,
            "state": "running",
            "seq": 1,
            "image_digest": self.h.IMAGE_DIGEST,
            "tee": "mock",
        }

    def result_body(self) -> dict[str, Any]:
        sealed = "sha256:" + f"{next(_n):064x}"
        claims = self.h.result_claims(
            summary=SUMMARY,
            benchmark_id=self.world.benchmark_id,
            sealed_digest=sealed,
            data_digest=self.world.dataset_digest,
            model_digest=self.world.model_digest,
        )
        return {
            "benchmark_id": self.world.benchmark_id,
            "dataset_id": self.world.dataset_id,
            "model_id": self.world.model_id,
            "summary": SUMMARY,
            "sealed_result_digest": sealed,
            "attestation_token": self.tokens.sign(claims),
        }


Path = Callable[[Ctx], str]
Body = Callable[[Ctx], dict[str, Any]] | None


@dataclass(frozen=True)
class Row:
    name: str
    method: str
    path: Path
    expected: tuple[int, int, int, int, int]  # in ROLES order
    body: Body = None
    owner: str = "data_owner"


def _all(ok: int) -> tuple[int, int, int, int, int]:
    return (401, ok, ok, ok, ok)


B = lambda c: f"{API}/benchmarks/{c.world.benchmark_id}"  # noqa: E731
MATRIX = [
    Row("me", "GET", lambda c: f"{API}/users/me", _all(200)),
    Row(
        "benchmark create",
        "POST",
        lambda c: f"{API}/benchmarks",
        _all(201),
        body=lambda c: c.h.benchmark_body(f"b{next(_n)}"),
    ),
    Row("benchmark list", "GET", lambda c: f"{API}/benchmarks", _all(200)),
    Row("benchmark get", "GET", B, _all(200)),
    Row(
        "benchmark approve",
        "POST",
        lambda c: f"{API}/benchmarks/{c.pending_benchmark()}/approve",
        (401, 403, 403, 403, 200),
        owner="bench_owner",
    ),
    Row(
        "benchmark retire",
        "POST",
        lambda c: f"{API}/benchmarks/{c.pending_benchmark()}/state",
        (401, 403, 200, 200, 200),
        body=lambda c: {"state": "retired"},
        owner="bench_owner",
    ),
    Row(
        "benchmark reject",
        "POST",
        lambda c: f"{API}/benchmarks/{c.pending_benchmark()}/state",
        (401, 403, 403, 403, 200),
        body=lambda c: {"state": "rejected"},
        owner="bench_owner",
    ),
    Row(
        "benchmark close",
        "POST",
        lambda c: f"{API}/benchmarks/{c.approved_benchmark()}/close",
        (401, 403, 200, 200, 200),
        owner="bench_owner",
    ),
    Row(
        "benchmark leaderboard publication",
        "POST",
        lambda c: f"{API}/benchmarks/{c.approved_benchmark()}/leaderboard",
        (401, 403, 200, 200, 200),
        body=lambda c: {"published": True},
        owner="bench_owner",
    ),
    Row(
        "dataset register",
        "POST",
        lambda c: f"{API}/datasets",
        _all(201),
        body=lambda c: {"name": f"r{next(_n)}", "digest": c.h.digest_of("r"), "case_count": 3},
    ),
    Row("dataset list", "GET", lambda c: f"{API}/datasets", _all(200)),
    Row("dataset get", "GET", lambda c: f"{API}/datasets/{c.world.dataset_id}", _all(200)),
    # read like the dataset: budgets and debits are privacy-loss figures, never results
    Row("dataset budget", "GET", lambda c: f"{API}/datasets/{c.world.dataset_id}/budget",
        _all(200)),
    Row(
        "dataset coords put",
        "PUT",
        lambda c: f"{API}/datasets/{c.world.dataset_id}/coordinates",
        (401, 403, 200, 403, 403),
        body=lambda c: COORDS,
    ),
    Row(
        "dataset coords get",
        "GET",
        lambda c: f"{API}/datasets/{c.world.dataset_id}/coordinates",
        (401, 403, 200, 200, 403),
    ),
    # grant reports (issue 29): reported by the owner only, read like the coordinates
    Row(
        "dataset grants put",
        "PUT",
        lambda c: f"{API}/datasets/{c.world.dataset_id}/grants",
        (401, 403, 200, 403, 403),
        body=lambda c: GRANTS,
    ),
    Row(
        "dataset grants get",
        "GET",
        lambda c: f"{API}/datasets/{c.world.dataset_id}/grants",
        (401, 403, 200, 200, 403),
    ),
    Row(
        "model register",
        "POST",
        lambda c: f"{API}/models",
        _all(201),
        body=lambda c: {"name": f"r{next(_n)}", "version": "1", "digest": c.h.digest_of("m")},
    ),
    Row("model list", "GET", lambda c: f"{API}/models", _all(200)),
    Row("model get", "GET", lambda c: f"{API}/models/{c.world.model_id}", _all(200)),
    Row(
        "model coords put",
        "PUT",
        lambda c: f"{API}/models/{c.world.model_id}/coordinates",
        (401, 403, 200, 403, 403),
        body=lambda c: COORDS,
        owner="model_owner",
    ),
    Row(
        "model coords get",
        "GET",
        lambda c: f"{API}/models/{c.world.model_id}/coordinates",
        (401, 403, 200, 200, 403),
        owner="model_owner",
    ),
    Row(
        "model grants put",
        "PUT",
        lambda c: f"{API}/models/{c.world.model_id}/grants",
        (401, 403, 200, 403, 403),
        body=lambda c: GRANTS,
        owner="model_owner",
    ),
    Row(
        "model grants get",
        "GET",
        lambda c: f"{API}/models/{c.world.model_id}/grants",
        (401, 403, 200, 200, 403),
        owner="model_owner",
    ),
    Row(
        "dataset association open",
        "POST",
        lambda c: f"{B(c)}/datasets",
        (401, 403, 201, 201, 403),
        body=lambda c: {"asset_id": c.dataset()},
    ),
    Row("dataset associations list", "GET", lambda c: f"{B(c)}/datasets", _all(200)),
    Row(
        "dataset association history",
        "GET",
        lambda c: f"{B(c)}/datasets/{c.world.dataset_id}/history",
        _all(200),
    ),
    Row(
        "dataset association approve",
        "POST",
        lambda c: f"{B(c)}/datasets/{c.pending('datasets')}/approve",
        (401, 403, 403, 200, 403),
    ),
    Row(
        "dataset association reject",
        "POST",
        lambda c: f"{B(c)}/datasets/{c.pending('datasets')}/reject",
        (401, 403, 403, 200, 403),
    ),
    Row(
        "dataset association withdraw",
        "POST",
        lambda c: f"{B(c)}/datasets/{c.pending('datasets')}/withdraw",
        (401, 403, 200, 403, 403),
    ),
    Row(
        "model association open",
        "POST",
        lambda c: f"{B(c)}/models",
        (401, 403, 201, 201, 403),
        body=lambda c: {"asset_id": c.model()},
        owner="model_owner",
    ),
    Row("model associations list", "GET", lambda c: f"{B(c)}/models", _all(200)),
    Row(
        "model association history",
        "GET",
        lambda c: f"{B(c)}/models/{c.world.model_id}/history",
        _all(200),
    ),
    Row(
        "model association approve",
        "POST",
        lambda c: f"{B(c)}/models/{c.pending('models')}/approve",
        (401, 403, 403, 200, 403),
        owner="model_owner",
    ),
    Row(
        "model association reject",
        "POST",
        lambda c: f"{B(c)}/models/{c.pending('models')}/reject",
        (401, 403, 403, 200, 403),
        owner="model_owner",
    ),
    Row(
        "model association withdraw",
        "POST",
        lambda c: f"{B(c)}/models/{c.pending('models')}/withdraw",
        (401, 403, 200, 403, 403),
        owner="model_owner",
    ),
    Row(
        "result submit",
        "POST",
        lambda c: f"{API}/results",
        (401, 403, 201, 403, 403),
        body=lambda c: c.result_body(),
    ),
    Row("result list", "GET", lambda c: f"{API}/results", _all(200)),
    Row("result get", "GET", lambda c: f"{API}/results/{c.result_id}", (401, 403, 200, 200, 403)),
    Row("leaderboard", "GET", lambda c: f"{B(c)}/leaderboard", _all(200)),
    Row("pooled leaderboard", "GET", lambda c: f"{B(c)}/leaderboard/pooled", _all(200)),
    # TEE pooling (issues 27, 40): the authority only; this benchmark names no aggregator (409)
    Row("pool authorize", "POST", lambda c: f"{B(c)}/pool-authorizations",
        (401, 403, 403, 409, 403), body=lambda c: {"model_id": c.world.model_id}),
    Row("pool authorization list", "GET",
        lambda c: f"{B(c)}/pool-authorizations?model_id={c.world.model_id}",
        (401, 403, 403, 409, 403)),
    Row("pool authorization get", "GET", lambda c: f"{B(c)}/pool-authorizations/pool-1-1-ab",
        (401, 403, 403, 409, 403)),
    Row(
        "pooled release submit",
        "POST",
        lambda c: f"{B(c)}/pooled-releases",
        (401, 403, 403, 409, 403),
        body=lambda c: {"sealed_release_b64": "e30=", "attestation_token": "a.b.c", "inputs": {}},
    ),
    Row("pooled release list", "GET", lambda c: f"{B(c)}/pooled-releases", _all(200)),
    Row("audit list", "GET", lambda c: f"{API}/audit", (401, 403, 403, 403, 200)),
    Row("audit verify", "GET", lambda c: f"{API}/audit/verify", (401, 403, 403, 403, 200)),
    Row("audit checkpoint", "GET", lambda c: f"{API}/audit/checkpoint", _all(200)),
    Row("audit consistency", "GET", lambda c: f"{API}/audit/consistency?first=1&second=3",
        _all(200)),
    Row(
        "audit inclusion",
        "GET",
        lambda c: f"{API}/audit/inclusion?seq={c.result_event_seq()}",
        (401, 403, 200, 403, 200),
    ),
    Row(
        "audit receipt",
        "GET",
        lambda c: f"{API}/audit/receipts/{c.result_id}",
        (401, 403, 200, 200, 403),
    ),
    Row("audit events", "GET", lambda c: f"{API}/audit/events?start=0&end=10",
        (401, 403, 403, 403, 200)),
    Row(
        "audit cosign",
        "POST",
        lambda c: f"{API}/audit/cosignatures",
        _all(201),
        body=lambda c: c.cosignature(),
    ),
    Row(
        "run report",
        "PUT",
        lambda c: f"{API}/runs/{next(_n) + 1000}",
        (401, 403, 200, 403, 403),
        body=lambda c: c.run_report(),
    ),
    Row(
        "run report batch",
        "POST",
        lambda c: f"{API}/runs/reports",
        (401, 403, 200, 403, 403),
        body=lambda c: {"reports": [{"run_id": f"run-{next(_n)}", **c.run_report()}]},
    ),
    Row("run list", "GET", lambda c: f"{API}/runs", _all(200)),
    Row("benchmark progress", "GET", lambda c: f"{B(c)}/progress", (401, 403, 200, 200, 403)),
    Row("inbox", "GET", lambda c: f"{API}/inbox", _all(200)),
    Row("health", "GET", lambda c: "/health", (200, 200, 200, 200, 200)),
    Row("version", "GET", lambda c: "/version", (200, 200, 200, 200, 200)),
]


def test_matrix_covers_every_route(client: TestClient, world: Any, tokens: Any, h: Any) -> None:
    ctx = Ctx(client, world, h, tokens, 1)
    covered = {(row.method.lower(), row.path(ctx).split("?")[0]) for row in MATRIX}
    for template, ops in client.get("/openapi.json").json()["paths"].items():
        # ids are numbers; a pool authorization is named by its pool id
        named = re.sub(r"\\{pool_id\\}", "[A-Za-z0-9._-]+", re.escape(template))
        pattern = re.compile("^" + re.sub(r"\\{[a-z_]+\\}", "[0-9]+", named) + "$")
        for method in ops:
            assert any(m == method and pattern.match(p) for m, p in covered), (method, template)


@pytest.mark.parametrize("row", MATRIX, ids=[r.name for r in MATRIX])
def test_authorization_matrix(
    client: TestClient, world: Any, tokens: Any, h: Any, row: Row
) -> None:
    ctx = Ctx(client, world, h, tokens, 0)
    ctx.result_id = ctx.create(f"{API}/results", ctx.result_body(), world.data_owner)
    ctx.h.ok(
        client.put(
            f"{API}/datasets/{world.dataset_id}/coordinates",
            json=COORDS,
            headers=world.data_owner.headers,
        )
    )
    ctx.h.ok(
        client.put(
            f"{API}/models/{world.model_id}/coordinates",
            json=COORDS,
            headers=world.model_owner.headers,
        )
    )
    got = {}
    for role in ROLES:
        actor = ctx.actor(role, row.owner)
        headers = {} if actor is None else actor.headers
        path = row.path(ctx)
        body = None if row.body is None else row.body(ctx)
        got[role] = client.request(row.method, path, json=body, headers=headers).status_code
    assert got == dict(zip(ROLES, row.expected, strict=True))
