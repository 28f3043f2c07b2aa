"""The mock's INSECURE control endpoint as a web page would reach it: a browser on this machine
can send a cross-site ``text/plain`` POST to 127.0.0.1 without asking first, so the endpoint
answers only JSON requests that name no foreign ``Origin``."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sealbench.mocktee.server import MockCloud

BODY = {"projectId": "victim-project", "projectNumber": "1234", "owner": "user:evil@example.org"}


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MockCloud]:
    with MockCloud(Path(tmp_path_factory.mktemp("mock"))) as running:
        yield running


def _post(cloud: MockCloud, content_type: str, origin: str | None) -> tuple[int, str]:
    headers = {"Content-Type": content_type}
    if origin is not None:
        headers["Origin"] = origin
    request = urllib.request.Request(
        f"{cloud.endpoints.control}/mock/v1/projects", data=json.dumps(BODY).encode(),
        headers=headers, method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _projects(cloud: MockCloud) -> set[str]:
    return set(cloud.state.read().get("projects", {}))


def test_cross_site_text_plain_post_with_foreign_origin_creates_no_project(
    cloud: MockCloud,
) -> None:
    status, body = _post(cloud, "text/plain", "https://evil.example")
    assert status == 403 and "cross-site" in body
    assert "victim-project" not in _projects(cloud)


def test_cross_site_json_post_with_foreign_origin_refused(cloud: MockCloud) -> None:
    status, _ = _post(cloud, "application/json", "https://evil.example")
    assert status == 403
    status, _ = _post(cloud, "application/json", "null")  # a sandboxed page or a file
    assert status == 403
    assert "victim-project" not in _projects(cloud)


def test_text_plain_post_without_origin_refused(cloud: MockCloud) -> None:
    status, body = _post(cloud, "text/plain", None)
    assert status == 415 and "application/json" in body
    assert "victim-project" not in _projects(cloud)


def test_json_post_from_the_mocks_own_clients_still_accepted(cloud: MockCloud) -> None:
    assert _post(cloud, "application/json", None)[0] == 200
    assert _post(cloud, "application/json; charset=utf-8", cloud.endpoints.control)[0] == 200
    assert "victim-project" in _projects(cloud)
