"""What ``sealbench doctor`` reads in IAM policies (for :mod:`sealbench.gcp.doctor`): which
roles a member holds and how sure doctor can be of it (:func:`role_grants`, pure), the runner
service account's project roles, and its read access to the evaluation image's Artifact
Registry repository.

A role held through a direct, unconditional binding is certain. One held only through a
conditional binding is reported with its condition and not counted: doctor does not evaluate
IAM Conditions (they depend on the request: time, resource, tags). One held through a
``group:`` member is reported "through group G (membership not checked)": whether the account
is in the group is Cloud Identity's to say, which doctor does not ask. Neither makes a check
fail; each makes it *unverified* (:attr:`Check.verified` False), with a direct grant as the fix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from sealbench.gcp._doctor_base import Check, ProbeRefused, RunnerSettings, http_get, run_check

if TYPE_CHECKING:
    from sealbench.gcp.owner_cloud import GcpOwnerCloud

__all__ = [
    "READER_ROLES",
    "RoleGrants",
    "image_access_check",
    "repository_of",
    "role_grants",
    "runner_account_check",
]

#: Predefined roles that contain ``artifactregistry.repositories.downloadArtifacts``.
READER_ROLES: Final = frozenset({
    "roles/artifactregistry.reader", "roles/artifactregistry.writer",
    "roles/artifactregistry.repoAdmin", "roles/artifactregistry.admin",
    "roles/owner", "roles/editor",
})
_PUBLIC: Final = ("allUsers", "allAuthenticatedUsers")
_REPOSITORY = re.compile(
    r"^(?P<location>[a-z0-9-]+)-docker\.pkg\.dev/(?P<project>[a-z0-9.:-]+)/"
    r"(?P<repository>[a-z0-9._-]+)/"
)


@dataclass(frozen=True)
class RoleGrants:
    """How ``member`` holds each role asked about: ``certain`` (direct and unconditional),
    ``conditional`` (role → its conditions, as ``title: expression``), ``groups`` (role → the
    groups that hold it) and ``missing``."""

    certain: frozenset[str]
    conditional: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    missing: tuple[str, ...] = ()

    def uncertain(self) -> list[str]:
        """One line per role held only in a way doctor cannot confirm."""
        lines = [f"{role} only under condition {' / '.join(c)}"
                 for role, c in self.conditional.items() if role not in self.certain]
        lines += [f"{role} through group {', '.join(g)} (membership not checked)"
                  for role, g in self.groups.items() if role not in self.certain]
        return lines


def _condition_text(condition: Mapping[str, Any]) -> str:
    title = str(condition.get("title") or "untitled")
    return f"'{title}': {str(condition.get('expression', ''))[:200]}"


def role_grants(
    policy: Mapping[str, Any], member: str, roles: Sequence[str],
    *, public: bool = False,
) -> RoleGrants:
    """How ``member`` holds each of ``roles`` in ``policy`` (a version-3 IAM policy as JSON).
    With ``public``, ``allUsers``/``allAuthenticatedUsers`` count as the member too."""
    members = {member, *(_PUBLIC if public else ())}
    certain: set[str] = set()
    conditional: dict[str, list[str]] = {}
    groups: dict[str, list[str]] = {}
    for binding in policy.get("bindings", []) or []:
        role = binding.get("role")
        if role not in roles:
            continue
        bound = set(binding.get("members", []) or [])
        condition = binding.get("condition")
        if bound & members:
            if condition:
                conditional.setdefault(role, []).append(_condition_text(condition))
            else:
                certain.add(role)
        for group in sorted(m for m in bound if m.startswith("group:")):
            text = group.removeprefix("group:")
            if condition:
                text += f" (under condition {_condition_text(condition)})"
            groups.setdefault(role, []).append(text)
    missing = tuple(r for r in roles if r not in certain and r not in conditional
                    and r not in groups)
    return RoleGrants(frozenset(certain), {k: tuple(v) for k, v in conditional.items()},
                      {k: tuple(v) for k, v in groups.items()}, missing)


def _policy(session: Any, url: str, what: str) -> dict[str, Any]:

    return http_get(session, url, what, json={"options": {"requestedPolicyVersion": 3}})


def runner_account_check(
    cloud: GcpOwnerCloud, session: Any, runner: RunnerSettings, roles: Sequence[str]
) -> Check:
    """The runner's service account exists and holds ``roles`` on the owner's project."""

    project, email = cloud.project_id, runner.service_account
    if not email:
        return Check("runner service account", False, "none configured",
                     "sealbench profile add NAME ... --service-account "
                     f"sealbench-runner@{project}.iam.gserviceaccount.com")
    account_id = email.split("@", 1)[0]
    member = f"serviceAccount:{email}"

    def grant(missing: Iterable[str]) -> str:
        return "; ".join(f"gcloud projects add-iam-policy-binding {project} --member={member} "
                         f"--role={role}" for role in missing)

    def probe() -> str | tuple[str, str]:

        http_get(session, f"{cloud.apis.iam}/v1/projects/{project}/serviceAccounts/{email}",
                 "service account")
        policy = _policy(session, f"{cloud.apis.cloudresourcemanager}/v1/projects/{project}"
                         ":getIamPolicy", "project policy")
        grants = role_grants(policy, member, roles)
        if grants.missing:
            raise ProbeRefused(f"{email} lacks {', '.join(grants.missing)} on project {project}",
                               grant(grants.missing))
        unsure = grants.uncertain()
        if unsure:
            return (f"{email}: " + "; ".join(unsure),
                    "a direct grant doctor can confirm: " + grant(
                        r for r in roles if r not in grants.certain))
        return f"{email} ({', '.join(roles)})"

    return run_check(
        "runner service account", probe,
        f"gcloud iam service-accounts create {account_id} --project {project}; then "
        + grant(roles),
        project,
        f"a project owner lets you see accounts and roles: gcloud projects "
        f"add-iam-policy-binding {project} --member=user:YOUR_EMAIL "
        "--role=roles/iam.securityReviewer",
    )


def repository_of(image_reference: str) -> tuple[str, str, str] | None:
    """``(project, location, repository)`` of an Artifact Registry image reference
    (``LOCATION-docker.pkg.dev/PROJECT/REPOSITORY/IMAGE…``), None for another registry."""
    found = _REPOSITORY.match(image_reference)
    if found is None:
        return None
    return found["project"], found["location"], found["repository"]


def image_access_check(
    cloud: GcpOwnerCloud, session: Any, runner: RunnerSettings, image_reference: str
) -> Check:
    """The runner's account may pull ``image_reference``: the repository's IAM policy grants it
    (or everyone) a role with ``artifactregistry.repositories.downloadArtifacts``. The policy
    is the image owner's (the benchmark authority's): when this account may not read it, the
    check is unverified, and says what to ask for."""

    name = "runner image access"
    email = runner.service_account
    repository = repository_of(image_reference)
    if repository is None:
        return Check(name, True, f"{image_reference.split('@')[0]} is not in Artifact Registry: "
                     "not checked", verified=False)
    if not email:
        return Check(name, False, "no runner service account configured",
                     "sealbench profile add NAME ... --service-account EMAIL")
    project, location, repo = repository
    member = f"serviceAccount:{email}"
    fix = (f"the image's owner grants it: gcloud artifacts repositories add-iam-policy-binding "
           f"{repo} --location={location} --project={project} --member={member} "
           "--role=roles/artifactregistry.reader")
    resource = f"projects/{project}/locations/{location}/repositories/{repo}"

    def probe() -> str | tuple[str, str]:
        from google.api_core import exceptions as gexc


        try:
            policy = http_get(session, f"{cloud.apis.artifactregistry}/v1/{resource}"
                              ":getIamPolicy?options.requestedPolicyVersion=3", "repository")
        except gexc.Forbidden:
            return (f"cannot read the IAM policy of {resource} (it is {project}'s): whether "
                    f"{email} may pull the image is not checked", fix)
        grants = role_grants(policy, member, sorted(READER_ROLES), public=True)
        if grants.certain:
            return f"{email} may pull from {resource} ({', '.join(sorted(grants.certain))})"
        unsure = grants.uncertain()
        if unsure:
            return f"{resource}: " + "; ".join(unsure), fix
        raise ProbeRefused(f"{resource} does not grant {email} read access: the VM's launcher "
                           "cannot pull the image", fix)

    return run_check(name, probe, fix, cloud.project_id, fix)
