"""``sealbench doctor --probe-condition``: does Google accept the owner's real pool provider? The
attribute condition and mapping ``policy sync`` writes (``attribute.workload_uid`` values of 301
to 377 characters for today's pins, 231 to 307 for a model owner: see
:mod:`sealbench.gcp._cs_cel`; ``matches()`` in the condition) rest on limits Google does not
document either way (issue 29, item 5). The probe settles what a provider create can: it renders
the provider body
``policy sync`` would write for the current approvals, creates it as a throwaway provider with
a unique id in the owner's pool, reads it back, and deletes it.

The one doctor step that writes: a provider that exists for seconds (bindings name the pool's
``principalSet://…/attribute.workload_uid/…`` sets, so a token federated through the probe's
provider, whose condition is the real one's, gets nothing the real provider does not already
allow; it is deleted before the probe returns, and a failed delete is reported with its
command). A deleted provider stays ``DELETED`` for 30 days on Google and its id cannot be
reused, so each probe takes a new id (:func:`probe_id`).

What it settles: Google's provider validation accepts the condition (its length, its CEL,
``matches()``) and the mapping *expression* exactly as ``policy sync`` would write them. What it
does not settle: whether the mapped uid *value* (301 to 377 characters) is accepted, since a
value exists only when a token is exchanged and no token federates through the probe; whether a
``principalSet://…/attribute.workload_uid/<uid>`` member of that length is accepted in an IAM
binding (``policy sync``'s ``setIamPolicy`` is the first to try); and whether the condition
admits the run's token. Only a run shows those.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from sealbench.gcp._doctor_base import Check, http_get, reason

if TYPE_CHECKING:
    from sealbench.contract.workload import WorkloadIdentity
    from sealbench.gcp.owner_cloud import GcpOwnerCloud
    from sealbench.gcp.policy import AssetPolicy
    from sealbench.platforms.owner_cloud import Coordinates

__all__ = ["NAME", "probe_condition", "probe_id", "probe_provider"]

#: The check's name in doctor's output.
NAME: Final = "condition probe"
_TIMEOUT_S: Final = 30.0


def probe_id(now: datetime | None = None) -> str:
    """A provider id used once: ``sbprobe-YYYYMMDDHHMMSS-XXXX`` (27 of the 4 to 32 characters
    Google allows, ``[a-z0-9-]``)."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d%H%M%S")
    return f"sbprobe-{stamp}-{secrets.token_hex(2)}"


def probe_condition(
    cloud: GcpOwnerCloud,
    coordinates: Coordinates,
    workloads: frozenset[WorkloadIdentity],
    *,
    include_data: bool,
    experimental_gpu_images: frozenset[str] = frozenset(),
    experimental_benchmark_ids: frozenset[str] = frozenset(),
) -> Check:
    """The probe for the provider ``policy sync`` would write for ``workloads`` (the approved
    workloads of an asset and of the owner's assets sharing its key and provider, as the client
    gathers them), in the form :meth:`GcpOwnerCloud.asset_policy` builds."""
    from sealbench.gcp.owner_cloud import pool_provider_from_name
    from sealbench.gcp.policy import provider_body
    from sealbench.platforms.errors import CloudError

    pool_provider_from_name(coordinates.wip_provider)  # a bad name is the caller's, not a check
    try:
        policy = cloud.asset_policy(
            coordinates, workloads, include_data=include_data,
            experimental_gpu_images=experimental_gpu_images,
            experimental_benchmark_ids=experimental_benchmark_ids,
        )
        body = provider_body(policy)
    except CloudError as exc:  # refused before Google is asked (e.g. over 4,096 characters)
        return Check(NAME, False, f"sealbench cannot render the condition: {exc}",
                     "fewer approved workloads per key (one key per benchmark), then probe again")
    uids = [len((w if policy.include_data else w.without_data()).uid())
            for w in policy.workloads]
    facts = (f"condition {len(body['attributeCondition'])} of 4096 characters, "
             f"{len(policy.workloads)} workloads"
             + (f", workload_uid values up to {max(uids)} characters" if uids else ""))
    checked = probe_provider(cloud, policy.provider.pool_name, body, facts=facts)
    if not checked.ok:
        return checked
    return replace(checked, detail=f"{checked.detail}; {_compared(cloud, policy, body)}")


def _compared(cloud: GcpOwnerCloud, policy: AssetPolicy, body: dict[str, Any]) -> str:
    """Whether the pool's real provider already holds the probed condition and mapping."""
    from google.api_core import exceptions as gexc
    from google.auth.transport.requests import AuthorizedSession

    session = AuthorizedSession(cloud.credentials())  # type: ignore[no-untyped-call]
    try:
        real = http_get(session, f"{cloud.apis.iam}/v1/{policy.provider.name}", "provider")
    except gexc.GoogleAPIError:
        return f"the pool's provider {policy.provider.provider_id} could not be read"
    if all(real.get(k) == body[k] for k in ("attributeCondition", "attributeMapping")):
        return f"provider {policy.provider.provider_id} holds the same (policy sync is current)"
    return (f"provider {policy.provider.provider_id} holds another condition or mapping: "
            "'sealbench policy sync' writes the current approvals")


def probe_provider(
    cloud: GcpOwnerCloud, pool_name: str, body: dict[str, Any], *, facts: str = "",
    provider_id: Callable[[], str] = probe_id,
) -> Check:
    """Create ``body`` as a throwaway provider of ``pool_name``, read it back, delete it; the
    outcome as a check (Google's message when it refuses)."""
    from google.api_core import exceptions as gexc
    from google.auth.transport.requests import AuthorizedSession

    facts = f" ({facts})" if facts else ""
    session = AuthorizedSession(cloud.credentials())  # type: ignore[no-untyped-call]
    iam = cloud.apis.iam
    name = f"{pool_name}/providers/{provider_id()}"
    delete = (f"gcloud iam workload-identity-pools providers delete {name.rsplit('/', 1)[1]} "
              f"--workload-identity-pool={pool_name.rsplit('/', 1)[1]} --location=global "
              f"--project={cloud.project_id}")
    sync = "sealbench policy sync --dataset D (or --model M) creates the pool"
    try:
        session_post = session.post(
            f"{iam}/v1/{pool_name}/providers",
            params={"workloadIdentityPoolProviderId": name.rsplit("/", 1)[1]},
            json=body, timeout=_TIMEOUT_S)
    except OSError as exc:
        return Check(NAME, False, f"could not reach IAM: {type(exc).__name__}: {exc}", sync)
    if session_post.status_code == 404:
        return Check(NAME, False, f"no pool {pool_name}", sync)
    if session_post.status_code != 200:
        error = gexc.from_http_response(session_post)  # type: ignore[no-untyped-call]
        message = reason(error.message)
        refused = session_post.status_code == 400
        return Check(
            NAME, False,
            (f"Google refused the provider{facts}: {message}" if refused
             else f"could not create the probe provider: {message}"),
            "the condition policy sync writes would be refused too: report it with this message"
            if refused else "a project owner grants you roles/iam.workloadIdentityPoolAdmin")
    try:
        done = _await(session, iam, session_post.json())
        if "error" in done:  # refused after the create was accepted
            message = str(done["error"].get("message", done["error"]))[:300]
            return Check(NAME, False, f"Google refused the provider{facts}: {message}",
                         "the condition policy sync writes would be refused too: report it "
                         f"with this message (if the provider exists: {delete})")
        stored = http_get(session, f"{iam}/v1/{name}", "probe provider")
        same = all(stored.get(k) == body[k] for k in ("attributeCondition", "attributeMapping"))
    except gexc.GoogleAPIError as exc:
        same, stored = False, {"error": reason(getattr(exc, "message", exc))}
    gone = session.delete(f"{iam}/v1/{name}", timeout=_TIMEOUT_S)
    deleted = ("deleted (Google keeps it DELETED for 30 days; the id is not reused)"
               if gone.status_code == 200 else f"NOT deleted (HTTP {gone.status_code})")
    if gone.status_code != 200:
        return Check(NAME, False, f"Google accepted the provider{facts} but it was {deleted}",
                     delete)
    if not same:
        return Check(NAME, False, f"Google accepted the provider{facts} but stored another "
                     f"condition or mapping than was sent ({stored.get('error', 'differs')}); "
                     f"{deleted}", "report it: policy sync's writes would not stay as written")
    return Check(NAME, True, f"Google accepted the condition and mapping policy sync writes"
                 f"{facts}; probe provider {name.rsplit('/', 1)[1]} {deleted}")


def _await(session: Any, iam: str, operation: dict[str, Any]) -> dict[str, Any]:
    """The finished long-running operation (polled as the policy writer does)."""
    import time

    delay, waited = 0.5, 0.0
    while not operation.get("done"):
        if waited > 120:
            break
        time.sleep(delay)
        waited += delay
        delay = min(delay * 2, 10.0)
        operation = http_get(session, f"{iam}/v1/{operation['name']}", "operation")
    return operation
