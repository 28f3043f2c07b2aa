"""Fixtures for the registry server tests.

Every test that takes ``client`` (or ``database_url``) runs twice: on SQLite and on PostgreSQL,
unless its module is marked ``one_database`` (see :func:`pytest_generate_tests`): then on SQLite
only. PostgreSQL is a throwaway cluster started once per session with the machine's ``initdb``
and ``pg_ctl``; each test gets a fresh database copied from a migrated template (``CREATE
DATABASE ... TEMPLATE``), each SQLite test a copy of a migrated template file. If the cluster
cannot start the tests fail, never skip.

Fakes (not patches): :class:`FakeJwksFetcher` serves key sets from memory, :class:`FakeClock`
is a settable clock, :class:`TokenFactory` signs attestation tokens with a test RSA key.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from fastapi.testclient import TestClient

from sealbench.benchmarks.release import InsecureFixedNoise
from sealbench.contract.pin import BenchmarkPin
from sealbench.contract.workload import ENV_DATA_DIGEST, ENV_MODEL_DIGEST, ENV_RECIPIENT_DIGEST
from sealbench.crypto.attestation import RESULT_AUDIENCE, Jwks, result_nonce
from sealbench.crypto.digest import Sha256Digest, sha256_digest
from sealbench.server.app import create_app
from sealbench.server.db import open_database
from sealbench.server.errors import UpstreamUnavailableError
from sealbench.server.migrate import upgrade_to_head
from sealbench.server.pgcluster import ClusterError, ThrowawayPostgres
from sealbench.server.services.users import create_user
from sealbench.server.settings import ServerSettings, TrustedIssuer

TEST_ISSUER = "https://attestation.test.invalid"
TEST_JWKS_URL = "https://attestation.test.invalid/jwks"
IMAGE_DIGEST = "sha256:" + "1" * 64
START = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)
_counter = itertools.count()


# ---------------------------------------------------------------- databases


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[ThrowawayPostgres]:
    cluster = ThrowawayPostgres()
    try:
        cluster.start()
    except (ClusterError, OSError) as exc:
        pytest.fail(f"the PostgreSQL test cluster could not start: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def pg_template(pg_cluster: ThrowawayPostgres) -> str:
    url = pg_cluster.create_database("sealbench_template")
    db = open_database(url)
    upgrade_to_head(db.engine)
    db.dispose()
    return "sealbench_template"


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "registry.sqlite3"
    db = open_database(f"sqlite:///{path}")
    upgrade_to_head(db.engine)
    with db.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    db.dispose()
    return path


BACKENDS = ("sqlite", "postgresql")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "one_database(reason): the module's tests run on SQLite only (the registry's database "
        "takes no part in what they check; the reason says why); the others run on both",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Which databases a test runs on: both (:data:`BACKENDS`), unless it is marked
    ``one_database`` or names its own with ``@pytest.mark.parametrize("backend", ...,
    indirect=True)``.

    What the two databases can disagree on (locking and concurrent writers, migrations,
    dialect SQL, JSON and time types, constraints and their errors, transactions) is checked on
    both. A module is marked ``one_database`` only when what its tests check is decided in
    Python before or after the database (authorization tables, input validation, rendering of
    pages from values read through the same queries that the modules run on both test); there
    the second run repeated the first."""
    if "backend" not in metafunc.fixturenames:
        return
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0]
        listed = names.split(",") if isinstance(names, str) else list(names)
        if "backend" in (n.strip() for n in listed):
            return  # the test names its databases
    one = metafunc.definition.get_closest_marker("one_database")
    if one is not None and not one.args:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: one_database needs a reason")
    backends = BACKENDS[:1] if one is not None else BACKENDS
    metafunc.definition.add_marker(pytest.mark.parametrize("backend", backends, indirect=True))


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """``sqlite`` or ``postgresql`` (parametrized by :func:`pytest_generate_tests`)."""
    return str(request.param)


@pytest.fixture
def database_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, migrated database on ``backend``."""
    if backend == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        target = tmp_path / "registry.sqlite3"
        shutil.copyfile(template, target)
        return f"sqlite:///{target}"
    cluster: ThrowawayPostgres = request.getfixturevalue("pg_cluster")
    template_name: str = request.getfixturevalue("pg_template")
    return cluster.create_database(f"t{next(_counter)}_{int(time.time())}", template=template_name)


@pytest.fixture
def database_at(backend: str, request: pytest.FixtureRequest, tmp_path: Path
                ) -> Callable[[str], str]:
    """Makes a fresh database on ``backend`` migrated only up to a given revision (what a
    registry of before that migration holds), returning its URL."""
    from alembic import command

    from sealbench.server.migrate import alembic_config

    def make(revision: str) -> str:
        if backend == "sqlite":
            url = f"sqlite:///{tmp_path / f'at-{revision}.sqlite3'}"
        else:
            cluster: ThrowawayPostgres = request.getfixturevalue("pg_cluster")
            url = cluster.create_database(f"at{revision}_{next(_counter)}_{int(time.time())}")
        db = open_database(url)
        try:
            with db.engine.begin() as conn:
                command.upgrade(alembic_config(conn), revision)
        finally:
            db.dispose()
        return url

    return make


# ---------------------------------------------------------------- fakes


@dataclass
class FakeClock:
    now: datetime = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass
class FakeJwksFetcher:
    documents: dict[str, bytes] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    def fetch(self, url: str) -> bytes:
        self.calls.append(url)
        if url not in self.documents:
            raise UpstreamUnavailableError(f"no JWKS at {url}")
        return self.documents[url]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


@dataclass
class TokenFactory:
    """Signs RS256 JWTs with its own key; ``jwks`` is the matching key set document."""

    kid: str = "test-key-1"
    key: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )

    @property
    def jwks(self) -> bytes:
        return Jwks.from_keys({self.kid: self.key.public_key()}).to_json()

    def sign(self, claims: dict[str, Any], *, kid: str | None = None) -> str:
        header = {"alg": "RS256", "typ": "JWT", "kid": kid or self.kid}
        signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        signature = self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64(signature)}"

    def pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )


def result_claims(
    *,
    summary: dict[str, Any],
    sealed_digest: str,
    benchmark_id: int | str,
    data_digest: str,
    model_digest: str,
    metrics_version: str = "brats-2023-gli/1",
    now: datetime = START,
    image_digest: str = IMAGE_DIGEST,
    issuer: str = TEST_ISSUER,
    audience: str = RESULT_AUDIENCE,
) -> dict[str, Any]:
    """A full Confidential Space-style result token payload binding the given values."""
    iat = int(now.timestamp())
    return {
        "iss": issuer,
        "aud": audience,
        "sub": "https://www.googleapis.com/compute/v1/projects/p/zones/z/instances/i",
        "iat": iat,
        "nbf": iat,
        "exp": iat + 3600,
        "eat_nonce": result_nonce(summary, Sha256Digest(sealed_digest)),
        "secboot": True,
        "hwmodel": "GCP_AMD_SEV",
        "swname": "CONFIDENTIAL_SPACE",
        "swversion": ["250301"],
        "dbgstat": "disabled-since-boot",
        "google_service_accounts": [],
        "submods": {
            "container": {
                "image_reference": "registry.test/sealbench/eval@" + image_digest,
                "image_digest": image_digest,
                "restart_policy": "Never",
                "args": [],
                "env": {},
                "env_override": {
                    "SEALBENCH_BENCHMARK_ID": str(benchmark_id),
                    "SEALBENCH_METRICS_VERSION": metrics_version,
                    ENV_DATA_DIGEST: data_digest,
                    ENV_MODEL_DIGEST: model_digest,
                    ENV_RECIPIENT_DIGEST: "sha256:" + "9" * 64,
                    "SEALBENCH_RUN_ID": "run-1",
                },
            },
            "confidential_space": {"support_attributes": ["LATEST", "STABLE", "USABLE"]},
        },
    }


# ---------------------------------------------------------------- app and users


@pytest.fixture(scope="session")
def tokens() -> TokenFactory:
    return TokenFactory()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def jwks_fetcher(tokens: TokenFactory) -> FakeJwksFetcher:
    return FakeJwksFetcher({TEST_JWKS_URL: tokens.jwks})


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> ServerSettings:
    return ServerSettings(
        data_dir=tmp_path,
        database_url=database_url,
        trusted_issuers=(TrustedIssuer(issuer=TEST_ISSUER, jwks_url=TEST_JWKS_URL),),
    )


@pytest.fixture
def client(
    settings: ServerSettings, clock: FakeClock, jwks_fetcher: FakeJwksFetcher
) -> Iterator[TestClient]:
    app = create_app(settings, clock=clock, jwks_fetcher=jwks_fetcher)
    with TestClient(app) as test_client:
        yield test_client


@dataclass(frozen=True)
class Actor:
    user_id: int
    email: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@pytest.fixture
def make_user(database_url: str, clock: FakeClock) -> Iterator[Any]:
    db = open_database(database_url)

    def make(email: str, *, admin: bool = False) -> Actor:
        with db.writer() as session:
            user, token = create_user(session, email=email, is_admin=admin, now=clock())
            return Actor(user.id, user.email, token)

    yield make
    db.dispose()


def digest_of(label: str) -> str:
    return sha256_digest(label.encode())


@dataclass(frozen=True)
class World:
    """An approved benchmark with an approved dataset and model, and every role."""

    admin: Actor
    bench_owner: Actor
    data_owner: Actor
    model_owner: Actor
    other: Actor
    benchmark_id: int
    dataset_id: int
    model_id: int
    dataset_digest: str
    model_digest: str


def benchmark_body(name: str = "brats", version: str = "1") -> dict[str, Any]:
    return {
        "name": name,
        "version": version,
        "description": "glioma segmentation",
        "data_contract": {"modalities": ["t1", "t2"], "shape": [240, 240, 155],
                          "spacing_mm": [1.0, 1.0, 1.0]},  # the pin's grid
        "metrics_spec": {"dice": {"labels": [1, 2, 3]}},
        "metrics_version": "brats-2023-gli/1",
        "image_reference": "registry.test/sealbench/eval",
        "image_digest": IMAGE_DIGEST,
    }


def valid_summary() -> dict[str, Any]:
    """A run's ``summary.json`` the benchmark's plug-in (brats-2023-gli/1) validates: the
    registry refuses any other."""
    from sealbench.benchmarks.registry import load

    plugin = load(BenchmarkPin.parse("brats-2023-gli/1"))
    failed = plugin.failure("BraTS-GLI-00001-000", "x")
    return {"format": "sealbench/result-summary", "version": 1, "run_id": "run-1",
            "benchmark_id": "1", "metrics_version": "brats-2023-gli/1",
            "aggregates": plugin.summarise([failed], InsecureFixedNoise()).to_json()}


def brats_aggregates(dice: float | dict[str, float], n_cases: int = 2000, *,
                     offsets: tuple[float, ...] = (0.0,)) -> dict[str, Any]:
    """A BraTS public summary (version 2) the plug-in validates: the release of ``n_cases``
    cases whose Dice in each region is ``dice`` (one value for every region, or one per region),
    made with the INSECURE fixed noise source (``offsets`` added to the scaled sums, cycled
    over WT, TC, ET; 0: the exact means) at the noise scale the pin declares. At epsilon 1 a
    region's noise sd is ``sigma / n`` (about 9.3 / n): 2,000 cases give informative figures
    that rank, 5 cases figures that are not informative."""
    import numpy as np

    from sealbench.benchmarks.brats.published import PublishedSummary
    from sealbench.benchmarks.registry import load
    from sealbench.benchmarks.release import release

    plugin = load(BenchmarkPin.parse("brats-2023-gli/1"))
    spec = plugin.release_spec
    keys = [c.key.split(":", 1)[1] for c in spec.columns]
    means = dict.fromkeys(keys, dice) if isinstance(dice, float | int) else dice
    rows = np.tile([float(means[k]) for k in keys], (n_cases, 1))
    made = release(rows, spec, InsecureFixedNoise(offsets))
    metrics = plugin.metrics  # type: ignore[attr-defined]
    summary = PublishedSummary(metrics_id=metrics.metrics_id, metrics_version=metrics.version,
                               n_cases=n_cases, release=made)
    plugin.parse_summary(summary.to_json())  # what the registry accepts
    return summary.to_json()


def brats_summary(dice: float | dict[str, float], n_cases: int = 2000, *,
                  offsets: tuple[float, ...] = (0.0,)) -> dict[str, Any]:
    """:func:`brats_aggregates` inside a run's ``summary.json`` (``sealbench/result-summary``)."""
    return {"format": "sealbench/result-summary", "version": 1, "run_id": "run-1",
            "benchmark_id": "1", "metrics_version": "brats-2023-gli/1",
            "aggregates": brats_aggregates(dice, n_cases, offsets=offsets)}


def ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


@pytest.fixture
def world(client: TestClient, make_user: Any) -> World:
    admin = make_user("admin@registry.test", admin=True)
    bench_owner = make_user("authority@bench.test")
    data_owner = make_user("hospital@data.test")
    model_owner = make_user("vendor@model.test")
    other = make_user("curious@other.test")
    bid = ok(
        client.post("/api/v1/benchmarks", json=benchmark_body(), headers=bench_owner.headers), 201
    )["id"]
    ok(client.post(f"/api/v1/benchmarks/{bid}/approve", headers=admin.headers))
    dd, md = digest_of("dataset"), digest_of("model")
    did = ok(
        client.post(
            "/api/v1/datasets",
            json={"name": "hospital-a", "digest": dd, "case_count": 5},
            headers=data_owner.headers,
        ),
        201,
    )["id"]
    mid = ok(
        client.post(
            "/api/v1/models",
            json={"name": "unet", "version": "1.0", "digest": md},
            headers=model_owner.headers,
        ),
        201,
    )["id"]
    ok(
        client.post(
            f"/api/v1/benchmarks/{bid}/datasets", json={"asset_id": did}, headers=data_owner.headers
        ),
        201,
    )
    ok(client.post(f"/api/v1/benchmarks/{bid}/datasets/{did}/approve", headers=bench_owner.headers))
    ok(
        client.post(
            f"/api/v1/benchmarks/{bid}/models", json={"asset_id": mid}, headers=model_owner.headers
        ),
        201,
    )
    ok(client.post(f"/api/v1/benchmarks/{bid}/models/{mid}/approve", headers=bench_owner.headers))
    return World(admin, bench_owner, data_owner, model_owner, other, bid, did, mid, dd, md)


@pytest.fixture(scope="session")
def h() -> SimpleNamespace:
    """Helpers for test modules (conftest modules are not importable under importlib mode)."""
    return SimpleNamespace(
        ok=ok,
        benchmark_body=benchmark_body,
        result_claims=result_claims,
        valid_summary=valid_summary,
        brats_aggregates=brats_aggregates,
        brats_summary=brats_summary,
        digest_of=digest_of,
        IMAGE_DIGEST=IMAGE_DIGEST,
        TEST_ISSUER=TEST_ISSUER,
        TEST_JWKS_URL=TEST_JWKS_URL,
        START=START,
        TokenFactory=TokenFactory,
        FakeJwksFetcher=FakeJwksFetcher,
    )
