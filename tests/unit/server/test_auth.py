"""Authentication: API tokens stored only as hashes; OIDC bearer JWTs verified against a JWKS
that a local HTTP server serves (the real fetcher, with its timeout); insecure settings refused
outside local mode."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import text

from sealbench.server.app import create_app
from sealbench.server.db import open_database
from sealbench.server.settings import OidcSettings, ServerSettings, TrustedIssuer

API = "/api/v1"
AUDIENCE = "sealbench-registry"


def test_api_token_stored_only_as_hash(
    client: TestClient, make_user: Any, database_url: str
) -> None:
    user = make_user("someone@x.test")
    assert client.get(f"{API}/users/me", headers=user.headers).json()["email"] == "someone@x.test"
    db = open_database(database_url)
    with db.engine.connect() as conn:
        stored = conn.execute(text("SELECT token_sha256 FROM api_tokens")).scalars().all()
        dump = " ".join(
            str(v) for row in conn.execute(text("SELECT * FROM api_tokens")) for v in row
        )
    db.dispose()
    assert hashlib.sha256(user.token.encode()).hexdigest() in stored
    assert user.token not in dump and user.token[4:] not in dump


@pytest.mark.parametrize(
    "header",
    [None, "Bearer sbt_not-a-real-token", "Basic dXNlcjpwdw==", "Bearer ", "Bearer a.b.c", "sbt_x"],
)
def test_unknown_or_malformed_credentials_refused(client: TestClient, header: str | None) -> None:
    headers = {} if header is None else {"Authorization": header}
    r = client.get(f"{API}/users/me", headers=headers)
    assert r.status_code == 401 and r.json()["code"] == "unauthenticated"


def test_revoked_token_refused_after_cache_expiry(
    client: TestClient, make_user: Any, database_url: str
) -> None:
    user = make_user("someone@x.test")
    assert client.get(f"{API}/users/me", headers=user.headers).status_code == 200
    db = open_database(database_url)
    with db.engine.begin() as conn:
        conn.execute(text("UPDATE api_tokens SET revoked_at = created_at"))
    db.dispose()
    client.app.state.registry.authenticator._cache.clear()  # type: ignore[attr-defined]
    assert client.get(f"{API}/users/me", headers=user.headers).status_code == 401


# ------------------------------------------------------------------ OIDC


class _JwksServer:
    def __init__(self, document: bytes) -> None:
        self.document = document
        self.hits = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.hits += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(outer.document)))
                self.end_headers()
                self.wfile.write(outer.document)

            def log_message(self, *_args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/jwks"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def oidc(h: Any) -> Iterator[tuple[Any, _JwksServer]]:
    signer = h.TokenFactory(kid="idp-1")
    server = _JwksServer(signer.jwks)
    yield signer, server
    server.close()


@pytest.fixture
def oidc_client(settings: ServerSettings, oidc: Any) -> Iterator[TestClient]:
    _signer, server = oidc
    configured = settings.model_copy(
        update={
            "oidc": OidcSettings(
                issuer="http://127.0.0.1/idp",
                audience=AUDIENCE,
                jwks_url=server.url,
                admin_subjects=("root-subject",),
            )
        }
    )
    with TestClient(create_app(configured)) as client:
        yield client


def _jwt(signer: Any, **override: Any) -> dict[str, str]:
    now = int(time.time())
    claims = {
        "iss": "http://127.0.0.1/idp",
        "aud": AUDIENCE,
        "sub": "subject-1",
        "email": "alice@hospital.test",
        "iat": now,
        "exp": now + 600,
    }
    claims.update(override)
    return {"Authorization": f"Bearer {signer.sign(claims)}"}


def test_oidc_user_provisioned_from_jwt(oidc_client: TestClient, oidc: Any) -> None:
    signer, server = oidc
    me = oidc_client.get(f"{API}/users/me", headers=_jwt(signer)).json()
    assert me["email"] == "alice@hospital.test" and me["is_admin"] is False
    again = oidc_client.get(f"{API}/users/me", headers=_jwt(signer)).json()
    assert again["id"] == me["id"]
    assert server.hits == 1  # the JWKS is cached
    admin = oidc_client.get(
        f"{API}/users/me", headers=_jwt(signer, sub="root-subject", email="r@x.test")
    )
    assert admin.json()["is_admin"] is True


@pytest.mark.parametrize(
    ("override", "why"),
    [
        ({"aud": "someone-else"}, "audience"),
        ({"iss": "http://127.0.0.1/other-idp"}, "issuer"),
        ({"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200}, "expired"),
        ({"email": None}, "email"),
    ],
)
def test_oidc_jwt_with_wrong_claims_refused(
    oidc_client: TestClient, oidc: Any, override: dict[str, Any], why: str
) -> None:
    signer, _server = oidc
    r = oidc_client.get(f"{API}/users/me", headers=_jwt(signer, **override))
    assert r.status_code == 401, why


def test_oidc_jwt_signed_by_other_key_refused(oidc_client: TestClient, h: Any) -> None:
    impostor = h.TokenFactory(kid="idp-1")
    assert oidc_client.get(f"{API}/users/me", headers=_jwt(impostor)).status_code == 401


def test_oidc_jwt_with_alg_none_refused(oidc_client: TestClient) -> None:
    import base64
    import json

    def b64(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    now = int(time.time())
    token = (
        b64({"alg": "none", "kid": "idp-1"})
        + "."
        + b64(
            {
                "iss": "http://127.0.0.1/idp",
                "aud": AUDIENCE,
                "sub": "s",
                "email": "e@x.test",
                "iat": now,
                "exp": now + 60,
            }
        )
        + "."
    )
    r = oidc_client.get(f"{API}/users/me", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 401


def test_unreachable_jwks_gives_503_not_500(settings: ServerSettings, h: Any) -> None:
    from sealbench.server.pgcluster import free_port

    configured = settings.model_copy(
        update={
            "oidc": OidcSettings(
                issuer="http://127.0.0.1/idp",
                audience=AUDIENCE,
                jwks_url=f"http://127.0.0.1:{free_port()}/jwks",
            )
        }
    )
    with TestClient(create_app(configured)) as client:
        r = client.get(f"{API}/users/me", headers=_jwt(h.TokenFactory(kid="k")))
    assert r.status_code == 503 and r.json()["code"] == "upstream_unavailable"


# ------------------------------------------------------------------ settings


def test_local_mode_defaults_to_sqlite_in_data_dir(tmp_path: Path) -> None:
    s = ServerSettings(data_dir=tmp_path)
    assert s.effective_database_url == f"sqlite:///{tmp_path.resolve()}/registry.sqlite3"


@pytest.mark.parametrize(
    "update",
    [
        {},
        {"database_url": "sqlite:////var/lib/registry.sqlite3"},
        {
            "database_url": "postgresql+psycopg://db/reg",
            "oidc": {"issuer": "https://idp", "audience": "a", "jwks_url": "http://idp/jwks"},
        },
        {
            "database_url": "postgresql+psycopg://db/reg",
            "trusted_issuers": [{"issuer": "http://mock", "jwks_url": "http://mock/jwks"}],
        },
        {"database_url": "postgresql+psycopg://db/reg", "host": "0.0.0.0"},
    ],
)
def test_insecure_settings_refused_outside_local_mode(update: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="insecure settings"):
        ServerSettings.model_validate({"mode": "production", **update})


def test_production_settings_accepted_and_read_from_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SEALBENCH_SERVER_MODE", "production")
    monkeypatch.setenv("SEALBENCH_SERVER_DATABASE_URL", "postgresql+psycopg://db/reg")
    monkeypatch.setenv(
        "SEALBENCH_SERVER_TRUSTED_ISSUERS",
        '[{"issuer": "https://confidentialcomputing.googleapis.com", "jwks_url": "https://keys.test/jwks"}]',
    )
    s = ServerSettings()
    assert s.mode == "production"
    assert s.trusted_issuers == (
        TrustedIssuer(
            issuer="https://confidentialcomputing.googleapis.com", jwks_url="https://keys.test/jwks"
        ),
    )
