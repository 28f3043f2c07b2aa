"""Apply an :class:`~sealbench.gcp.policy.AssetPolicy` over Google's REST APIs: the workload
identity pool and provider (``iam.googleapis.com/v1 projects.locations.workloadIdentityPools
[.providers]`` create / get / patch, waiting on long-running operations), the KMS key's IAM
policy (``cloudkms.googleapis.com/v1 …:getIamPolicy`` / ``:setIamPolicy`` with the etag) and the
bucket's (``storage.googleapis.com/storage/v1/b/{bucket}/iam``). Read-modify-write with etags,
retried on concurrent changes; only the writer's own members are touched
(:func:`~sealbench.gcp.policy.merge_bindings`). Policies are read and written at **version 3**,
which Google requires for any policy with a conditional role binding (an owner's key or bucket
may already have one: read at version 1 it is refused, written back at version 1 its conditions
would be lost); the writer's own bindings are unconditional and conditional ones are kept as
they are. Base URLs are injectable, so the same code
writes to the mock.

Nothing is written until every check passed (:meth:`PolicyWriter.sync` reads first, issue 44):

* a soft-deleted (``state: DELETED``) pool or provider is undeleted only when the owner agrees
  (``undelete=True``: ``sealbench policy sync --undelete``), else refused with the command
  (:class:`PoolDeleted`); never reported as present or unchanged (it federates nothing for its
  30 days, and its id cannot be created again meanwhile);
* each bucket has uniform bucket-level access (Google admits workload identity federation
  principals to Cloud Storage only there: every run would be refused whatever is granted),
  else :class:`BucketNotUniform`, with the command that turns it on;
* each allow policy stays within Google's :data:`MAX_PRINCIPALS` (1,500 principals, every
  appearance in every binding counted, conditional ones too), else :class:`PolicyTooLarge`
  with the remedy: a bucket used for both assets and results holds each workload twice, so it
  reaches the limit at half the approvals the key does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import requests
from google.auth.credentials import Credentials
from google.auth.transport.requests import AuthorizedSession

from sealbench.gcp.policy import (
    BUCKET_ROLE,
    KEY_ROLE,
    RESULT_BUCKET_ROLE,
    RESULT_READER_ROLE,
    AssetPolicy,
    BindingChange,
    managed_prefix,
    merge_bindings,
    provider_body,
)
from sealbench.platforms.errors import ConcurrentPolicyChange, PolicyWriteError

__all__ = [
    "IAM_URL",
    "KMS_URL",
    "MAX_PRINCIPALS",
    "OPERATION_DEADLINE_S",
    "POLICY_TIMEOUT_S",
    "STORAGE_URL",
    "BucketNotUniform",
    "PolicyTooLarge",
    "PolicyWriter",
    "PoolDeleted",
    "SyncReport",
    "count_principals",
]

_log = logging.getLogger("sealbench.platforms")

#: The IAM policy version read and written (3: conditional role bindings kept).
_POLICY_VERSION = "3"


def _versioned(policy: dict[str, Any]) -> dict[str, Any]:
    return {**policy, "version": int(_POLICY_VERSION)}

IAM_URL = "https://iam.googleapis.com"
KMS_URL = "https://cloudkms.googleapis.com"
STORAGE_URL = "https://storage.googleapis.com"
#: Seconds allowed for each REST call.
POLICY_TIMEOUT_S = 30.0
#: Seconds to wait for a pool or provider operation to finish.
OPERATION_DEADLINE_S = 120.0
_ETAG_RETRIES = 5
#: Google's limit on the principals of one allow policy (IAM quotas and limits: every
#: appearance in every role binding counts; principals are not deduplicated).
MAX_PRINCIPALS = 1500


class PoolDeleted(PolicyWriteError):  # noqa: N818 - reads as what was found
    """The workload identity pool or provider is soft-deleted: it federates nothing until
    undeleted (``command``), and cannot be created again under its id meanwhile."""

    def __init__(self, message: str, *, command: str) -> None:
        super().__init__(message)
        self.command = command


class BucketNotUniform(PolicyWriteError):  # noqa: N818 - reads as what was found
    """A bucket to grant has no uniform bucket-level access (``command`` turns it on)."""

    def __init__(self, bucket: str) -> None:
        self.bucket = bucket
        self.command = (f"gcloud storage buckets update gs://{bucket} "
                        "--uniform-bucket-level-access")
        super().__init__(
            f"bucket gs://{bucket} has no uniform bucket-level access: Google refuses every "
            "workload identity federation principal on it, so every run would be refused "
            "whatever this sync grants; nothing was written")


class PolicyTooLarge(PolicyWriteError):  # noqa: N818 - reads as what was found
    """An allow policy would exceed :data:`MAX_PRINCIPALS`; nothing was written."""

    def __init__(self, resource: str, principals: int, shared: bool) -> None:
        self.resource = resource
        self.principals = principals
        remedy = ("give results a bucket of their own (--result-bucket): this bucket holds "
                  "each workload twice, for the assets and for the results; " if shared else "")
        super().__init__(
            f"the IAM policy of {resource} would hold {principals} principals, over Google's "
            f"limit of {MAX_PRINCIPALS} per allow policy; nothing was written. {remedy}revoke "
            "approvals no longer needed, or put further assets under another key and bucket")


def count_principals(policy: dict[str, Any]) -> int:
    """The principals of an allow policy as Google counts them against :data:`MAX_PRINCIPALS`:
    every member of every binding, conditional or not, without deduplication."""
    return sum(len(b.get("members") or ()) for b in policy.get("bindings") or ())
_PROVIDER_FIELDS = ("displayName", "disabled", "attributeMapping", "attributeCondition", "oidc")


@dataclass(frozen=True)
class SyncReport:
    """What one :meth:`PolicyWriter.sync` changed."""

    pool_created: bool
    provider: Literal["created", "updated", "unchanged"]
    key: BindingChange
    bucket: BindingChange | None
    result_bucket: BindingChange | None = None
    #: The aggregators' read access to the result bucket (issue 27; None without a result
    #: bucket).
    result_readers: BindingChange | None = None
    #: The soft-deleted pool and provider this sync undeleted (``undelete=True``).
    undeleted: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return (
            bool(self.undeleted)
            or self.pool_created
            or self.provider != "unchanged"
            or self.key.changed
            or (self.bucket is not None and self.bucket.changed)
            or (self.result_bucket is not None and self.result_bucket.changed)
            or (self.result_readers is not None and self.result_readers.changed)
        )


def _differs(field: str, current: dict[str, Any], desired: dict[str, Any]) -> bool:
    """Compare one provider field as the API returns it (omitted booleans are false; the
    ``oidc`` block may carry fields the writer does not manage)."""
    if field == "disabled":
        return bool(current.get("disabled", False)) != bool(desired["disabled"])
    if field == "oidc":
        have = current.get("oidc") or {}
        want = desired["oidc"]
        return bool(
            have.get("issuerUri") != want["issuerUri"]
            or list(have.get("allowedAudiences") or []) != want["allowedAudiences"]
        )
    return bool(current.get(field) != desired[field])


class PolicyWriter:
    """Writes asset policies with an authorized ``requests`` session (the owner's identity)."""

    def __init__(
        self,
        session: requests.Session,
        *,
        iam_url: str = IAM_URL,
        kms_url: str = KMS_URL,
        storage_url: str = STORAGE_URL,
        timeout: float = POLICY_TIMEOUT_S,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._session = session
        self._iam = iam_url.rstrip("/")
        self._kms = kms_url.rstrip("/")
        self._storage = storage_url.rstrip("/")
        self._timeout = timeout
        self._sleep = sleep

    @classmethod
    def from_credentials(
        cls,
        credentials: Credentials,
        *,
        iam_url: str = IAM_URL,
        kms_url: str = KMS_URL,
        storage_url: str = STORAGE_URL,
    ) -> PolicyWriter:
        """A writer acting as ``credentials`` (the asset owner) through google-auth's
        ``AuthorizedSession``."""
        session = AuthorizedSession(credentials)  # type: ignore[no-untyped-call]
        return cls(session, iam_url=iam_url, kms_url=kms_url, storage_url=storage_url)

    # -- HTTP --------------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        params: dict[str, str] | None = None,
        allow: tuple[int, ...] = (),
    ) -> tuple[int, dict[str, Any]]:
        try:
            response = self._session.request(
                method, url, json=json, params=params, timeout=self._timeout
            )
        except requests.RequestException as exc:
            raise PolicyWriteError(f"{method} {url}: {type(exc).__name__}: {exc}") from exc
        try:
            body: dict[str, Any] = response.json() if response.content else {}
        except ValueError:
            body = {}
        if response.status_code >= 400 and response.status_code not in allow:
            error = body.get("error", {})
            message = error.get("message") if isinstance(error, dict) else str(error)
            raise PolicyWriteError(
                f"{method} {url} failed: HTTP {response.status_code}: {message or response.reason}"
            )
        return response.status_code, body

    def _wait(self, operation: dict[str, Any]) -> dict[str, Any]:
        deadline = time.monotonic() + OPERATION_DEADLINE_S
        delay = 0.5
        while not operation.get("done"):
            if time.monotonic() > deadline:
                raise PolicyWriteError(f"operation {operation.get('name')} did not finish")
            self._sleep(delay)
            delay = min(delay * 2, 10.0)
            _, operation = self._call("GET", f"{self._iam}/v1/{operation['name']}")
        if "error" in operation:
            raise PolicyWriteError(
                f"operation {operation.get('name')} failed: {operation['error']}"
            )
        return operation

    # -- pool and provider ---------------------------------------------------------------------

    def _ensure_pool(self, policy: AssetPolicy) -> bool:
        pool = policy.provider.pool_name
        status, _ = self._call("GET", f"{self._iam}/v1/{pool}", allow=(404,))
        if status != 404:
            return False
        parent, _, pool_id = pool.rpartition("/")
        _, operation = self._call(
            "POST",
            f"{self._iam}/v1/{parent}",
            params={"workloadIdentityPoolId": pool_id},
            json={"displayName": "sealbench", "description": "sealbench workload identities"},
        )
        self._wait(operation)
        return True

    def _ensure_provider(self, policy: AssetPolicy) -> Literal["created", "updated", "unchanged"]:
        name = policy.provider.name
        desired = provider_body(policy)
        status, current = self._call("GET", f"{self._iam}/v1/{name}", allow=(404,))
        if status == 404:
            parent, _, provider_id = name.rpartition("/")
            _, operation = self._call(
                "POST",
                f"{self._iam}/v1/{parent}",
                params={"workloadIdentityPoolProviderId": provider_id},
                json=desired,
            )
            self._wait(operation)
            return "created"
        differing = [f for f in _PROVIDER_FIELDS if _differs(f, current, desired)]
        if not differing:
            return "unchanged"
        _, operation = self._call(
            "PATCH",
            f"{self._iam}/v1/{name}",
            params={"updateMask": ",".join(differing)},
            json={f: desired[f] for f in differing},
        )
        self._wait(operation)
        return "updated"

    # -- IAM bindings --------------------------------------------------------------------------

    def _sync_bindings(
        self,
        resource: str,
        role: str,
        policy: AssetPolicy,
        read: Callable[[], dict[str, Any]],
        write: Callable[[dict[str, Any]], int],
        members: frozenset[str] | None = None,
    ) -> BindingChange:
        prefix = managed_prefix(policy.provider)
        desired = policy.members() if members is None else members
        for _ in range(_ETAG_RETRIES):
            current = read()
            updated, added, removed = merge_bindings(current, role, prefix, desired)
            if not added and not removed:
                return BindingChange(resource, role, (), ())
            if write(updated) < 400:
                _log.info(
                    "policy: %s %s: +%d -%d members", resource, role, len(added), len(removed)
                )
                return BindingChange(resource, role, added, removed)
        raise ConcurrentPolicyChange(
            f"the IAM policy of {resource} kept changing; gave up after {_ETAG_RETRIES} tries"
        )

    def _sync_key(self, policy: AssetPolicy) -> BindingChange:
        url = f"{self._kms}/v1/{policy.key_name}"

        def read() -> dict[str, Any]:
            return self._call("GET", f"{url}:getIamPolicy",
                              params={"options.requestedPolicyVersion": _POLICY_VERSION})[1]

        def write(updated: dict[str, Any]) -> int:
            status, _ = self._call("POST", f"{url}:setIamPolicy",
                                   json={"policy": _versioned(updated)}, allow=(409,))
            return status

        return self._sync_bindings(policy.key_name, KEY_ROLE, policy, read, write)

    def _sync_bucket(self, policy: AssetPolicy, bucket: str, role: str,
                     members: frozenset[str] | None = None) -> BindingChange:
        url = f"{self._storage}/storage/v1/b/{bucket}/iam"

        def read() -> dict[str, Any]:
            return self._call("GET", url,
                              params={"optionsRequestedPolicyVersion": _POLICY_VERSION})[1]

        def write(updated: dict[str, Any]) -> int:
            return self._call("PUT", url, json=_versioned(updated), allow=(409, 412))[0]

        return self._sync_bindings(f"gs://{bucket}", role, policy, read, write, members)

    # -- checks before any write (see the module docstring) -------------------------------------

    def _deleted(self, policy: AssetPolicy) -> list[tuple[str, str]]:
        """``(name, undelete command)`` of the pool and provider that are soft-deleted."""
        pool, provider = policy.provider.pool_name, policy.provider.name
        project = policy.provider.project_number
        found = []
        for name, command in (
            (pool, f"gcloud iam workload-identity-pools undelete {policy.provider.pool_id} "
                   f"--location=global --project={project}"),
            (provider, f"gcloud iam workload-identity-pools providers undelete "
                       f"{policy.provider.provider_id} --workload-identity-pool="
                       f"{policy.provider.pool_id} --location=global --project={project}"),
        ):
            status, body = self._call("GET", f"{self._iam}/v1/{name}", allow=(404,))
            if status == 404:
                break  # no pool: no provider either, both are created
            if body.get("state") == "DELETED":
                found.append((name, command))
        return found

    def _check_uniform(self, bucket: str) -> None:
        """Refuse a bucket without uniform bucket-level access; one whose settings the owner
        may not read is used as it is (doctor reports it)."""
        status, body = self._call("GET", f"{self._storage}/storage/v1/b/{bucket}",
                                  params={"fields": "iamConfiguration"}, allow=(403,))
        if status == 403:
            _log.warning("cannot read the access settings of gs://%s; not checking its uniform "
                         "bucket-level access", bucket)
            return
        uniform = ((body.get("iamConfiguration") or {}).get("uniformBucketLevelAccess") or {})
        if not uniform.get("enabled"):
            raise BucketNotUniform(bucket)

    def _check_sizes(self, policy: AssetPolicy) -> None:
        """Refuse a sync that would take any allow policy past :data:`MAX_PRINCIPALS`: each
        policy as it is now, with this sync's members merged in (all its roles on the same
        resource together)."""
        prefix = managed_prefix(policy.provider)
        targets: list[tuple[str, dict[str, Any], list[tuple[str, frozenset[str]]]]] = [
            (policy.key_name, self._read_key(policy), [(KEY_ROLE, policy.members())])]
        grants: dict[str, list[tuple[str, frozenset[str]]]] = {}
        if policy.bucket:
            grants.setdefault(policy.bucket, []).append((BUCKET_ROLE, policy.members()))
        if policy.result_bucket:
            grants.setdefault(policy.result_bucket, []).extend(
                [(RESULT_BUCKET_ROLE, policy.members()),
                 (RESULT_READER_ROLE, policy.aggregator_members())])
        targets += [(f"gs://{b}", self._read_bucket(b), roles) for b, roles in grants.items()]
        for resource, current, roles in targets:
            merged = current
            for role, members in roles:
                merged = merge_bindings(merged, role, prefix, members)[0]
            principals = count_principals(merged)
            if principals > MAX_PRINCIPALS:
                raise PolicyTooLarge(resource, principals, shared=len(roles) > 1
                                     and policy.bucket == policy.result_bucket)

    def _read_key(self, policy: AssetPolicy) -> dict[str, Any]:
        return self._call("GET", f"{self._kms}/v1/{policy.key_name}:getIamPolicy",
                          params={"options.requestedPolicyVersion": _POLICY_VERSION})[1]

    def _read_bucket(self, bucket: str) -> dict[str, Any]:
        return self._call("GET", f"{self._storage}/storage/v1/b/{bucket}/iam",
                          params={"optionsRequestedPolicyVersion": _POLICY_VERSION})[1]

    def _undelete(self, name: str) -> None:
        _, operation = self._call("POST", f"{self._iam}/v1/{name}:undelete", json={})
        self._wait(operation)
        _log.info("policy: undeleted %s", name)

    def sync(self, policy: AssetPolicy, *, undelete: bool = False) -> SyncReport:
        """Make the pool, provider and bindings match ``policy``; idempotent. Everything is
        checked before anything is written (see the module docstring); a soft-deleted pool or
        provider is undeleted only with ``undelete``."""
        deleted = self._deleted(policy)
        if deleted and not undelete:
            names = " and ".join(name for name, _ in deleted)
            raise PoolDeleted(
                f"{names} {'is' if len(deleted) == 1 else 'are'} DELETED (soft-deleted, kept "
                "30 days): no workload federates through it, and its id cannot be created "
                "again meanwhile; nothing was written",
                command="; ".join(command for _, command in deleted))
        for granted in dict.fromkeys(b for b in (policy.bucket, policy.result_bucket) if b):
            self._check_uniform(granted)
        self._check_sizes(policy)
        for name, _ in deleted:  # the pool first: a provider of a deleted pool stays deleted
            self._undelete(name)
        pool_created = self._ensure_pool(policy)
        provider = self._ensure_provider(policy)
        key = self._sync_key(policy)
        bucket = self._sync_bucket(policy, policy.bucket, BUCKET_ROLE) if policy.bucket else None
        results = (
            self._sync_bucket(policy, policy.result_bucket, RESULT_BUCKET_ROLE)
            if policy.result_bucket
            else None
        )
        # the aggregator reads each run's pool.sealed there (issue 27)
        readers = (
            self._sync_bucket(policy, policy.result_bucket, RESULT_READER_ROLE,
                              policy.aggregator_members())
            if policy.result_bucket
            else None
        )
        return SyncReport(pool_created, provider, key, bucket, results, readers,
                          tuple(name for name, _ in deleted))
