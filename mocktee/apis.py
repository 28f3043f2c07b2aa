"""The mock's project-level Google APIs, the ones ``sealbench doctor`` reads and an owner's
``gcloud`` writes: Service Usage (``serviceusage.googleapis.com/v1``), the project IAM policy
of Resource Manager (``cloudresourcemanager.googleapis.com/v1``), IAM service accounts (served
on the mock IAM port, as on ``iam.googleapis.com``) and a token endpoint for
``external_account_authorized_user`` Application Default Credentials (refresh-token grant; a
plain ``authorized_user`` file always refreshes at Google). INSECURE BY
DESIGN, like the rest of the mock.

A new project has only Google's default APIs enabled (:data:`~sealbench.mocktee.identity.
DEFAULT_ENABLED_SERVICES`); the Resource Manager routes answer 403 ``SERVICE_DISABLED`` until
``cloudresourcemanager.googleapis.com`` is enabled in the project they name (Google checks the
caller's quota project; the mock, which has none, checks the project named). Service Usage is
on by default and always answers.

Routes of :class:`MockProjectApis` (bearer token of a project owner, except ``/token``)::

    GET  /v1/projects/{p}/services/{service}              {"name", "state": ENABLED|DISABLED}
    POST /v1/projects/{p}/services/{service}:enable       → finished Operation
    POST /v1/projects/{p}/services/{service}:disable      → finished Operation
    POST /v1/projects/{p}/services:batchEnable            {"serviceIds": [...]} → Operation
    GET  /v1/projects/{p}                                 projects.get: id and number
    POST /v1/projects/{p}:getIamPolicy                    the project policy (owners as roles/owner)
    POST /v1/projects/{p}:setIamPolicy                    {"policy": {...}} (etag checked;
                                                          conditional bindings need version 3,
                                                          are kept and never evaluated, and are
                                                          read back only at version 3)
    POST /v1/projects/{p}:getEffectiveOrgPolicy           {"constraint": C} → the OrgPolicy in
                                                          effect (:mod:`sealbench.mocktee.
                                                          orgpolicy`)
    POST /token                                           grant_type=refresh_token → access token

Routes of :class:`MockServiceAccounts` (on the IAM port)::

    POST /v1/projects/{p}/serviceAccounts                 {"accountId", "serviceAccount": {...}}
    GET  /v1/projects/{p}/serviceAccounts/{email}

Refresh tokens come from the INSECURE control endpoint (``POST /mock/v1/refreshTokens``): the
test stand-in for ``gcloud auth application-default login``. Only their SHA-256 is stored.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any
from urllib.parse import parse_qs

from sealbench.mocktee._http import Request, Response, google_error, json_response
from sealbench.mocktee.identity import (
    ACCESS_TOKEN_LIFETIME_S,
    SERVICE_TITLES,
    Caller,
    Identity,
    condition_refusal,
    version_refusal,
)
from sealbench.mocktee.orgpolicy import effective_policy
from sealbench.mocktee.state import MockState, token_hash

__all__ = ["MockProjectApis", "MockServiceAccounts"]

_SERVICE = re.compile(r"^/v1/projects/([^/]+)/services/([a-z0-9.-]+)(?::(enable|disable))?$")
_BATCH_ENABLE = re.compile(r"^/v1/projects/([^/]+)/services:batchEnable$")
#: Google's limit on the services of one ``batchEnable`` request.
_MAX_BATCH = 20
_CRM = "cloudresourcemanager.googleapis.com"
_PROJECT = re.compile(r"^/v1/projects/([^/:]+)$")
_PROJECT_IAM = re.compile(r"^/v1/projects/([^/:]+):(getIamPolicy|setIamPolicy)$")
_ORG_POLICY = re.compile(r"^/v1/projects/([^/:]+):getEffectiveOrgPolicy$")
_CONSTRAINT = re.compile(r"^constraints/[a-zA-Z0-9.]+$")
_ACCOUNTS = re.compile(r"^/v1/projects/([^/]+)/serviceAccounts(?:/([^/:]+))?$")
_ACCOUNT_ID = re.compile(r"^[a-z]([-a-z0-9]{4,28}[a-z0-9])$")
_REFRESH_PREFIX = "mock-insecure-refresh."
_MAX_BINDINGS = 1500


def _etag(policy: dict[str, Any]) -> str:
    return str(policy.get("etag") or "BwAAAAAAAAA=")


class MockProjectApis:
    """Service Usage, project IAM policies and the OAuth 2.0 token endpoint."""

    def __init__(self, state: MockState, identity: Identity) -> None:
        self._state = state
        self._identity = identity

    def handle(self, request: Request) -> Response:
        if request.path == "/token" and request.method == "POST":
            return self._token(request)
        caller = self._identity.authenticate(request)
        if isinstance(caller, Response):
            return caller
        if m := _SERVICE.match(request.path):
            return self._service(request, caller, *m.groups())
        if (m := _BATCH_ENABLE.match(request.path)) and request.method == "POST":
            return self._batch_enable(request, caller, m.group(1))
        if (m := _PROJECT.match(request.path)) and request.method == "GET":
            if off := self._identity.service_disabled(m.group(1), _CRM):
                return off
            return self._project(caller, m.group(1))
        if (m := _ORG_POLICY.match(request.path)) and request.method == "POST":
            if off := self._identity.service_disabled(m.group(1), _CRM):
                return off
            return self._effective_org_policy(request, caller, m.group(1))
        if m := _PROJECT_IAM.match(request.path):
            if request.method != "POST":
                return google_error(404, f"{request.method} {request.path} not found")
            if off := self._identity.service_disabled(m.group(1), _CRM):
                return off
            return self._project_iam(request, caller, m.group(1), m.group(2))
        return google_error(404, f"{request.method} {request.path} is not served by the mock")

    # -- Resource Manager: organisation policies --------------------------------------------

    def _effective_org_policy(self, request: Request, caller: Caller, project: str) -> Response:
        resolved = self._identity.resolve_project(project)
        if resolved is None or not self._identity.is_owner(caller, project):
            return google_error(
                403, f"Permission 'orgpolicy.policy.get' denied on resource "
                f"'//cloudresourcemanager.googleapis.com/projects/{project}' (or it may not "
                "exist).")
        try:
            constraint = json.loads(request.body or b"{}").get("constraint", "")
        except (ValueError, AttributeError):
            return google_error(400, "Invalid JSON payload received.")
        if not isinstance(constraint, str) or not _CONSTRAINT.match(constraint):
            return google_error(400, f"Invalid constraint name {str(constraint)[:80]!r}.")
        return json_response(200, effective_policy(self._state.read(), resolved[0], constraint))

    # -- Service Usage -----------------------------------------------------------------------

    def _service(
        self, request: Request, caller: Caller, project: str, service: str, verb: str | None
    ) -> Response:
        resolved = self._identity.resolve_project(project)
        if resolved is None or not self._identity.is_owner(caller, project):
            return google_error(
                403, f"Permission denied to get service [{service}] of project {project}."
            )
        project_id, number = resolved
        name = f"projects/{number}/services/{service}"
        if service not in SERVICE_TITLES:
            return google_error(404, f"Service {service} not found or permission denied.")
        if verb is None:
            if request.method != "GET":
                return google_error(404, f"{request.method} {request.path} not found")
            disabled = self._state.read()["disabled_services"].get(project_id, [])
            state = "DISABLED" if service in disabled else "ENABLED"
            return json_response(200, {"name": name, "parent": f"projects/{number}",
                                       "config": {"name": service,
                                                  "title": SERVICE_TITLES[service]},
                                       "state": state})
        if request.method != "POST":
            return google_error(404, f"{request.method} {request.path} not found")
        self.set_service(project_id, service, enabled=verb == "enable")
        return json_response(200, {"name": f"operations/mock.{secrets.token_hex(8)}",
                                   "done": True})

    def _batch_enable(self, request: Request, caller: Caller, project: str) -> Response:
        """``services:batchEnable`` (what ``gcloud services enable A B C`` sends): all or
        nothing, at most 20 services."""
        resolved = self._identity.resolve_project(project)
        if resolved is None or not self._identity.is_owner(caller, project):
            return google_error(
                403, f"Permission denied to enable services of project {project}."
            )
        body = request.json()
        ids = body.get("serviceIds") if isinstance(body, dict) else None
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
            return google_error(400, "serviceIds must be a non-empty list of service names.")
        if len(ids) > _MAX_BATCH:
            return google_error(400, f"At most {_MAX_BATCH} services can be enabled at once.")
        unknown = [i for i in ids if i not in SERVICE_TITLES]
        if unknown:
            return google_error(404, f"Service {unknown[0]} not found or permission denied.")
        for service in ids:
            self.set_service(resolved[0], service, enabled=True)
        return json_response(200, {"name": f"operations/mock.{secrets.token_hex(8)}",
                                   "done": True})

    def set_service(self, project_id: str, service: str, *, enabled: bool) -> None:
        """Enable or disable ``service`` in ``project_id`` (what ``gcloud services`` does)."""
        with self._state.edit() as doc:
            disabled = set(doc["disabled_services"].get(project_id, []))
            if enabled:
                disabled.discard(service)
            else:
                disabled.add(service)
            doc["disabled_services"][project_id] = sorted(disabled)

    # -- projects.get --------------------------------------------------------------------------

    def _project(self, caller: Caller, project: str) -> Response:
        resolved = self._identity.resolve_project(project)
        if resolved is None or not self._identity.is_owner(caller, project):
            return google_error(
                403, f"The caller does not have permission resourcemanager.projects.get on "
                f"projects/{project}"
            )
        return json_response(200, {"projectId": resolved[0], "projectNumber": resolved[1],
                                   "name": resolved[0], "lifecycleState": "ACTIVE"})

    # -- project IAM policy ------------------------------------------------------------------

    def _project_iam(self, request: Request, caller: Caller, project: str, verb: str) -> Response:
        resolved = self._identity.resolve_project(project)
        if resolved is None or not self._identity.is_owner(caller, project):
            return google_error(
                403,
                f"The caller does not have permission resourcemanager.projects.{verb} on "
                f"projects/{project}",
            )
        project_id = resolved[0]
        body = request.json()
        if verb == "getIamPolicy":  # a conditional binding is read at version 3 only
            options = body.get("options") if isinstance(body, dict) else None
            requested = (options if isinstance(options, dict) else {}).get(
                "requestedPolicyVersion", 0)
            found = self.project_policy(project_id)
            refused = version_refusal(found["bindings"], requested if isinstance(
                requested, int) else -1)
            return google_error(400, refused) if refused else json_response(200, found)
        policy = body.get("policy") if isinstance(body, dict) else None
        if not isinstance(policy, dict) or not isinstance(policy.get("bindings", []), list):
            return google_error(400, "Invalid JSON payload: policy.bindings must be a list.")
        bindings = [
            {"role": str(b["role"]), "members": sorted({str(m) for m in b["members"]}),
             **({"condition": b["condition"]} if "condition" in b else {})}
            for b in policy.get("bindings", [])
            if isinstance(b, dict) and b.get("role") != "roles/owner" and b.get("members")
        ]
        refused = condition_refusal(bindings, policy.get("version", 1))
        if refused:  # kept, never evaluated: a conditional binding grants nothing here
            return google_error(400, refused)
        if len(bindings) > _MAX_BINDINGS:
            return google_error(400, "The policy has too many bindings.")
        with self._state.edit() as doc:
            current = doc["project_iam"].get(project_id, {})
            if policy.get("etag") and policy["etag"] != _etag(current):
                return google_error(409, "There were concurrent policy changes.", "ABORTED")
            serial = int(current.get("serial", 0)) + 1
            doc["project_iam"][project_id] = {
                "bindings": bindings, "serial": serial,
                "etag": f"BwY{serial:09d}=",
            }
        return json_response(200, self.project_policy(project_id))

    def project_policy(self, project_id: str) -> dict[str, Any]:
        doc = self._state.read()
        stored = doc["project_iam"].get(project_id, {})
        owners = doc["projects"].get(project_id, {}).get("owners", [])
        bindings = [{"role": "roles/owner", "members": sorted(owners)}] if owners else []
        kept = list(stored.get("bindings", []))
        return {"version": 3 if any("condition" in b for b in kept) else 1,
                "etag": _etag(stored), "bindings": bindings + kept}

    # -- token endpoint (external_account_authorized_user ADC) ------------------------------

    def issue_refresh_token(self, principal: str) -> str:
        """A refresh token for ``principal`` (``user:EMAIL``). INSECURE: the control endpoint
        hands one to anyone who can reach the mock."""
        if not principal.startswith("user:"):
            raise ValueError("refresh tokens are for user:EMAIL principals")
        token = _REFRESH_PREFIX + secrets.token_urlsafe(32)
        with self._state.edit() as doc:
            doc["refresh_tokens"][token_hash(token)] = principal
        return token

    def _token(self, request: Request) -> Response:
        form = {k: v[-1] for k, v in parse_qs(request.body.decode("utf-8", "replace")).items()}
        refresh = form.get("refresh_token", "")
        principal = self._state.read()["refresh_tokens"].get(token_hash(refresh))
        if form.get("grant_type") != "refresh_token" or principal is None:
            return json_response(400, {"error": "invalid_grant",
                                       "error_description": "Bad Request"})
        token, lifetime = self._identity.issue(principal)
        return json_response(200, {"access_token": token, "token_type": "Bearer",
                                   "expires_in": min(lifetime, ACCESS_TOKEN_LIFETIME_S),
                                   "scope": form.get("scope", "")})


class MockServiceAccounts:
    """IAM service accounts of a project (create and get): what ``doctor`` looks up for the
    runner's account and an owner creates with ``gcloud iam service-accounts create``."""

    def __init__(self, state: MockState, identity: Identity) -> None:
        self._state = state
        self._identity = identity

    @staticmethod
    def matches(path: str) -> bool:
        return _ACCOUNTS.match(path) is not None

    def handle(self, request: Request) -> Response:
        caller = self._identity.authenticate(request)
        if isinstance(caller, Response):
            return caller
        m = _ACCOUNTS.match(request.path)
        assert m is not None
        project, email = m.groups()
        resolved = self._identity.resolve_project(project)
        if resolved is None or not self._identity.is_owner(caller, project):
            return google_error(
                403, f"Permission 'iam.serviceAccounts.get' denied on resource "
                f"(or it may not exist): projects/{project}."
            )
        project_id, number = resolved
        if email is None and request.method == "POST":
            body = request.json()
            account_id = str(body.get("accountId", "")) if isinstance(body, dict) else ""
            if not _ACCOUNT_ID.match(account_id):
                return google_error(400, "accountId must match [a-z]([-a-z0-9]*[a-z0-9]), "
                                         "6-30 characters.")
            shown = (body.get("serviceAccount") or {}).get("displayName", "")
            return self.create(project_id, number, account_id, str(shown))
        if email is not None and request.method == "GET":
            account = self._state.read()["service_accounts"].get(email)
            if account is None or account["projectId"] != project_id:
                return google_error(404, f"Unknown service account {email}")
            return json_response(200, account)
        return google_error(404, f"{request.method} {request.path} not found")

    def create(self, project_id: str, number: str, account_id: str, shown: str) -> Response:
        email = f"{account_id}@{project_id}.iam.gserviceaccount.com"
        account = {
            "name": f"projects/{project_id}/serviceAccounts/{email}",
            "projectId": project_id,
            "uniqueId": str(10**20 + secrets.randbelow(10**20)),
            "email": email,
            "displayName": shown,
            "oauth2ClientId": str(10**20 + secrets.randbelow(10**20)),
        }
        with self._state.edit() as doc:
            if email in doc["service_accounts"]:
                return google_error(409, f"Service account {account_id} already exists within "
                                         f"project projects/{project_id}.", "ALREADY_EXISTS")
            doc["service_accounts"][email] = account
        return json_response(200, account)
