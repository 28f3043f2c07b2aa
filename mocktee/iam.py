"""The mock IAM API for workload identity pools and their OIDC providers — the REST surface of
``iam.googleapis.com/v1 projects.locations.workloadIdentityPools[.providers]`` that the policy
writer uses: create (returns a finished long-running Operation), get, list, patch with
``updateMask``, delete, ``:undelete`` and operations.get. Only a project owner may call it.
Provider fields are validated as Google does (``google.subject`` mapped, attribute names
``[a-z0-9_]``, expressions that compile as CEL, at most 50 custom attributes).

Deletion is soft, as at Google: a deleted pool or provider stays readable with ``state:
DELETED`` and an ``expireTime`` 30 days on, its ID cannot be reused until then (create answers
409 ``ALREADY_EXISTS``), ``:undelete`` restores it, lists leave it out unless
``showDeleted=true``, patching it is refused, and the STS refuses to exchange tokens through it
(or through any provider of a deleted pool). Once ``expireTime`` has passed it is purged for
good and the ID is free again."""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sealbench.mocktee._http import Request, Response, google_error, json_response
from sealbench.mocktee.apis import MockServiceAccounts
from sealbench.mocktee.cel import CelError, check_expression
from sealbench.mocktee.identity import Caller, Identity
from sealbench.mocktee.state import MockState

__all__ = ["SOFT_DELETE_S", "MockIam", "is_deleted"]

#: How long Google keeps a deleted workload identity pool or provider (its ID reserved) before
#: purging it: 30 days.
SOFT_DELETE_S = 30 * 24 * 3600

_POOLS = re.compile(r"^/v1/projects/([^/]+)/locations/global/workloadIdentityPools$")
_POOL = re.compile(
    r"^/v1/projects/([^/]+)/locations/global/workloadIdentityPools/([^/:]+)(?::(undelete))?$"
)
_PROVIDERS = re.compile(
    r"^/v1/projects/([^/]+)/locations/global/workloadIdentityPools/([^/]+)/providers$"
)
_PROVIDER = re.compile(
    r"^/v1/projects/([^/]+)/locations/global/workloadIdentityPools/([^/]+)/providers/([^/:]+)"
    r"(?::(undelete))?$"
)
_OPERATION = re.compile(
    r"^/v1/(projects/[^/]+/locations/global/workloadIdentityPools/.+/operations/[^/]+)$"
)
_ID = re.compile(r"^[a-z0-9-]{4,32}$")
_ATTRIBUTE_KEY = re.compile(r"^(google\.subject|google\.groups|attribute\.[a-z0-9_]{1,100})$")
_PROVIDER_FIELDS = {
    "displayName",
    "description",
    "disabled",
    "attributeMapping",
    "attributeCondition",
    "oidc",
    "name",
    "state",
}
_POOL_FIELDS = {"displayName", "description", "disabled", "name", "state"}
_POOL_TYPE = "type.googleapis.com/google.iam.v1.WorkloadIdentityPool"
_PROVIDER_TYPE = "type.googleapis.com/google.iam.v1.WorkloadIdentityPoolProvider"


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def is_deleted(resource: dict[str, Any] | None) -> bool:
    """Whether a stored pool or provider is soft-deleted (``state: DELETED``)."""
    return resource is not None and resource.get("state") == "DELETED"


def _purge_expired(doc: dict[str, Any], now: float) -> None:
    """Drop the pools and providers whose 30 days as DELETED have passed (their IDs free)."""
    purged: set[str] = set()
    for section in ("pools", "providers"):
        for name in [
            n for n, r in doc[section].items()
            if is_deleted(r) and float(r.get("purgeAt", 0)) <= now
        ]:
            del doc[section][name]
            purged.add(name)
    for name in [n for n in doc["providers"] if n.split("/providers/")[0] in purged]:
        del doc["providers"][name]


def _public(resource: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in resource.items() if k != "purgeAt"}


def _validate_provider(body: dict[str, Any]) -> str | None:
    """A reason the provider body is invalid, or None."""
    unknown = set(body) - _PROVIDER_FIELDS
    if unknown:
        return f"Invalid JSON payload received. Unknown name {sorted(unknown)[0]!r}."
    mapping = body.get("attributeMapping") or {}
    if not isinstance(mapping, dict) or "google.subject" not in mapping:
        return "attribute_mapping must contain a mapping for 'google.subject'."
    if sum(1 for k in mapping if k.startswith("attribute.")) > 50:
        return "attribute_mapping may define at most 50 custom attributes."
    for key, expression in mapping.items():
        if not _ATTRIBUTE_KEY.match(key):
            return f"Invalid attribute mapping key {key!r}."
        if not isinstance(expression, str) or not 0 < len(expression) <= 2048:
            return f"The attribute mapping for {key!r} must be 1-2048 characters."
        try:
            check_expression(expression)
        except CelError as exc:
            return f"The attribute mapping for {key!r} is not valid CEL: {exc}"
    condition = body.get("attributeCondition")
    if condition is not None:
        if not isinstance(condition, str) or len(condition) > 4096:
            return "attribute_condition must be a string of at most 4096 characters."
        if condition:
            try:
                check_expression(condition)
            except CelError as exc:
                return f"attribute_condition is not valid CEL: {exc}"
    oidc = body.get("oidc")
    if not isinstance(oidc, dict) or not isinstance(oidc.get("issuerUri"), str):
        return "oidc.issuer_uri is required."
    issuer = oidc["issuerUri"]
    if not (issuer.startswith("https://") or issuer.startswith("http://127.0.0.1:")):
        return "oidc.issuer_uri must be an https URL (the mock also allows http://127.0.0.1)."
    audiences = oidc.get("allowedAudiences", [])
    if not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences):
        return "oidc.allowed_audiences must be a list of strings."
    return None


class MockIam:
    """``handle(request)`` serves the workload identity pool and provider endpoints."""

    def __init__(
        self, state: MockState, identity: Identity, clock: Callable[[], float] = time.time
    ) -> None:
        self._state = state
        self._identity = identity
        self._clock = clock
        self.accounts = MockServiceAccounts(state, identity)

    def _owner(self, request: Request, project: str) -> tuple[Caller, str] | Response:
        caller = self._identity.authenticate(request)
        if isinstance(caller, Response):
            return caller
        resolved = self._identity.resolve_project(project)
        if resolved is None or not self._identity.is_owner(caller, project):
            return google_error(
                403,
                f"Permission 'iam.workloadIdentityPools.*' denied on resource "
                f"'projects/{project}' (or it may not exist).",
            )
        return caller, resolved[1]

    def handle(self, request: Request) -> Response:
        path, method = request.path, request.method
        project = re.match(r"^/v1/projects/([^/]+)/", path)
        if project and (off := self._identity.service_disabled(
                project.group(1), "iam.googleapis.com")):
            return off
        if MockServiceAccounts.matches(path):
            return self.accounts.handle(request)
        if m := _OPERATION.match(path):
            return json_response(200, {"name": m.group(1), "done": True})
        for pattern, handler in (
            (_POOLS, self._pools),
            (_POOL, self._pool),
            (_PROVIDERS, self._providers),
            (_PROVIDER, self._provider),
        ):
            if m := pattern.match(path):
                owner = self._owner(request, m.group(1))
                if isinstance(owner, Response):
                    return owner
                base = f"projects/{owner[1]}/locations/global/workloadIdentityPools"
                return handler(request, base, *m.groups()[1:])
        return google_error(404, f"{method} {path} is not served by the mock IAM API")

    def _operation(self, resource: str, value: dict[str, Any], type_url: str) -> Response:
        return json_response(
            200,
            {
                "name": f"{resource}/operations/{secrets.token_hex(8)}",
                "done": True,
                "response": {"@type": type_url, **_public(value)},
            },
        )

    def _pools(self, request: Request, base: str) -> Response:
        if request.method != "POST":
            return google_error(404, "only pool creation is served here")
        pool_id = request.query.get("workloadIdentityPoolId", "")
        if not _ID.match(pool_id):
            return google_error(400, "workload_identity_pool_id must match [a-z0-9-]{4,32}.")
        body = request.json()
        if not isinstance(body, dict) or set(body) - _POOL_FIELDS:
            return google_error(400, "Invalid JSON payload received for the pool.")
        name = f"{base}/{pool_id}"
        pool = {
            "name": name,
            "displayName": str(body.get("displayName", "")),
            "description": str(body.get("description", "")),
            "disabled": bool(body.get("disabled", False)),
            "state": "ACTIVE",
        }
        with self._state.edit() as doc:
            _purge_expired(doc, self._clock())
            if name in doc["pools"]:
                return _already_exists(name, doc["pools"][name])
            doc["pools"][name] = pool
        return self._operation(name, pool, _POOL_TYPE)

    def _pool(self, request: Request, base: str, pool_id: str, verb: str | None) -> Response:
        name = f"{base}/{pool_id}"
        if verb == "undelete" and request.method == "POST":
            return self._undelete("pools", name, _POOL_TYPE)
        if verb is None and request.method == "DELETE":
            return self._delete("pools", name, _POOL_TYPE)
        if verb is not None or request.method != "GET":
            return google_error(404, f"{request.method} {request.path} is not served here")
        with self._state.edit() as doc:
            _purge_expired(doc, self._clock())
            pool = doc["pools"].get(name)
        if pool is None:
            return google_error(404, f"Requested entity was not found: {name}")
        return json_response(200, _public(pool))

    def _delete(self, section: str, name: str, type_url: str) -> Response:
        """Soft delete: ``state: DELETED`` and ``expireTime`` 30 days on (Google's behaviour)."""
        now = self._clock()
        with self._state.edit() as doc:
            _purge_expired(doc, now)
            resource = doc[section].get(name)
            if resource is None or is_deleted(resource):
                return google_error(404, f"Requested entity was not found: {name}")
            resource = {**resource, "state": "DELETED", "expireTime": _rfc3339(now + SOFT_DELETE_S),
                        "purgeAt": now + SOFT_DELETE_S}
            doc[section][name] = resource
        return self._operation(name, resource, type_url)

    def _undelete(self, section: str, name: str, type_url: str) -> Response:
        with self._state.edit() as doc:
            _purge_expired(doc, self._clock())
            resource = doc[section].get(name)
            if resource is None:
                return google_error(404, f"Requested entity was not found: {name}")
            if not is_deleted(resource):
                return google_error(
                    400, f"{name} is not deleted: only a DELETED resource can be undeleted.",
                    "FAILED_PRECONDITION",
                )
            pool = doc["pools"].get(name.split("/providers/")[0])
            if section == "providers" and is_deleted(pool):
                return google_error(
                    400, "The pool of this provider is deleted: undelete the pool first.",
                    "FAILED_PRECONDITION",
                )
            resource = {
                k: v for k, v in resource.items() if k not in ("expireTime", "purgeAt")
            }
            resource["state"] = "ACTIVE"
            doc[section][name] = resource
        return self._operation(name, resource, type_url)

    def _providers(self, request: Request, base: str, pool_id: str) -> Response:
        pool_name = f"{base}/{pool_id}"
        if request.method == "GET":
            with self._state.edit() as doc:
                _purge_expired(doc, self._clock())
                providers = dict(doc["providers"])
            show_deleted = request.query.get("showDeleted", "").lower() == "true"
            found = [
                _public(p) for n, p in sorted(providers.items())
                if n.startswith(pool_name + "/") and (show_deleted or not is_deleted(p))
            ]
            return json_response(200, {"workloadIdentityPoolProviders": found})
        if request.method != "POST":
            return google_error(404, "unsupported method")
        provider_id = request.query.get("workloadIdentityPoolProviderId", "")
        if not _ID.match(provider_id):
            return google_error(
                400, "workload_identity_pool_provider_id must match [a-z0-9-]{4,32}."
            )
        body = request.json()
        if not isinstance(body, dict):
            return google_error(400, "Invalid JSON payload received.")
        reason = _validate_provider(body)
        if reason:
            return google_error(400, reason)
        name = f"{pool_name}/providers/{provider_id}"
        provider = {
            **{k: v for k, v in body.items() if k not in ("name", "state")},
            "name": name,
            "state": "ACTIVE",
        }
        provider.setdefault("disabled", False)
        with self._state.edit() as doc:
            _purge_expired(doc, self._clock())
            if pool_name not in doc["pools"]:
                return google_error(404, f"Requested entity was not found: {pool_name}")
            if is_deleted(doc["pools"][pool_name]):
                return google_error(
                    400, f"The pool {pool_name} is deleted: no provider can be added to it.",
                    "FAILED_PRECONDITION",
                )
            if name in doc["providers"]:
                return _already_exists(name, doc["providers"][name])
            doc["providers"][name] = provider
        return self._operation(name, provider, _PROVIDER_TYPE)

    def _provider(
        self, request: Request, base: str, pool_id: str, provider_id: str, verb: str | None
    ) -> Response:
        name = f"{base}/{pool_id}/providers/{provider_id}"
        if verb == "undelete" and request.method == "POST":
            return self._undelete("providers", name, _PROVIDER_TYPE)
        if verb is None and request.method == "DELETE":
            return self._delete("providers", name, _PROVIDER_TYPE)
        if verb is not None:
            return google_error(404, f"{request.method} {request.path} is not served here")
        if request.method == "GET":
            with self._state.edit() as doc:
                _purge_expired(doc, self._clock())
                provider = doc["providers"].get(name)
            if provider is None:
                return google_error(404, f"Requested entity was not found: {name}")
            return json_response(200, _public(provider))
        if request.method != "PATCH":
            return google_error(404, "unsupported method")
        mask = [f for f in request.query.get("updateMask", "").split(",") if f]
        body = request.json()
        if not mask or not isinstance(body, dict):
            return google_error(400, "update_mask is required.")
        allowed = {
            "displayName",
            "description",
            "disabled",
            "attributeMapping",
            "attributeCondition",
            "oidc",
        }
        if set(mask) - allowed:
            return google_error(400, f"Invalid update_mask field {sorted(set(mask) - allowed)[0]}.")
        with self._state.edit() as doc:
            _purge_expired(doc, self._clock())
            current = doc["providers"].get(name)
            if current is None:
                return google_error(404, f"Requested entity was not found: {name}")
            if is_deleted(current):
                return google_error(
                    400, f"{name} is deleted: undelete it before updating it.",
                    "FAILED_PRECONDITION",
                )
            updated = dict(current)
            for field in mask:
                if field in body:
                    updated[field] = body[field]
                else:
                    updated.pop(field, None)
            reason = _validate_provider(updated)
            if reason:
                return google_error(400, reason)
            doc["providers"][name] = updated
        return self._operation(name, updated, _PROVIDER_TYPE)


def _already_exists(name: str, existing: dict[str, Any]) -> Response:
    """Google's 409 for a taken ID; a soft-deleted resource keeps its ID for 30 days."""
    if is_deleted(existing):
        return google_error(
            409,
            f"Requested entity already exists: {name} was deleted and its ID cannot be reused "
            f"until it is purged at {existing.get('expireTime')}; undelete it instead.",
            "ALREADY_EXISTS",
        )
    return google_error(409, f"Requested entity already exists: {name}", "ALREADY_EXISTS")
