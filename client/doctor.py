"""``sealbench doctor``: read-only checks of what an owner's runs need in its cloud, each with the
command that fixes a failure. The library behind the command: :func:`check_owner_cloud` returns
one :class:`Check` per item and never changes anything (the KMS probe encrypts a constant, which
writes nothing).

Checked today, on Google Cloud and on the mock alike (the same client code): credentials,
the KMS key (exists, is enabled, the caller can encrypt with it), the bucket (exists, the caller
can create objects in it), the workload identity pool provider (exists: ``policy sync`` writes
it), and, given a benchmark, that its image is named by digest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sealbench.client.cloud import GcpOwnerCloud
from sealbench.client.errors import ClientError

if TYPE_CHECKING:
    from sealbench.server.schemas import BenchmarkPublic

__all__ = ["Check", "check_owner_cloud"]

_PROBE = b"sealbench doctor probe"


class ProbeRefused(ClientError):  # noqa: N818 - reads as what happened
    """A check found the resource but not what a run needs."""


@dataclass(frozen=True)
class Check:
    """One item: ``ok``, what was found, and (when not ok) the command that fixes it."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None


def _run(name: str, probe: Callable[[], str], fix: str) -> Check:
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

    from sealbench.cloud.errors import CloudError

    try:
        return Check(name, True, probe())
    except gexc.NotFound as exc:
        return Check(name, False, f"not found: {exc.message}", fix)
    except gexc.Forbidden as exc:
        return Check(name, False, f"permission denied: {exc.message}", fix)
    except (gexc.GoogleAPIError, auth_exc.GoogleAuthError, CloudError, ClientError) as exc:
        return Check(name, False, f"{type(exc).__name__}: {str(exc)[:300]}", fix)


def check_owner_cloud(
    cloud: GcpOwnerCloud, benchmark: BenchmarkPublic | None = None
) -> list[Check]:
    """Every check for ``cloud`` (and ``benchmark``'s image, when given)."""
    from google.auth.transport.requests import AuthorizedSession, Request

    from sealbench.cloud.gcs import make_storage_client
    from sealbench.cloud.kms import make_kms_client

    project, key = cloud.project_id, cloud.key_name
    checks: list[Check] = []

    def credentials() -> str:
        creds = cloud.credentials()
        if not creds.valid:
            creds.refresh(Request())  # type: ignore[no-untyped-call]
        who = getattr(creds, "service_account_email", None)
        return f"valid ({who})" if who and who != "default" else "valid (your own account)"

    checks.append(_run("credentials", credentials,
                       "gcloud auth application-default login"))
    if not checks[-1].ok:
        return checks

    def kms_key() -> str:
        client = make_kms_client(cloud.credentials(), cloud.apis.kms)
        found = client.get_crypto_key(request={"name": key})
        client.encrypt(request={"name": key, "plaintext": _PROBE})
        return f"{key} ({found.purpose.name}), encrypt allowed"

    ring = key.rsplit("/cryptoKeys/", 1)[0]
    checks.append(_run(
        "KMS key", kms_key,
        f"gcloud kms keyrings create {cloud.key_ring} --location {cloud.location} "
        f"--project {project}; gcloud kms keys create {cloud.key} --keyring {cloud.key_ring} "
        f"--location {cloud.location} --purpose encryption --project {project} "
        f"(or grant roles/cloudkms.cryptoKeyEncrypter on {ring})",
    ))

    def bucket() -> str:
        client = make_storage_client(project, cloud.credentials(), cloud.apis.storage)
        found = client.get_bucket(cloud.bucket)
        allowed = found.test_iam_permissions(["storage.objects.create"])
        if "storage.objects.create" not in allowed:
            raise ProbeRefused(f"cannot create objects in gs://{cloud.bucket}")
        return f"gs://{cloud.bucket}, object creation allowed"

    checks.append(_run(
        "bucket", bucket,
        f"gcloud storage buckets create gs://{cloud.bucket} --project {project} (or grant "
        f"roles/storage.objectAdmin on it)",
    ))

    def provider() -> str:
        session = AuthorizedSession(cloud.credentials())  # type: ignore[no-untyped-call]
        name = cloud.pool_provider_name()
        reply = session.get(f"{cloud.apis.iam}/v1/{name}", timeout=30)
        if reply.status_code == 404:
            raise ProbeRefused(f"{name} does not exist yet")
        if reply.status_code != 200:
            raise ProbeRefused(f"{name}: HTTP {reply.status_code}")
        issuer = reply.json().get("oidc", {}).get("issuerUri", "?")
        return f"{name} (trusts {issuer})"

    checks.append(_run(
        "pool provider", provider,
        "sealbench policy sync --dataset D (or --model M) creates the pool and provider",
    ))
    if benchmark is not None:
        digest_named = "@sha256:" in benchmark.image_reference
        checks.append(Check(
            "image reference", digest_named, benchmark.image_reference,
            None if digest_named else "the authority pins the image by digest: "
            "'sealbench benchmark create --image-reference REPO@sha256:… --image-digest …'",
        ))
    return checks
