"""Workload credentials: exchange the workload's attestation token at Google's Security Token
Service for a federated access token of one workload identity pool provider, using google-auth's
``external_account`` (identity pool) credentials. One credential per owner pool: the same
attestation token is exchanged at each owner's provider, whose attribute condition decides.

The credential config is exactly what ``gcloud iam workload-identity-pools create-cred-config``
writes for direct resource access (no service-account impersonation)::

    {"type": "external_account",
     "audience": "//iam.googleapis.com/projects/N/locations/global/workloadIdentityPools/P/
                  providers/V",                                   (one string, wrapped here)
     "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
     "token_url": "https://sts.googleapis.com/v1/token",
     "credential_source": {"file": "/run/container_launcher/attestation_verifier_claims_token"}}
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.auth import exceptions as auth_exc
from google.auth import identity_pool
from google.auth.credentials import Credentials

from sealbench.gcp._cs_claims import GOOGLE_ENDPOINTS
from sealbench.platforms.attester import DEFAULT_TOKEN_FILE, Attester
from sealbench.platforms.errors import AttesterError, CredentialError

__all__ = [
    "CLOUD_PLATFORM_SCOPE",
    "DEFAULT_STS_URL",
    "JWT_TOKEN_TYPE",
    "AttesterTokenSupplier",
    "credential_config",
    "provider_audience",
    "safe_auth_reason",
    "workload_credentials",
    "workload_credentials_from_attester",
]

DEFAULT_STS_URL = GOOGLE_ENDPOINTS.sts_url
JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"  # noqa: S105 - a type URN
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"

_PROVIDER_RE = re.compile(
    r"^(?://iam\.googleapis\.com/)?projects/(?P<number>[0-9]{1,20})/locations/global/"
    r"workloadIdentityPools/(?P<pool>[a-z0-9-]{4,32})/providers/(?P<provider>[a-z0-9-]{4,32})$"
)


def provider_audience(pool_provider: str) -> str:
    """The STS audience ``//iam.googleapis.com/projects/N/…/providers/V`` of a provider given as
    that audience or as its resource name ``projects/N/locations/global/…/providers/V``.
    The project must be given by number, as STS requires."""
    match = _PROVIDER_RE.match(pool_provider)
    if match is None:
        raise CredentialError(
            f"{pool_provider!r} is not projects/NUMBER/locations/global/"
            "workloadIdentityPools/POOL/providers/PROVIDER"
        )
    return (
        f"//iam.googleapis.com/projects/{match['number']}/locations/global/"
        f"workloadIdentityPools/{match['pool']}/providers/{match['provider']}"
    )


def credential_config(
    pool_provider: str, *, token_file: Path = DEFAULT_TOKEN_FILE, sts_url: str = DEFAULT_STS_URL
) -> dict[str, Any]:
    """The ``external_account`` credential config (a JSON object) for ``pool_provider``."""
    return {
        "type": "external_account",
        "audience": provider_audience(pool_provider),
        "subject_token_type": JWT_TOKEN_TYPE,
        "token_url": sts_url,
        "credential_source": {"file": str(token_file)},
    }


def workload_credentials(
    pool_provider: str,
    *,
    token_file: Path = DEFAULT_TOKEN_FILE,
    sts_url: str = DEFAULT_STS_URL,
    scopes: Sequence[str] = (CLOUD_PLATFORM_SCOPE,),
) -> Credentials:
    """Identity-pool credentials that read the attestation token from ``token_file`` (the file
    the launcher keeps fresh) and exchange it at ``sts_url``."""
    info = credential_config(pool_provider, token_file=token_file, sts_url=sts_url)
    try:
        creds = identity_pool.Credentials.from_info(info)  # type: ignore[no-untyped-call]
    except (ValueError, auth_exc.GoogleAuthError) as exc:
        raise CredentialError(f"cannot build credentials for {info['audience']}: {exc}") from exc
    scoped: Credentials = creds.with_scopes(list(scopes))
    return scoped


class AttesterTokenSupplier(identity_pool.SubjectTokenSupplier):
    """Supplies the subject token by asking an :class:`Attester` for a fresh default token on
    every exchange (google-auth caches the resulting access token, not the subject token)."""

    def __init__(self, attester: Attester, audience: str | None = None) -> None:
        self._attester = attester
        self._audience = audience

    def get_subject_token(self, context: object, request: object) -> str:
        try:
            return self._attester.token(audience=self._audience)
        except AttesterError as exc:
            raise auth_exc.RefreshError(f"no attestation token: {exc}") from exc  # type: ignore[no-untyped-call]


def workload_credentials_from_attester(
    pool_provider: str,
    *,
    attester: Attester,
    token_audience: str | None = None,
    sts_url: str = DEFAULT_STS_URL,
    scopes: Sequence[str] = (CLOUD_PLATFORM_SCOPE,),
) -> Credentials:
    """Identity-pool credentials whose subject token comes from ``attester`` (the launcher
    socket) rather than the token file. ``token_audience`` None asks for the default token."""
    audience = provider_audience(pool_provider)
    try:
        creds = identity_pool.Credentials(  # type: ignore[no-untyped-call]
            audience=audience,
            subject_token_type=JWT_TOKEN_TYPE,
            token_url=sts_url,
            subject_token_supplier=AttesterTokenSupplier(attester, token_audience),
        )
    except (ValueError, auth_exc.GoogleAuthError) as exc:
        raise CredentialError(f"cannot build credentials for {audience}: {exc}") from exc
    scoped: Credentials = creds.with_scopes(list(scopes))
    return scoped


def safe_auth_reason(exc: auth_exc.GoogleAuthError) -> str:
    """The token exchange's own error text (google-auth's first argument: the STS error code and
    description), never a token; at most 600 characters."""
    first = exc.args[0] if exc.args else type(exc).__name__
    text = first if isinstance(first, str) else type(exc).__name__
    return text if len(text) <= 600 else text[:597] + "..."
