"""How doctor reads who holds a role in an IAM policy (issue 29, item 7): a direct,
unconditional binding is certain; a conditional one is reported with its condition and not
counted; a group's is reported as "through group G (membership not checked)"; public members
count only where asked (an image repository)."""

from __future__ import annotations

from sealbench.gcp._doctor_iam import repository_of, role_grants

SA = "serviceAccount:runner@h.iam.gserviceaccount.com"
ROLES = ("roles/confidentialcomputing.workloadUser", "roles/logging.logWriter")


def test_a_direct_unconditional_binding_is_certain() -> None:
    grants = role_grants({"bindings": [{"role": r, "members": [SA]} for r in ROLES]}, SA, ROLES)
    assert grants.certain == frozenset(ROLES) and not grants.missing and not grants.uncertain()


def test_a_conditional_binding_is_reported_with_its_condition_and_not_counted() -> None:
    condition = {"title": "business hours", "expression": "request.time.getHours('UTC') < 18"}
    policy = {"version": 3, "bindings": [
        {"role": ROLES[0], "members": [SA]},
        {"role": ROLES[1], "members": [SA], "condition": condition},
    ]}
    grants = role_grants(policy, SA, ROLES)
    assert grants.certain == frozenset({ROLES[0]}) and not grants.missing
    assert grants.uncertain() == [
        "roles/logging.logWriter only under condition 'business hours': "
        "request.time.getHours('UTC') < 18"]


def test_a_group_binding_is_reported_as_unchecked_membership() -> None:
    policy = {"bindings": [{"role": ROLES[1], "members": ["group:ops@h.example", "user:x@y"]}]}
    grants = role_grants(policy, SA, ROLES)
    assert grants.missing == (ROLES[0],)
    assert grants.uncertain() == [
        "roles/logging.logWriter through group ops@h.example (membership not checked)"]


def test_a_role_bound_to_someone_else_is_missing() -> None:
    policy = {"bindings": [{"role": r, "members": ["serviceAccount:other@h.iam.gserviceaccount"
                                                   ".com"]} for r in ROLES]}
    assert role_grants(policy, SA, ROLES).missing == ROLES


def test_public_members_count_only_when_asked() -> None:
    policy = {"bindings": [{"role": "roles/artifactregistry.reader", "members": ["allUsers"]}]}
    reader = ("roles/artifactregistry.reader",)
    assert role_grants(policy, SA, reader).missing == reader
    assert role_grants(policy, SA, reader, public=True).certain == frozenset(reader)


def test_only_artifact_registry_references_name_a_repository() -> None:
    assert repository_of("europe-west4-docker.pkg.dev/p-1/repo/img@sha256:ab") == (
        "p-1", "europe-west4", "repo")
    assert repository_of("gcr.io/p/img@sha256:ab") is None
    assert repository_of("sealbench.local/evaluation@sha256:ab") is None
