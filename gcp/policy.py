"""Which workloads may use an owner's asset, expressed as Google Cloud policy (pure logic): the
Confidential Space platform's key release (:mod:`sealbench.gcp.confidential_space`), which the
mock cloud emulates.

Given the allowed :class:`~sealbench.contract.workload.WorkloadIdentity` values of one asset, this
module computes (a) the workload identity pool provider: attribute mapping with
``attribute.workload_uid`` (the CEL expression of :mod:`sealbench.gcp._cs_cel`) and an
attribute condition, and (b) the IAM members to bind on the asset's KMS key
(``roles/cloudkms.cryptoKeyDecrypter``) and bucket (``roles/storage.objectViewer``). The REST
calls that apply them live in :mod:`sealbench.gcp.policy_writer`.

The condition is rendered from the table of operator-controlled inputs
(:mod:`sealbench.contract.inputs`, by :func:`sealbench.gcp._cs_cel.render_condition`): one
clause per bound or pinned input, from typed, validated values only, every literal refused
unless it is made of ``[A-Za-z0-9:._/~-]``; no user string is ever pasted into CEL. It always
requires the production Confidential Space image (``swname``, ``dbgstat``, ``STABLE``),
confidential hardware (``hwmodel``) with secure boot, no command override, no env override
outside the run spec's, an approved image and metrics version, the uid's overrides shaped as
digests, and the three endpoint overrides *absent* (Google's issuer) or equal to the mock's exact
URLs (the mock's issuer), so a token from a redirected run federates to nothing wherever it is
replayed.

The per-workload binding (image, data, model, recipient) is the IAM member
``principalSet://…/attribute.workload_uid/<uid>``. Bindings are *incremental*: the writer owns
exactly the members of its role under its pool's ``attribute.workload_uid/`` prefix; it adds and
removes only those and keeps every other member and binding untouched.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sealbench.contract.inputs import ConditionContext, ConditionInputError
from sealbench.contract.spec import ServiceEndpoints
from sealbench.contract.workload import WorkloadIdentity
from sealbench.gcp._cs_cel import WORKLOAD_UID_ATTRIBUTE, uid_mapping_expression
from sealbench.gcp._cs_claims import CONFIDENTIAL_SPACE_ISSUER
from sealbench.gcp.confidential_space import ConfidentialSpacePlatform
from sealbench.platforms.errors import PolicyInputError
from sealbench.platforms.platform import (
    Platform,
    UnknownPlatformError,
    check_endpoint_pin,
    platform_for_issuer,
)

__all__ = [
    "BUCKET_ROLE",
    "CONFIDENTIAL_SPACE_ISSUER_URI",
    "KEY_ROLE",
    "MAX_CONDITION_CHARS",
    "RESULT_BUCKET_ROLE",
    "RESULT_READER_ROLE",
    "STS_AUDIENCE",
    "AssetPolicy",
    "BindingChange",
    "PoolProvider",
    "attribute_condition",
    "attribute_mapping",
    "cel_string",
    "condition_context",
    "managed_prefix",
    "merge_bindings",
    "provider_body",
]

KEY_ROLE = "roles/cloudkms.cryptoKeyDecrypter"
BUCKET_ROLE = "roles/storage.objectViewer"
#: What an approved workload may do in the data owner's result bucket: create objects (the
#: sealed result, summary, token, write check, failure record), never read or delete them.
RESULT_BUCKET_ROLE = "roles/storage.objectCreator"
#: What the benchmark's aggregator (issue 27) may do in the data owner's result bucket besides:
#: read an object by name (each run's ``pool.sealed``, encrypted under a key derived from the
#: dataset's DEK that only the same grants release), not list the bucket. Only aggregator
#: members get it; a role of its own, so its members never mix with ``BUCKET_ROLE``'s.
RESULT_READER_ROLE = "roles/storage.legacyObjectReader"
#: What Google's own Terraform sets as the provider issuer (tokens carry it without the slash).
CONFIDENTIAL_SPACE_ISSUER_URI = CONFIDENTIAL_SPACE_ISSUER + "/"
STS_AUDIENCE = "https://sts.googleapis.com"
#: Google's documented limit on an attribute condition.
MAX_CONDITION_CHARS = 4096
_DISPLAY_NAME = "sealbench workloads"
_CEL_SAFE = re.compile(r"^[A-Za-z0-9:._-]{1,400}$")
_ID = re.compile(r"^[a-z0-9-]{4,32}$")
_KEY_NAME = re.compile(r"^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
_URL = re.compile(r"^https?://[A-Za-z0-9.:-]+(/[A-Za-z0-9._~/-]*)?$")
_SUBJECT_MAPPING = (
    "'gcpcs::' + assertion.submods.container.image_digest + '::' + "
    "assertion.submods.gce.project_number + '::' + assertion.submods.gce.instance_id"
)


def cel_string(value: str) -> str:
    """A CEL string literal of ``value``, which must be a digest, uid or similar token made of
    ``[A-Za-z0-9:._-]`` (anything else is refused, so no quoting games are possible)."""
    if not _CEL_SAFE.match(value):
        raise PolicyInputError(f"refusing to put {value[:80]!r} into a CEL expression")
    return f"'{value}'"


@dataclass(frozen=True)
class PoolProvider:
    """A workload identity pool provider, addressed by project *number*, pool and provider id."""

    project_number: str
    pool_id: str
    provider_id: str

    def __post_init__(self) -> None:
        if not self.project_number.isdigit():
            raise PolicyInputError(f"project number {self.project_number!r} is not numeric")
        for what, value in (("pool id", self.pool_id), ("provider id", self.provider_id)):
            if not _ID.match(value):
                raise PolicyInputError(f"{what} {value!r} must match [a-z0-9-]{{4,32}}")

    @property
    def pool_name(self) -> str:
        return (
            f"projects/{self.project_number}/locations/global/workloadIdentityPools/{self.pool_id}"
        )

    @property
    def name(self) -> str:
        return f"{self.pool_name}/providers/{self.provider_id}"


@dataclass(frozen=True)
class AssetPolicy:
    """The workloads allowed to use one owner's asset, and where that is enforced.

    ``include_data`` is True for a data owner (each workload names the dataset, but for the
    benchmark aggregators it admits: no dataset, the benchmark's pool recipient; issue 27) and
    False for a model owner (the dataset field of the uid is ``-``;
    :meth:`WorkloadIdentity.without_data`).
    """

    provider: PoolProvider
    key_name: str
    bucket: str | None
    workloads: frozenset[WorkloadIdentity]
    include_data: bool
    issuer_uri: str = CONFIDENTIAL_SPACE_ISSUER_URI
    allowed_audiences: tuple[str, ...] = (STS_AUDIENCE,)
    #: The data owner's result bucket, where the same workloads get ``RESULT_BUCKET_ROLE``.
    result_bucket: str | None = None
    #: The token destinations the condition pins: None for Google's (the endpoint overrides
    #: must be absent), the mock cloud's exact URLs for the mock's issuer.
    endpoints: ServiceEndpoints | None = None
    #: Image digests of benchmarks that accept confidential-GPU preview images (issue 18): for
    #: these only, the condition accepts EXPERIMENTAL with ``nvidia_gpu.cc_mode == 'ON'``.
    experimental_gpu_images: frozenset[str] = frozenset()
    #: The ids of those benchmarks: EXPERIMENTAL only for runs naming one of them (issue 28).
    experimental_benchmark_ids: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not _KEY_NAME.match(self.key_name):
            raise PolicyInputError(f"{self.key_name!r} is not a KMS crypto key name")
        for bucket in (self.bucket, self.result_bucket):
            if bucket is not None and not _BUCKET.match(bucket):
                raise PolicyInputError(f"{bucket!r} is not a bucket name")
        if not _URL.fullmatch(self.issuer_uri):
            raise PolicyInputError(f"{self.issuer_uri!r} is not an issuer URL")
        google = self.issuer_uri.rstrip("/") == CONFIDENTIAL_SPACE_ISSUER_URI.rstrip("/")
        subject = (
            "a Confidential Space provider" if google
            else f"the issuer {self.issuer_uri!r} is not Google's: its provider"
        )
        try:
            check_endpoint_pin(self.endpoints, fixed=google, subject=subject)
        except ConditionInputError as exc:
            raise PolicyInputError(str(exc)) from exc
        for workload in self.workloads:
            if not isinstance(workload, WorkloadIdentity):
                raise PolicyInputError("workloads must be WorkloadIdentity values")
            if self.include_data and workload.data_digest is None and not _is_aggregator(
                    workload, self.workloads):
                raise PolicyInputError(
                    "a data owner's policy needs the dataset digest of every workload but a "
                    "benchmark aggregator's, whose image evaluates nothing here and whose "
                    "release is sealed to the registry, not to a result key of this policy"
                )

    def uids(self) -> frozenset[str]:
        """The ``attribute.workload_uid`` values to grant."""
        if self.include_data:
            return frozenset(w.uid() for w in self.workloads)
        return frozenset(w.without_data().uid() for w in self.workloads)

    def aggregator_members(self) -> frozenset[str]:
        """The members of the aggregator identities only (issue 27): those that also read the
        result bucket, where each run left the ``pool.sealed`` the aggregator pools."""
        platform, pool = self.platform(), self.provider.pool_name
        uids = {w.uid() for w in self.workloads
                if self.include_data and _is_aggregator(w, self.workloads)}
        try:
            return frozenset(platform.grantee(pool, uid) for uid in uids)
        except ValueError as exc:
            raise PolicyInputError(str(exc)) from exc

    def platform(self) -> Platform:
        """The platform whose verifier is the provider's issuer (found by entry point): it
        renders the key-release condition and names the grantees."""
        try:
            return platform_for_issuer(self.issuer_uri.rstrip("/"))
        except UnknownPlatformError as exc:
            raise PolicyInputError(str(exc)) from exc

    def members(self) -> frozenset[str]:
        platform, pool = self.platform(), self.provider.pool_name
        try:
            return frozenset(platform.grantee(pool, uid) for uid in self.uids())
        except ValueError as exc:
            raise PolicyInputError(str(exc)) from exc


def _is_aggregator(workload: WorkloadIdentity, workloads: frozenset[WorkloadIdentity]) -> bool:
    """A benchmark's aggregator (issue 27): it pools many datasets, so its identity leaves the
    data field open (its recipient is the benchmark's pool recipient, the registry's key). The
    only identity without a dataset a data owner's policy grants, and only for an image that no
    identity of the same policy is granted with a dataset (the evaluation image never runs
    without its dataset's digest bound; see :mod:`sealbench.gcp._cs_cel` for why no evaluation
    run can reach an aggregator's uid), a recipient that is no evaluation's result key, and
    beside an evaluation of the same model, benchmark and pin (the one it pools)."""
    if workload.data_digest is not None:
        return False
    evaluations = [w for w in workloads if w.data_digest is not None]
    # beside the evaluation it pools (same model, benchmark and pin), as the grants make it
    beside = any((w.model_digest, w.benchmark_id, w.metrics_version) == (
        workload.model_digest, workload.benchmark_id, workload.metrics_version)
        for w in evaluations)
    # nor to a data owner's own result key: the release is sealed to the registry, which
    # debits each one it opens; a key that can open it outside the registry could read many
    return beside and workload.image_digest not in {w.image_digest for w in evaluations} \
        and workload.recipient_digest not in {w.recipient_digest for w in evaluations}


def attribute_mapping(include_data: bool) -> dict[str, str]:
    return {
        "google.subject": _SUBJECT_MAPPING,
        f"attribute.{WORKLOAD_UID_ATTRIBUTE}": uid_mapping_expression(include_data=include_data),
        "attribute.image_digest": "assertion.submods.container.image_digest",
    }


def attribute_condition(context: ConditionContext, platform: Platform | None = None) -> str:
    """The provider's attribute condition (see the module docstring), rendered by ``platform``'s
    :meth:`~sealbench.platforms.platform.Platform.key_release_condition` (default: Confidential
    Space's), within Google's limit."""
    renderer = ConfidentialSpacePlatform() if platform is None else platform
    try:
        condition = renderer.key_release_condition(context)
    except (ConditionInputError, ValueError) as exc:
        raise PolicyInputError(str(exc)) from exc
    if len(condition) > MAX_CONDITION_CHARS:
        raise PolicyInputError(
            f"the attribute condition for {len(context.image_digests)} images exceeds "
            f"{MAX_CONDITION_CHARS} characters"
        )
    return condition


def condition_context(policy: AssetPolicy) -> ConditionContext:
    """What ``policy``'s condition is rendered for."""
    return ConditionContext(
        image_digests=frozenset(w.image_digest for w in policy.workloads),
        include_data=policy.include_data,
        endpoints=policy.endpoints,
        experimental_gpu_images=policy.experimental_gpu_images,
        experimental_benchmark_ids=policy.experimental_benchmark_ids,
    )


def provider_body(policy: AssetPolicy) -> dict[str, Any]:
    """The ``WorkloadIdentityPoolProvider`` REST body for ``policy``."""
    return {
        "displayName": _DISPLAY_NAME,
        "disabled": False,
        "attributeMapping": attribute_mapping(policy.include_data),
        "attributeCondition": attribute_condition(condition_context(policy), policy.platform()),
        "oidc": {
            "issuerUri": policy.issuer_uri,
            "allowedAudiences": list(policy.allowed_audiences),
        },
    }


def managed_prefix(provider: PoolProvider) -> str:
    """Members under this prefix belong to the policy writer; all others are left alone."""
    return (
        f"principalSet://iam.googleapis.com/{provider.pool_name}/"
        f"attribute.{WORKLOAD_UID_ATTRIBUTE}/"
    )


@dataclass(frozen=True)
class BindingChange:
    """The members the writer added to and removed from one role of one resource."""

    resource: str
    role: str
    added: tuple[str, ...]
    removed: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed)


def merge_bindings(
    policy: Mapping[str, Any], role: str, prefix: str, desired: frozenset[str]
) -> tuple[dict[str, Any], tuple[str, ...], tuple[str, ...]]:
    """Return ``(new_policy, added, removed)``: ``policy`` with exactly ``desired`` as the
    members of ``role`` under ``prefix``, every other member and binding kept as they were."""
    if any(not m.startswith(prefix) for m in desired):
        raise PolicyInputError("a desired member lies outside the writer's managed prefix")
    bindings = [dict(b) for b in policy.get("bindings", [])]
    current: set[str] = set()
    target = None
    for binding in bindings:
        if binding.get("role") == role and "condition" not in binding:
            target = binding
            current |= {m for m in binding.get("members", []) if m.startswith(prefix)}
    added = tuple(sorted(desired - current))
    removed = tuple(sorted(current - desired))
    if not added and not removed:
        return dict(policy), (), ()
    for binding in bindings:
        if binding.get("role") == role and "condition" not in binding:
            binding["members"] = [m for m in binding.get("members", []) if m not in removed]
    if added:
        if target is None:
            target = {"role": role, "members": []}
            bindings.append(target)
        target["members"] = sorted({*target.get("members", []), *added})
    bindings = [b for b in bindings if b.get("members") or b.get("role") != role]
    new_policy = {k: v for k, v in policy.items() if k != "bindings"}
    new_policy["bindings"] = bindings
    return new_policy, added, removed
