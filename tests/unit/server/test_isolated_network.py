"""Production mode refuses a wildcard bind address unless the operator states that the server
runs in an isolated network namespace whose only ingress is the platform's TLS proxy (a
container on Cloud Run), which is what the server image needs."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sealbench.server.settings import ServerSettings

PG = "postgresql+psycopg://u@db.internal/sealbench"


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_wildcard_bind_refused_in_production(host: str) -> None:
    with pytest.raises(ValidationError, match="not a wildcard"):
        ServerSettings(mode="production", database_url=PG, host=host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_wildcard_bind_accepted_in_an_isolated_container(host: str) -> None:
    settings = ServerSettings(mode="production", database_url=PG, host=host, isolated_network=True)
    assert settings.host == host


def test_isolated_network_does_not_excuse_sqlite_in_production() -> None:
    with pytest.raises(ValidationError, match="PostgreSQL"):
        ServerSettings(mode="production", host="0.0.0.0", isolated_network=True)
