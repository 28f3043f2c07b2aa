"""Failures in an owner's Google Cloud project, translated once into the one-line
:class:`~sealbench.platforms.errors.OwnerCloudError` the CLI prints: what failed, naming the
resource (API, key, bucket, project), with the ``gcloud`` command that fixes it as the hint.
Reads the cause chain: Google's ``SERVICE_DISABLED`` errors, the cloud adapters' errors
(:mod:`sealbench.platforms.errors`), the REST messages of Cloud Storage and IAM, google-auth's."""

from __future__ import annotations

import re

from sealbench.platforms.errors import OwnerCloudError as CloudError

__all__ = ["api_disabled", "cloud_failure"]


def api_disabled(exc: BaseException) -> str | None:
    """The API that Google's ``SERVICE_DISABLED`` error ``exc`` (or one of its causes) names."""
    for seen in _causes(exc):
        reason = getattr(seen, "reason", None)
        message = str(getattr(seen, "message", "") or seen)
        if reason == "SERVICE_DISABLED" or "it is disabled. Enable it by visiting" in message:
            metadata = getattr(seen, "metadata", None) or {}
            named = re.search(r"/apis/api/([a-z0-9.-]+)/", message)
            return str(metadata.get("service") or (named.group(1) if named else "an API"))
    return None


def _causes(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 16:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


_BUCKET_GONE = ("The specified bucket does not exist", "bucket does not exist")
_KEY_STATE = re.compile(r"current state is: (DESTROYED|DESTROY_SCHEDULED|DISABLED)")


def cloud_failure(
    exc: BaseException, doing: str, *, project: str, bucket: str | None = None
) -> CloudError:
    """The one-line :class:`~sealbench.platforms.errors.OwnerCloudError` for a failure in the
    owner's project while ``doing``: what failed, naming the resource, and as its hint the
    ``gcloud`` command that fixes it (a disabled API, a refused key or bucket, a missing or
    destroyed key, a missing bucket); other failures keep their own message and a generic hint."""
    from google.auth.exceptions import GoogleAuthError

    from sealbench.platforms.errors import (
        KeyAccessDenied,
        KeyNotFound,
        KmsError,
        StorageAccessDenied,
    )

    def text(e: BaseException) -> str:
        return str(getattr(e, "message", "") or e)

    service = api_disabled(exc)
    if service is not None:
        return CloudError(
            f"{doing} failed: the {service} API is disabled in project {project}",
            hint=f"gcloud services enable {service} --project {project}",
        )
    for e in _causes(exc):
        if isinstance(e, GoogleAuthError):
            return CloudError(
                f"{doing} failed: your Google Cloud credentials could not be used "
                f"({type(e).__name__})",
                hint="gcloud auth application-default login (or check "
                "GOOGLE_APPLICATION_CREDENTIALS and --impersonate-service-account)",
            )
        if isinstance(e, KeyAccessDenied):
            return CloudError(
                f"{doing} failed: {e}",
                hint=f"a project owner grants you the key: gcloud kms keys add-iam-policy-binding "
                f"{e.key_name} --member=user:YOUR_EMAIL "
                "--role=roles/cloudkms.cryptoKeyEncrypterDecrypter",
            )
        if isinstance(e, KmsError) and (state := _KEY_STATE.search(text(e))):
            return CloudError(
                f"{doing} failed: the primary version of key {e.key_name} is {state.group(1)}; "
                "what was sealed with it cannot be opened",
                hint=f"gcloud kms keys versions create --key {e.key_name} --primary, then seal "
                "your assets again (and re-run 'sealbench policy sync')",
            )
        if isinstance(e, KeyNotFound):
            return CloudError(
                f"{doing} failed: {e}",
                hint=f"gcloud kms keys create {e.key_name} --purpose encryption (its key ring "
                "first: gcloud kms keyrings create)",
            )
        if bucket and any(marker in text(e) for marker in _BUCKET_GONE):
            return CloudError(
                f"{doing} failed: bucket gs://{bucket} does not exist",
                hint=f"gcloud storage buckets create gs://{bucket} --project {project}",
            )
        if isinstance(e, StorageAccessDenied) or (
            bucket and "does not have storage." in text(e)
        ):
            return CloudError(
                f"{doing} failed: permission denied on bucket gs://{bucket or '?'}",
                hint=f"a project owner grants you the bucket: gcloud storage buckets "
                f"add-iam-policy-binding gs://{bucket or 'BUCKET'} --member=user:YOUR_EMAIL "
                "--role=roles/storage.objectAdmin",
            )
        if "Permission '" in text(e) and "denied on resource" in text(e):
            return CloudError(
                f"{doing} failed: permission denied in project {project}",
                hint=f"a project owner grants you the role the message names: gcloud projects "
                f"add-iam-policy-binding {project} --member=user:YOUR_EMAIL --role=ROLE "
                f"({text(e)[:200]})",
            )
    return CloudError(f"{doing} failed: {str(exc)[:500]}",
                      hint="'sealbench doctor' checks your cloud and names the fix")
