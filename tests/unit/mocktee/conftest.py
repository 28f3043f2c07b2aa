"""Fixtures for the mock's unit tests: a state directory, identity, verifier and request
builder; no sockets unless a test asks for one."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlencode

import pytest

from sealbench.mocktee._http import Request
from sealbench.mocktee.apis import MockProjectApis
from sealbench.mocktee.identity import SERVICE_TITLES, Identity
from sealbench.mocktee.state import MockState
from sealbench.mocktee.verifier import MockVerifier

ISSUER = "http://127.0.0.1:9"


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def create_project_with_apis(
    identity: Identity, state: MockState, project_id: str, number: str, owner: str
) -> None:
    """A project whose owner has enabled every API the mock serves (a new project starts with
    only Google's default APIs on, as at Google)."""
    identity.create_project(project_id, number, owner)
    apis = MockProjectApis(state, identity)
    for service in SERVICE_TITLES:
        apis.set_service(project_id, service, enabled=True)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def state(tmp_path: Path) -> MockState:
    return MockState(tmp_path / "state")


@pytest.fixture
def identity(state: MockState, clock: Clock) -> Identity:
    return Identity(state, clock)


@pytest.fixture
def verifier(state: MockState, clock: Clock) -> MockVerifier:
    return MockVerifier(state, ISSUER, clock=clock)


MakeRequest = Callable[..., Request]


@pytest.fixture
def make_request() -> MakeRequest:
    def build(
        method: str,
        path: str,
        body: object = None,
        token: str | None = None,
        query: dict[str, str] | None = None,
        form: dict[str, str] | None = None,
    ) -> Request:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        if form is not None:
            raw = urlencode(form).encode()
        elif isinstance(body, bytes):
            raw = body
        else:
            raw = json.dumps(body).encode() if body is not None else b""
        return Request(method, path, path, query or {}, headers, raw)

    return build
