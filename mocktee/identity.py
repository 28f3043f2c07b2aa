"""Who is calling the mock: opaque, expiring bearer tokens bound to a principal (and, for
federated workloads, the principal sets their mapped attributes place them in), the project
registry with its owners, and IAM-policy membership checks shared by the mock's KMS, IAM and
storage services.

Member strings follow Google Cloud IAM: ``user:EMAIL`` for owners; for a federated workload of
pool ``P`` in project number ``N`` (base ``//iam.googleapis.com/projects/N/locations/global/
workloadIdentityPools/P``): ``principal://…/subject/SUBJECT``, ``principalSet://…/*``,
``principalSet://…/attribute.NAME/VALUE`` and ``principalSet://…/group/GROUP``.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sealbench.mocktee._http import Request, Response, bearer_token, google_error, json_response
from sealbench.mocktee.state import MockState, token_hash

__all__ = [
    "ACCESS_TOKEN_LIFETIME_S",
    "DEFAULT_ENABLED_SERVICES",
    "SERVICE_TITLES",
    "Caller",
    "Identity",
    "federated_members",
    "has_role",
    "pool_base",
]

#: Federated and owner access tokens of the mock live as long as Google's (one hour).
ACCESS_TOKEN_LIFETIME_S = 3600
_TOKEN_PREFIX = "mock-insecure."  # noqa: S105 - a prefix, not a secret

#: The APIs the mock serves and their titles in Google's errors. As in Google Cloud, a new
#: project has only :data:`DEFAULT_ENABLED_SERVICES` enabled; every other one answers 403
#: ``SERVICE_DISABLED`` until an owner enables it (``gcloud services enable``: Service Usage's
#: ``services/NAME:enable`` or ``services:batchEnable``); ``services/NAME:disable`` turns one off.
SERVICE_TITLES: dict[str, str] = {
    "cloudkms.googleapis.com": "Cloud Key Management Service (KMS) API",
    "storage.googleapis.com": "Cloud Storage API",
    "iam.googleapis.com": "Identity and Access Management (IAM) API",
    "sts.googleapis.com": "Security Token Service API",
    "compute.googleapis.com": "Compute Engine API",
    "confidentialcomputing.googleapis.com": "Confidential Computing API",
    "cloudresourcemanager.googleapis.com": "Cloud Resource Manager API",
    "serviceusage.googleapis.com": "Service Usage API",
    "artifactregistry.googleapis.com": "Artifact Registry API",
}

#: The APIs of :data:`SERVICE_TITLES` a new project has enabled without asking. Google enables a
#: longer list by default in a project created with the console or gcloud (BigQuery, Logging,
#: Monitoring, ...); of the APIs the mock serves, that list holds Cloud Storage and Service
#: Usage. KMS, IAM, STS, Compute Engine, Confidential Computing, Resource Manager and Artifact
#: Registry are off.
DEFAULT_ENABLED_SERVICES: frozenset[str] = frozenset(
    {"storage.googleapis.com", "serviceusage.googleapis.com"}
)


def pool_base(project_number: str, pool_id: str) -> str:
    return (
        f"iam.googleapis.com/projects/{project_number}/locations/global/"
        f"workloadIdentityPools/{pool_id}"
    )


def federated_members(
    project_number: str,
    pool_id: str,
    subject: str,
    attributes: Mapping[str, str],
    groups: Iterable[str] = (),
) -> tuple[str, tuple[str, ...]]:
    """``(principal, principal_sets)`` of a workload federated through pool ``pool_id``."""
    base = pool_base(project_number, pool_id)
    principal = f"principal://{base}/subject/{subject}"
    sets = [f"principalSet://{base}/*"]
    sets += [f"principalSet://{base}/attribute.{k}/{v}" for k, v in sorted(attributes.items())]
    sets += [f"principalSet://{base}/group/{g}" for g in groups]
    return principal, tuple(sets)


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: its principal and every member string that matches it."""

    principal: str
    members: frozenset[str]

    def describe(self) -> str:
        return self.principal


def version_refusal(bindings: Iterable[Mapping[str, Any]], requested: int) -> str | None:
    """Google's rule for reading an IAM policy: valid versions are 0, 1 and 3, and a policy with
    a conditional role binding must be requested at version 3 (the reason to answer 400 with),
    else None."""
    if requested not in (0, 1, 3):
        return "Invalid requested policy version: valid values are 0, 1 and 3."
    if requested < 3 and any("condition" in b for b in bindings):
        return ("Invalid requested policy version: requests for policies with conditional role "
                "bindings must specify version 3.")
    return None


def condition_refusal(bindings: Iterable[Mapping[str, Any]], version: object) -> str | None:
    """Google's rule for writing one: conditional role bindings need ``version`` 3 and a
    condition with an ``expression`` (the mock stores conditions and never evaluates them: a
    conditional binding grants nothing here, see :func:`has_role`)."""
    conditional = [b for b in bindings if "condition" in b]
    if not conditional:
        return None
    if version != 3:
        return "Conditional role bindings require policy version 3."
    for binding in conditional:
        condition = binding["condition"]
        if not isinstance(condition, Mapping) or not isinstance(condition.get("expression"), str):
            return "A binding's condition needs an expression."
    return None


def has_role(policy: Mapping[str, Any] | None, caller: Caller, roles: Iterable[str]) -> bool:
    """Whether ``policy`` binds one of ``roles`` to a member matching ``caller`` (without a
    condition: the mock never evaluates one)."""
    if not policy:
        return False
    wanted = set(roles)
    for binding in policy.get("bindings", []):
        if (
            binding.get("role") in wanted
            and "condition" not in binding
            and caller.members & set(binding.get("members", []))
        ):
            return True
    return False


#: Policy versions a resource keeps for :meth:`Identity.policy_in_effect` (older ones dropped).
_POLICY_HISTORY = 32


class Identity:
    """Issues and checks the mock's access tokens; knows projects and their owners.

    :attr:`iam_propagation_s` (default 0) is the IAM propagation delay of the KMS key and bucket
    policies: a policy written by ``setIamPolicy`` takes effect for permission checks only that
    many seconds later; until then the policy it replaced still applies (Google: "typically 2
    minutes, potentially 7 minutes or longer"). Reads (``getIamPolicy``) show the new policy at
    once, as Google's do."""

    def __init__(
        self,
        state: MockState,
        clock: Callable[[], float] = time.time,
        iam_propagation_s: float = 0.0,
    ) -> None:
        self._state = state
        self._clock = clock
        self.iam_propagation_s = iam_propagation_s

    def policy_history(
        self, previous: Mapping[str, Any] | None, bindings: list[Any]
    ) -> list[dict[str, Any]]:
        """The ``history`` to store with a policy that now gets ``bindings``: every version
        written, with when, so that :meth:`policy_in_effect` can apply them late."""
        if previous and "history" in previous:
            history = list(previous["history"])
        elif previous and previous.get("bindings"):  # written before histories were kept
            history = [{"at": 0.0, "bindings": previous["bindings"]}]
        else:
            history = []
        history.append({"at": self._clock(), "bindings": bindings})
        return history[-_POLICY_HISTORY:]

    def policy_in_effect(self, stored: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        """The part of a stored KMS key or bucket policy that permission checks see now: the
        latest version written at least :attr:`iam_propagation_s` seconds ago (None before the
        first one has propagated)."""
        if not stored or self.iam_propagation_s <= 0 or "history" not in stored:
            return stored
        cutoff = self._clock() - self.iam_propagation_s
        in_effect: Mapping[str, Any] | None = None
        for version in stored["history"]:
            if float(version["at"]) <= cutoff:
                in_effect = {"bindings": version["bindings"]}
        return in_effect

    def issue(
        self,
        principal: str,
        principal_sets: Iterable[str] = (),
        attributes: Mapping[str, str] | None = None,
        lifetime: int = ACCESS_TOKEN_LIFETIME_S,
    ) -> tuple[str, int]:
        """A fresh opaque access token for ``principal``; only its SHA-256 is stored."""
        token = _TOKEN_PREFIX + secrets.token_urlsafe(32)
        now = self._clock()
        with self._state.edit() as doc:
            tokens = doc["access_tokens"]
            for key in [k for k, v in tokens.items() if v["expires"] < now]:
                del tokens[key]
            tokens[token_hash(token)] = {
                "principal": principal,
                "principal_sets": sorted(principal_sets),
                "attributes": dict(attributes or {}),
                "expires": now + lifetime,
            }
        return token, lifetime

    def authenticate(self, request: Request) -> Caller | Response:
        """The caller behind the request's bearer token, or Google's 401 response."""
        token = bearer_token(request)
        record = None
        if token is not None:
            record = self._state.read()["access_tokens"].get(token_hash(token))
        if record is None or record["expires"] < self._clock():
            return google_error(
                401,
                "Request had invalid authentication credentials. Expected OAuth 2 access "
                "token, login cookie or other valid authentication credential.",
                "UNAUTHENTICATED",
            )
        members = {record["principal"], *record["principal_sets"], "allAuthenticatedUsers"}
        return Caller(principal=record["principal"], members=frozenset(members))

    def create_project(self, project_id: str, project_number: str, owner: str) -> None:
        """Register ``project_id`` (if new: with only :data:`DEFAULT_ENABLED_SERVICES` enabled)
        and add ``owner`` to its owners."""
        if not project_number.isdigit() or not project_id:
            raise ValueError("project id must be non-empty and project number numeric")
        with self._state.edit() as doc:
            if project_id not in doc["projects"]:  # a new project: Google's defaults only
                doc["disabled_services"][project_id] = sorted(
                    set(SERVICE_TITLES) - DEFAULT_ENABLED_SERVICES
                )
            project = doc["projects"].setdefault(
                project_id, {"number": project_number, "owners": []}
            )
            if project["number"] != project_number:
                raise ValueError(f"project {project_id} already has another number")
            if owner not in project["owners"]:
                project["owners"].append(owner)

    def resolve_project(self, project: str) -> tuple[str, str] | None:
        """``(project_id, project_number)`` for a project given by id or number."""
        for project_id, info in self._state.read()["projects"].items():
            if project in (project_id, info["number"]):
                return project_id, str(info["number"])
        return None

    def service_disabled(self, project: str, service: str) -> Response | None:
        """Google's ``403 SERVICE_DISABLED`` answer when ``service`` is disabled in
        ``project`` (id or number), else None."""
        resolved = self.resolve_project(project)
        if resolved is None:
            return None
        project_id, number = resolved
        if service not in self._state.read()["disabled_services"].get(project_id, []):
            return None
        title = SERVICE_TITLES.get(service, service)
        message = (
            f"{title} has not been used in project {number} before or it is disabled. Enable "
            f"it by visiting https://console.developers.google.com/apis/api/{service}/overview"
            f"?project={number} then retry."
        )
        return json_response(403, {"error": {
            "code": 403, "message": message, "status": "PERMISSION_DENIED",
            "errors": [{"message": message, "domain": "usageLimits",
                        "reason": "accessNotConfigured"}],
            "details": [{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "SERVICE_DISABLED",
                "domain": "googleapis.com",
                "metadata": {"service": service, "consumer": f"projects/{number}"},
            }],
        }})

    def is_owner(self, caller: Caller, project: str) -> bool:
        for project_id, info in self._state.read()["projects"].items():
            if project in (project_id, info["number"]):
                return caller.principal in info["owners"]
        return False
