"""The mock's organisation policies and VPC Service Controls perimeters: what a secure-by-default
organisation imposes on a project, answered as Google answers it. INSECURE BY DESIGN, like the
rest of the mock.

Organisation policies (``state.json`` ``org_policies``, per project; a project without an entry
has :data:`DEFAULT_POLICIES`, the constraints Google's secure-by-default organisations enforce
on new projects):

* ``constraints/storage.uniformBucketLevelAccess`` (boolean): a bucket create (or update) that
  does not enable uniform bucket-level access is refused with Cloud Storage's ``412 Request
  violates constraint 'constraints/storage.uniformBucketLevelAccess'`` (reason
  ``conditionNotMet``);
* ``constraints/storage.publicAccessPrevention`` (boolean): every bucket of the project refuses
  ``allUsers`` and ``allAuthenticatedUsers`` bindings (``412 … publicAccessPrevention``);
* ``constraints/iam.allowedPolicyMemberDomains`` (list of allowed customer ids): read back by
  ``getEffectiveOrgPolicy`` only; the mock does not evaluate it against members (whether Google
  refuses ``principalSet://`` members under it is not settled: see docs/gcp-setup.md).

Resource Manager's ``POST /v1/projects/{p}:getEffectiveOrgPolicy`` (served by
:mod:`sealbench.mocktee.apis`) returns them in Google's v1 shape (:func:`effective_policy`).

Perimeters (``state.json`` ``perimeters``): a project inside one answers a federated identity
(``principal://`` workload identity federation) on its KMS keys and buckets with Google's VPC
Service Controls refusal (:func:`perimeter_refusal`): 403 "Request is prohibited by
organization's policy", a ``PreconditionFailure`` violation of type ``VPC_SERVICE_CONTROLS``
and an ``ErrorInfo`` with reason ``SECURITY_POLICY_VIOLATED`` (Cloud KMS, google.rpc shape), or
the JSON API's ``errors[].reason`` ``vpcServiceControls`` (Cloud Storage). A service account or
user passes: the mock's perimeter is one whose ingress rules name those identities only.
"""

from __future__ import annotations

import json
import secrets
from typing import Any, Final

__all__ = [
    "ALLOWED_DOMAINS",
    "DEFAULT_POLICIES",
    "PUBLIC_ACCESS_PREVENTION",
    "UNIFORM_ACCESS",
    "effective_policy",
    "enforced",
    "perimeter_refusal",
    "violation",
]

UNIFORM_ACCESS: Final = "constraints/storage.uniformBucketLevelAccess"
PUBLIC_ACCESS_PREVENTION: Final = "constraints/storage.publicAccessPrevention"
ALLOWED_DOMAINS: Final = "constraints/iam.allowedPolicyMemberDomains"
#: What a project's organisation enforces when the state names nothing for it: Google's
#: secure-by-default organisation policies for the two storage constraints.
DEFAULT_POLICIES: Final[dict[str, bool | list[str]]] = {
    UNIFORM_ACCESS: True,
    PUBLIC_ACCESS_PREVENTION: True,
}
_BOOLEAN: Final = frozenset({UNIFORM_ACCESS, PUBLIC_ACCESS_PREVENTION})
_PERIMETER_MESSAGE: Final = "Request is prohibited by organization's policy."


def _policies(doc: dict[str, Any], project_id: str) -> dict[str, bool | list[str]]:
    return {**DEFAULT_POLICIES, **doc.get("org_policies", {}).get(project_id, {})}


def enforced(doc: dict[str, Any], project_id: str, constraint: str) -> bool:
    """Whether boolean ``constraint`` is enforced on ``project_id``."""
    return _policies(doc, project_id).get(constraint) is True


def effective_policy(doc: dict[str, Any], project_id: str, constraint: str) -> dict[str, Any]:
    """``getEffectiveOrgPolicy``'s answer (Resource Manager v1 ``OrgPolicy``)."""
    value = _policies(doc, project_id).get(constraint)
    answer: dict[str, Any] = {"version": 1, "constraint": constraint, "etag": "BwAAAAAAAAA="}
    if constraint in _BOOLEAN:
        answer["booleanPolicy"] = {"enforced": True} if value is True else {}
    elif isinstance(value, list):
        answer["listPolicy"] = {"allowedValues": list(value)}
    else:
        answer["listPolicy"] = {"allValues": "ALLOW"}
    return answer


def violation(constraint: str) -> tuple[int, bytes]:
    """Cloud Storage's refusal of a request an organisation policy forbids."""
    message = f"Request violates constraint '{constraint}'"
    body = {"error": {"code": 412, "message": message, "errors": [
        {"message": message, "domain": "global", "reason": "conditionNotMet"}]}}
    return 412, json.dumps(body).encode()


def perimeter_refusal(
    doc: dict[str, Any], project_id: str | None, principal: str, service: str
) -> tuple[int, bytes] | None:
    """VPC Service Controls' answer to a federated ``principal`` on ``service`` in a project
    inside a perimeter, in the shape ``service`` uses, else None."""
    if not project_id or not doc.get("perimeters", {}).get(project_id):
        return None
    if not principal.startswith("principal://"):
        return None
    uid = secrets.token_urlsafe(24)
    message = f"{_PERIMETER_MESSAGE} vpcServiceControlsUniqueIdentifier: {uid}"
    if service == "storage.googleapis.com":
        body: dict[str, Any] = {"error": {"code": 403, "message": message, "errors": [
            {"message": message, "domain": "global", "reason": "vpcServiceControls"}]}}
    else:
        body = {"error": {"code": 403, "message": message, "status": "PERMISSION_DENIED",
                          "details": [
            {"@type": "type.googleapis.com/google.rpc.PreconditionFailure",
             "violations": [{"type": "VPC_SERVICE_CONTROLS", "description": uid}]},
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo",
             "reason": "SECURITY_POLICY_VIOLATED", "domain": "googleapis.com",
             "metadata": {"uid": uid, "service": service}}]}}
    return 403, json.dumps(body).encode()
