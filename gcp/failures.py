"""Failures in an owner's Google Cloud project, translated once into the one-line
:class:`~sealbench.platforms.errors.OwnerCloudError` the CLI prints: what failed, naming the
resource (API, key, bucket, project), with the ``gcloud`` command that fixes it as the hint.
Reads the cause chain: Google's ``SERVICE_DISABLED`` and VPC Service Controls errors (a
perimeter's refusal named as such, never as a missing grant), the cloud adapters' errors
(:mod:`sealbench.platforms.errors`), the REST messages of Cloud Storage and IAM, google-auth's."""

from __future__ import annotations

import re

from sealbench.platforms.errors import OwnerCloudError as CloudError

__all__ = [
    "PERIMETER_REASONS",
    "api_disabled",
    "bucket_create_command",
    "cloud_failure",
    "perimeter_violation",
]

#: How Google names a VPC Service Controls refusal: the ``PreconditionFailure`` violation type
#: and the ``ErrorInfo`` reason of the google.rpc error model (Cloud KMS, IAM, STS), and the
#: JSON API's ``errors[].reason`` (Cloud Storage).
PERIMETER_REASONS = frozenset({"VPC_SERVICE_CONTROLS", "SECURITY_POLICY_VIOLATED",
                               "vpcServiceControls"})
_PERIMETER_ID = re.compile(r"vpcServiceControlsUniqueIdentifier:\s*([A-Za-z0-9_-]+)")


def bucket_create_command(bucket: str, project: str, location: str = "LOCATION") -> str:
    """The ``gcloud`` command that creates a bucket as sealbench needs it: uniform bucket-level
    access (without it Google refuses every federated workload the bucket's policy grants, and
    secure-by-default organisations refuse to create it) and public access prevention."""
    return (f"gcloud storage buckets create gs://{bucket} --project {project} --location "
            f"{location} --uniform-bucket-level-access --public-access-prevention")


def perimeter_violation(exc: BaseException) -> str | None:
    """Google's ``vpcServiceControlsUniqueIdentifier`` (or ``"unknown"``) when ``exc`` (or one
    of its causes) is a VPC Service Controls refusal (:data:`PERIMETER_REASONS` in its error
    details or reasons, or its message's identifier), else None."""
    for seen in _causes(exc):
        message = str(getattr(seen, "message", "") or seen)
        found = _PERIMETER_ID.search(message)
        reasons = {getattr(seen, "reason", None)}
        for detail in list(getattr(seen, "details", None) or ()) + list(
                getattr(seen, "errors", None) or ()):
            reasons |= set(_detail_reasons(detail))
        if found or reasons & PERIMETER_REASONS:
            return found.group(1) if found else "unknown"
    return None


def _detail_reasons(detail: object) -> list[str]:
    """The reasons and violation types of one error detail: a dict (REST, JSON API) or a
    google.rpc message (gRPC)."""
    if isinstance(detail, dict):
        violations = detail.get("violations") or []
        return [str(detail.get("reason", "")), *(
            str(v.get("type", "")) for v in violations if isinstance(v, dict))]
    found = [str(getattr(detail, "reason", ""))]
    found += [str(getattr(v, "type", "")) for v in getattr(detail, "violations", ()) or ()]
    return found


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
    reference = perimeter_violation(exc)
    if reference is not None:
        return CloudError(
            f"{doing} failed: a VPC Service Controls perimeter around project {project} "
            f"refused it (vpcServiceControlsUniqueIdentifier {reference}); no IAM grant "
            "admits a request the perimeter refuses",
            hint="the perimeter's administrator adds an ingress rule for this caller and "
            "for the runners' workload identity pool (docs/gcp-setup.md, 'Inside a VPC "
            "Service Controls perimeter'); the identifier finds the refusal in the "
            "perimeter's audit log",
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
                hint=bucket_create_command(bucket, project),
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
