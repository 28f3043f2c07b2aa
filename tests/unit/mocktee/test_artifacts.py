"""The mock Artifact Registry (issue 29, item 6): repository IAM as Google serves it (only the
project's owners read or write a policy; conditional bindings need version 3 and grant
nothing), ``testIamPermissions`` answers the caller's own permissions, and the launcher's pull
is refused unless the VM's account holds a role with ``downloadArtifacts`` on the repository
or its project (or the repository is public)."""

from __future__ import annotations

import json
from typing import Any

from sealbench.mocktee._http import Request, Response
from sealbench.mocktee.artifacts import MockArtifacts
from sealbench.mocktee.identity import Identity
from sealbench.mocktee.state import MockState
from tests.unit.mocktee.conftest import create_project_with_apis

REPO = "projects/authority/locations/us/repositories/sealbench"
IMAGE = "us-docker.pkg.dev/authority/sealbench/eval@sha256:" + "ab" * 32
RUNNER = "runner@hospital.iam.gserviceaccount.com"


def _call(ar: MockArtifacts, token: str, method: str, path: str, body: Any = None,
          **query: str) -> Response:
    raw = json.dumps(body).encode() if body is not None else b""
    return ar.handle(Request(method, path, path, query,
                             {"authorization": f"Bearer {token}"}, raw))


def _setup(state: MockState, identity: Identity) -> tuple[MockArtifacts, str, str]:
    create_project_with_apis(identity, state, "authority", "100000000001",
                             "user:a@authority.example")
    owner = identity.issue("user:a@authority.example")[0]
    other = identity.issue("user:it@hospital.example")[0]
    ar = MockArtifacts(state, identity)
    created = _call(ar, owner, "POST", "/v1/projects/authority/locations/us/repositories",
                    {"format": "DOCKER"}, repositoryId="sealbench")
    assert created.status == 200 and json.loads(created.body)["done"] is True
    return ar, owner, other


def test_the_pull_needs_a_download_role_for_the_vms_account(
    state: MockState, identity: Identity
) -> None:
    ar, owner, _ = _setup(state, identity)
    refused = ar.pull_refusal(IMAGE, RUNNER)
    assert refused == ('denied: Permission "artifactregistry.repositories.downloadArtifacts" '
                       f'denied on resource "{REPO}" (or it may not exist)')
    assert ar.pull_refusal(IMAGE.replace("/sealbench/", "/missing/"), RUNNER) is not None
    assert ar.pull_refusal("ghcr.io/x/eval@sha256:" + "ab" * 32, RUNNER) is None  # not AR
    condition = {"title": "never", "expression": "false"}
    set_policy = _call(ar, owner, "POST", f"/v1/{REPO}:setIamPolicy", {"policy": {
        "version": 3, "bindings": [{"role": "roles/artifactregistry.reader",
                                    "members": [f"serviceAccount:{RUNNER}"],
                                    "condition": condition}]}})
    assert set_policy.status == 200
    assert ar.pull_refusal(IMAGE, RUNNER) is not None  # a conditional binding grants nothing
    _call(ar, owner, "POST", f"/v1/{REPO}:setIamPolicy", {"policy": {"bindings": [
        {"role": "roles/artifactregistry.reader", "members": [f"serviceAccount:{RUNNER}"]}]}})
    assert ar.pull_refusal(IMAGE, RUNNER) is None
    assert ar.pull_refusal(IMAGE, "other@hospital.iam.gserviceaccount.com") is not None
    _call(ar, owner, "POST", f"/v1/{REPO}:setIamPolicy", {"policy": {"bindings": [
        {"role": "roles/artifactregistry.reader", "members": ["allUsers"]}]}})
    assert ar.pull_refusal(IMAGE, "other@hospital.iam.gserviceaccount.com") is None


def test_only_the_owner_reads_or_writes_the_policy_and_conditions_need_version_3(
    state: MockState, identity: Identity
) -> None:
    ar, owner, other = _setup(state, identity)
    policy = {"bindings": [{"role": "roles/artifactregistry.reader",
                            "members": ["user:it@hospital.example"]}]}
    assert _call(ar, other, "POST", f"/v1/{REPO}:setIamPolicy", {"policy": policy}).status == 403
    assert _call(ar, other, "GET", f"/v1/{REPO}:getIamPolicy").status == 403
    conditional = {"bindings": [{**policy["bindings"][0],
                                 "condition": {"title": "t", "expression": "true"}}]}
    assert _call(ar, owner, "POST", f"/v1/{REPO}:setIamPolicy",
                 {"policy": conditional}).status == 400  # version 1 with a condition
    assert _call(ar, owner, "POST", f"/v1/{REPO}:setIamPolicy",
                 {"policy": {**conditional, "version": 3}}).status == 200
    assert _call(ar, owner, "GET", f"/v1/{REPO}:getIamPolicy").status == 400
    read = _call(ar, owner, "GET", f"/v1/{REPO}:getIamPolicy",
                 **{"options.requestedPolicyVersion": "3"})
    assert json.loads(read.body)["version"] == 3
    # the reader, granted unconditionally, may test its permissions but still not administer
    _call(ar, owner, "POST", f"/v1/{REPO}:setIamPolicy", {"policy": policy})
    asked = ["artifactregistry.repositories.downloadArtifacts",
             "artifactregistry.repositories.setIamPolicy"]
    held = _call(ar, other, "POST", f"/v1/{REPO}:testIamPermissions", {"permissions": asked})
    assert json.loads(held.body) == {"permissions": [asked[0]]}
    assert _call(ar, other, "GET", f"/v1/{REPO}").status == 200
    assert _call(ar, other, "POST", f"/v1/{REPO}:setIamPolicy", {"policy": policy}).status == 403
    created = _call(ar, other, "POST", "/v1/projects/authority/locations/us/repositories",
                    {}, repositoryId="mine")
    assert created.status == 403


def test_the_api_is_off_in_a_new_project_until_enabled(state: MockState,
                                                       identity: Identity) -> None:
    identity.create_project("fresh", "100000000009", "user:a@fresh.example")
    owner = identity.issue("user:a@fresh.example")[0]
    refused = _call(MockArtifacts(state, identity), owner, "POST",
                    "/v1/projects/fresh/locations/us/repositories", {"format": "DOCKER"},
                    repositoryId="sealbench")
    assert refused.status == 403 and b"SERVICE_DISABLED" in refused.body
    assert b"Artifact Registry API has not been used in project 100000000009" in refused.body
