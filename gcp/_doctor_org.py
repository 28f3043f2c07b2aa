"""``sealbench doctor``'s reading of the organisation policies in effect on an owner's project
(for :mod:`sealbench.gcp.doctor`): Resource Manager's ``projects.getEffectiveOrgPolicy``
(``cloudresourcemanager.googleapis.com/v1``, the policy merged down the resource hierarchy, what
``gcloud resource-manager org-policies describe --effective`` prints) for the constraints that
bear on sealbench, each said in what it means for a run (:data:`CONSTRAINTS`):

* ``constraints/storage.uniformBucketLevelAccess``: buckets must have uniform bucket-level
  access. sealbench creates its buckets with it anyway: Google lets workload identity
  federation principals into Cloud Storage only on such buckets.
* ``constraints/storage.publicAccessPrevention``: no bucket may be public; sealbench grants no
  public member, so nothing to do.
* ``constraints/iam.allowedPolicyMemberDomains`` (domain restricted sharing): IAM policies may
  name members of the allowed customers only. Whether Google counts the ``principalSet://``
  members ``policy sync`` writes as outside them is **not verified** either way, so a
  restricted list makes the check *unverified*, naming the error to look for.

Reading them needs ``orgpolicy.policy.get`` (``roles/orgpolicy.policyViewer``, which project
owners and viewers lack by default on some organisations): a refusal makes the check unverified,
never failed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from sealbench.gcp._doctor_base import Check, http_get

if TYPE_CHECKING:
    from sealbench.gcp.owner_cloud import GcpOwnerCloud

__all__ = ["CONSTRAINTS", "DOMAIN_REFUSAL", "org_policy_check", "uniform_access_command"]

UNIFORM: Final = "constraints/storage.uniformBucketLevelAccess"
PUBLIC_PREVENTION: Final = "constraints/storage.publicAccessPrevention"
DOMAINS: Final = "constraints/iam.allowedPolicyMemberDomains"
#: The constraints doctor reads, with what each means for sealbench when enforced.
CONSTRAINTS: Final = {
    UNIFORM: "buckets must have uniform bucket-level access (sealbench creates them so; a "
             "bucket without it is refused: 412 Request violates constraint "
             f"'{UNIFORM}')",
    PUBLIC_PREVENTION: "no bucket may be public (sealbench grants no public member)",
    DOMAINS: "IAM policies may name members of the allowed customers only",
}
#: IAM's refusal of a member outside the allowed customers (what a ``policy sync`` under a
#: domain restriction would answer if it counts principalSet members as outside).
DOMAIN_REFUSAL: Final = ("One or more users named in the policy do not belong to a permitted "
                         "customer")


def uniform_access_command(bucket: str) -> str:
    """The ``gcloud`` command that turns uniform bucket-level access on for ``bucket``."""
    return f"gcloud storage buckets update gs://{bucket} --uniform-bucket-level-access"


def _enforced(policy: dict[str, Any]) -> bool:
    return bool((policy.get("booleanPolicy") or {}).get("enforced"))


def _restricted(policy: dict[str, Any]) -> list[str] | None:
    """The allowed values of a list policy that restricts, else None (all allowed)."""
    listed = policy.get("listPolicy") or {}
    if listed.get("allValues") == "ALLOW" or not listed:
        return None
    return [str(v) for v in listed.get("allowedValues") or []]


def org_policy_check(cloud: GcpOwnerCloud, session: Any) -> Check:
    """The effective organisation policies of the owner's project, said in what they mean for
    sealbench (see the module docstring)."""
    from google.api_core import exceptions as gexc

    project = cloud.project_id
    url = f"{cloud.apis.cloudresourcemanager}/v1/projects/{project}:getEffectiveOrgPolicy"
    found: dict[str, dict[str, Any]] = {}
    try:
        for constraint in CONSTRAINTS:
            found[constraint] = http_get(session, url, "org policy",
                                         json={"constraint": constraint})
    except (gexc.Forbidden, gexc.PermissionDenied) as exc:
        return Check(
            "organisation policies", True,
            f"could not read them ({str(exc.message)[:160]}); a bucket without uniform access "
            "or a domain restriction would show only when a command fails", (
                f"a project owner lets you read them: gcloud projects add-iam-policy-binding "
                f"{project} --member=user:YOUR_EMAIL --role=roles/orgpolicy.policyViewer"),
            verified=False)
    except gexc.GoogleAPIError as exc:
        return Check("organisation policies", True,
                     f"could not read them: {str(exc)[:200]}",
                     "gcloud services enable cloudresourcemanager.googleapis.com "
                     f"--project {project}", verified=False)
    said = []
    for constraint in (UNIFORM, PUBLIC_PREVENTION):
        state = "enforced" if _enforced(found[constraint]) else "not enforced"
        said.append(f"{constraint.removeprefix('constraints/')} {state}"
                    + (f": {CONSTRAINTS[constraint]}" if state == "enforced" else ""))
    allowed = _restricted(found[DOMAINS])
    if allowed is None:
        said.append("iam.allowedPolicyMemberDomains not restricted")
        return Check("organisation policies", True, "; ".join(said))
    said.append(f"iam.allowedPolicyMemberDomains restricted to {', '.join(allowed) or 'none'}: "
                f"{CONSTRAINTS[DOMAINS]}; whether it refuses the principalSet:// members "
                "policy sync grants is not verified")
    return Check(
        "organisation policies", True, "; ".join(said),
        f"if 'sealbench policy sync' fails with '{DOMAIN_REFUSAL}', an organisation policy "
        f"administrator exempts project {project} from it (gcloud org-policies reset "
        f"iam.allowedPolicyMemberDomains --project {project}, or a tag-conditional "
        "exception)", verified=False)
