"""The mock Artifact Registry: repositories and their IAM policies, which decide whether a mock
Confidential Space VM may pull its image (:func:`MockArtifacts.pull_refusal`, asked by
:mod:`sealbench.mocktee._compute_vm` at boot). INSECURE BY DESIGN: there are no images here;
a "pull" is only the permission check the real launcher's pull meets.

Routes (``artifactregistry.googleapis.com/v1``, served on the mock's Compute port; bearer token)::

    POST /v1/projects/P/locations/L/repositories?repositoryId=R   create (project owner) → done
                                                                  Operation with the repository
    GET  /v1/projects/P/locations/L/repositories/R                get (owner, or a role on it)
    GET  …/repositories/R:getIamPolicy[?options.requestedPolicyVersion=3]   (project owner)
    POST …/repositories/R:setIamPolicy  {"policy": …}             (project owner)
    POST …/repositories/R:testIamPermissions  {"permissions": […]}   the caller's own

As on Google Cloud, only who may administer the repository (here: the project's owners) reads
or writes its policy; conditional bindings need version 3 and are stored, never evaluated
(they grant nothing here). ``artifactregistry.repositories.downloadArtifacts`` comes from
:data:`DOWNLOAD_ROLES` bound on the repository or on its project, to the account itself or to
``allUsers``/``allAuthenticatedUsers`` (a public repository). Repositories live in memory only.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
from collections.abc import Iterable
from typing import Any, Final

from sealbench.mocktee._http import Request, Response, google_error, json_response
from sealbench.mocktee.identity import (
    Caller,
    Identity,
    condition_refusal,
    has_role,
    version_refusal,
)
from sealbench.mocktee.state import MockState

__all__ = ["DOWNLOAD_PERMISSION", "DOWNLOAD_ROLES", "MockArtifacts", "repository_of"]

DOWNLOAD_PERMISSION: Final = "artifactregistry.repositories.downloadArtifacts"
_READ = ("artifactregistry.repositories.get", DOWNLOAD_PERMISSION)
_WRITE = (*_READ, "artifactregistry.repositories.uploadArtifacts")
_ADMIN = (*_WRITE, "artifactregistry.repositories.delete",
          "artifactregistry.repositories.getIamPolicy",
          "artifactregistry.repositories.setIamPolicy")
#: Role → the repository permissions it holds (the predefined roles that matter here).
_ROLE_PERMISSIONS: Final = {
    "roles/artifactregistry.reader": _READ,
    "roles/artifactregistry.writer": _WRITE,
    "roles/artifactregistry.repoAdmin": _ADMIN[:-2],
    "roles/artifactregistry.admin": _ADMIN,
    "roles/editor": _WRITE,
    "roles/owner": _ADMIN,
}
#: The roles that hold ``downloadArtifacts``.
DOWNLOAD_ROLES: Final = tuple(r for r, p in _ROLE_PERMISSIONS.items() if DOWNLOAD_PERMISSION in p)
_PUBLIC: Final = frozenset({"allUsers", "allAuthenticatedUsers"})
_ROUTE = re.compile(
    r"^/v1/projects/(?P<project>[^/]+)/locations/(?P<location>[a-z0-9-]+)/repositories"
    r"(?:/(?P<repository>[a-z0-9._-]+)(?::(?P<verb>getIamPolicy|setIamPolicy|"
    r"testIamPermissions))?)?$"
)
_ID = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")
_REFERENCE = re.compile(
    r"^(?P<location>[a-z0-9-]+)-docker\.pkg\.dev/(?P<project>[a-z0-9.:-]+)/"
    r"(?P<repository>[a-z0-9._-]+)/"
)


def repository_of(reference: str) -> str | None:
    """``projects/P/locations/L/repositories/R`` of an Artifact Registry image reference
    (``L-docker.pkg.dev/P/R/IMAGE…``), None for any other registry."""
    found = _REFERENCE.match(reference)
    if found is None:
        return None
    return (f"projects/{found['project']}/locations/{found['location']}/repositories/"
            f"{found['repository']}")


class MockArtifacts:
    """Artifact Registry repositories and their IAM policies (in memory)."""

    def __init__(self, state: MockState, identity: Identity) -> None:
        self._state = state
        self._identity = identity
        self._lock = threading.Lock()
        #: repository name → {"repository": resource JSON, "bindings": [...], "etag": str}
        self._repositories: dict[str, dict[str, Any]] = {}

    def handles(self, path: str) -> bool:
        return _ROUTE.match(path) is not None

    # -- the launcher's pull ---------------------------------------------------------------

    def pull_refusal(self, reference: str, service_account: str) -> str | None:
        """Why the launcher of a VM running as ``service_account`` cannot pull ``reference``
        (the registry's answer, as the launcher logs it), None when it may. A reference outside
        Artifact Registry is not checked (the mock has no other registry)."""
        name = repository_of(reference)
        if name is None:
            return None
        member = f"serviceAccount:{service_account}"
        caller = Caller(member, frozenset({member, *_PUBLIC}))
        with self._lock:
            found = self._repositories.get(name)
            bindings = list(found["bindings"]) if found else []
        project = name.split("/")[1]
        project_policy = self._state.read()["project_iam"].get(project, {})
        if found is not None and (
            has_role({"bindings": bindings}, caller, DOWNLOAD_ROLES)
            or has_role(project_policy, caller, DOWNLOAD_ROLES)
        ):
            return None
        return (f'denied: Permission "{DOWNLOAD_PERMISSION}" denied on resource "{name}" '
                "(or it may not exist)")

    def grant(self, reference: str, member: str,
              role: str = "roles/artifactregistry.reader") -> str:
        """Out of band, what the image's owner does with ``gcloud artifacts repositories
        create`` (if need be) and ``add-iam-policy-binding``: ``member`` gets ``role`` on the
        repository of ``reference``; its name returned. For tests and the demo (INSECURE: no
        caller is checked)."""
        name = repository_of(reference)
        if name is None:
            raise ValueError(f"{reference[:100]!r} is not an Artifact Registry image reference")
        with self._lock:
            found = self._repositories.setdefault(name, {
                "repository": {"name": name, "format": "DOCKER", "mode": "STANDARD_REPOSITORY",
                               "description": ""},
                "bindings": [], "etag": _etag()})
            for binding in found["bindings"]:
                if binding["role"] == role and "condition" not in binding:
                    binding["members"] = sorted({*binding["members"], member})
                    break
            else:
                found["bindings"].append({"role": role, "members": [member]})
            found["etag"] = _etag()
        return name

    # -- REST ------------------------------------------------------------------------------

    def handle(self, request: Request) -> Response:
        route = _ROUTE.match(request.path)
        if route is None:
            return google_error(404, f"{request.method} {request.path} not found")
        caller = self._identity.authenticate(request)
        if isinstance(caller, Response):
            return caller
        resolved = self._identity.resolve_project(route["project"])
        if resolved is None:
            return google_error(403, f"Permission denied on resource project "
                                f"{route['project']} (or it may not exist).")
        off = self._identity.service_disabled(resolved[0], "artifactregistry.googleapis.com")
        if off is not None:
            return off
        base = f"projects/{resolved[0]}/locations/{route['location']}/repositories"
        owner = self._identity.is_owner(caller, resolved[0])
        if route["repository"] is None:
            if request.method != "POST":
                return google_error(404, f"{request.method} {request.path} not served here")
            if not owner:
                return _denied("artifactregistry.repositories.create", base)
            return self._create(request, base)
        name = f"{base}/{route['repository']}"
        verb = route["verb"]
        if verb == "testIamPermissions" and request.method == "POST":
            return self._test(request, caller, name, owner)
        with self._lock:
            found = self._repositories.get(name)
        allowed = owner or (found is not None and self._holds(caller, name, found["bindings"],
                                                              "artifactregistry.repositories.get"))
        if found is None or not allowed:
            return _denied(f"artifactregistry.repositories.{verb or 'get'}", name)
        if verb is None and request.method == "GET":
            return json_response(200, found["repository"])
        if not owner:
            return _denied(f"artifactregistry.repositories.{verb}", name)
        if verb == "getIamPolicy" and request.method == "GET":
            return self._get_policy(request, found)
        if verb == "setIamPolicy" and request.method == "POST":
            return self._set_policy(request, name)
        return google_error(404, f"{request.method} {request.path} not served here")

    def _create(self, request: Request, base: str) -> Response:
        repository_id = request.query.get("repositoryId", "")
        if not _ID.match(repository_id):
            return google_error(400, "Invalid repository id: it must match "
                                "[a-z]([a-z0-9-]*[a-z0-9])?.")
        body = _body(request)
        name = f"{base}/{repository_id}"
        repository = {"name": name, "format": str(body.get("format", "DOCKER")),
                      "mode": "STANDARD_REPOSITORY",
                      "description": str(body.get("description", ""))}
        with self._lock:
            if name in self._repositories:
                return google_error(409, f"the repository already exists: {name}",
                                    "ALREADY_EXISTS")
            self._repositories[name] = {"repository": repository, "bindings": [],
                                        "etag": _etag()}
        return json_response(200, {
            "name": f"{base.rsplit('/', 1)[0]}/operations/{secrets.token_hex(8)}",
            "done": True,
            "response": {"@type": "type.googleapis.com/google.devtools.artifactregistry.v1."
                                  "Repository", **repository},
        })

    def _get_policy(self, request: Request, found: dict[str, Any]) -> Response:
        try:
            requested = int(request.query.get("options.requestedPolicyVersion", "0"))
        except ValueError:
            return google_error(400, "Invalid requested policy version.")
        refused = version_refusal(found["bindings"], requested)
        if refused:
            return google_error(400, refused)
        return json_response(200, _policy(found))

    def _set_policy(self, request: Request, name: str) -> Response:
        policy = _body(request).get("policy")
        if not isinstance(policy, dict) or not isinstance(policy.get("bindings", []), list):
            return google_error(400, "Invalid JSON payload: policy.bindings must be a list.")
        bindings = [b for b in policy.get("bindings", []) if isinstance(b, dict)]
        if any(not isinstance(b.get("role"), str) or not b.get("members") for b in bindings):
            return google_error(400, "A binding needs a role and at least one member.")
        refused = condition_refusal(bindings, policy.get("version", 1))
        if refused:
            return google_error(400, refused)
        with self._lock:
            found = self._repositories[name]
            if policy.get("etag") and policy["etag"] != found["etag"]:
                return google_error(409, "There were concurrent policy changes.", "ABORTED")
            found["bindings"] = [
                {"role": b["role"], "members": sorted({str(m) for m in b["members"]}),
                 **({"condition": b["condition"]} if "condition" in b else {})}
                for b in bindings
            ]
            found["etag"] = _etag()
            return json_response(200, _policy(found))

    def _test(self, request: Request, caller: Caller, name: str, owner: bool) -> Response:
        asked = _body(request).get("permissions", [])
        if not isinstance(asked, list):
            return google_error(400, "permissions must be a list")
        with self._lock:
            found = self._repositories.get(name)
            bindings = list(found["bindings"]) if found else []
        if found is None:
            return _denied("artifactregistry.repositories.get", name)
        held = [p for p in asked if isinstance(p, str)
                and (owner or self._holds(caller, name, bindings, p))]
        return json_response(200, {"permissions": held} if held else {})

    def _holds(self, caller: Caller, name: str, bindings: Iterable[dict[str, Any]],
               permission: str) -> bool:
        roles = [r for r, p in _ROLE_PERMISSIONS.items() if permission in p]
        who = Caller(caller.principal, caller.members | _PUBLIC)
        project_policy = self._state.read()["project_iam"].get(name.split("/")[1], {})
        return has_role({"bindings": list(bindings)}, who, roles) or has_role(
            project_policy, who, roles)


def _policy(found: dict[str, Any]) -> dict[str, Any]:
    conditional = any("condition" in b for b in found["bindings"])
    return {"version": 3 if conditional else 1, "etag": found["etag"],
            "bindings": [dict(b) for b in found["bindings"]]}


def _body(request: Request) -> dict[str, Any]:
    try:
        body = request.json()
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return body if isinstance(body, dict) else {}


def _denied(permission: str, resource: str) -> Response:
    return google_error(403, f"Permission '{permission}' denied on resource '{resource}' "
                        "(or it may not exist).")


def _etag() -> str:
    return "BwY" + secrets.token_urlsafe(9)
