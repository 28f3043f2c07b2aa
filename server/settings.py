"""The registry server's settings, read once at the edge from ``SEALBENCH_SERVER_*`` variables.

``local`` mode (the default) is for one machine: SQLite in the data directory, loopback binding,
plain-HTTP JWKS URLs (a local mock issuer). Any other mode refuses those insecure values, so a
deployment cannot start with them by accident. The settings object is built by the CLI (or a
test) and handed to :func:`sealbench.server.app.create_app`; nothing reads the environment at
import time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from sealbench.contract.spec import ENDPOINT_PATTERN, ServiceEndpoints

__all__ = [
    "DEFAULT_PLATFORM",
    "IssuerEndpoints",
    "OidcSettings",
    "ServerSettings",
    "TrustedIssuer",
]

#: The platform whose verifier a registry trusts unless its settings say otherwise.
DEFAULT_PLATFORM = "confidential-space"


class IssuerEndpoints(BaseModel):
    """The token destinations of a platform that is not Google's (the mock cloud's STS, KMS and
    storage URLs): a result from that issuer must have been produced by a run that named
    exactly these."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sts_url: str = Field(pattern=ENDPOINT_PATTERN)
    kms_endpoint: str = Field(pattern=ENDPOINT_PATTERN)
    storage_endpoint: str = Field(pattern=ENDPOINT_PATTERN)

    def env_overrides(self) -> dict[str, str]:
        """The run-spec overrides a genuine run on this platform carries."""
        return ServiceEndpoints(self.sts_url, self.kms_endpoint, self.storage_endpoint).env_names()


class TrustedIssuer(BaseModel):
    """An attestation-token issuer whose result tokens the registry accepts. ``endpoints`` is
    None for Google's verifier (a result's run must carry no endpoint override) and the mock
    cloud's URLs for the mock's issuer. ``platform`` names the TEE platform (its entry point in
    ``sealbench.platforms``) whose claim schema and rules the issuer's tokens are checked with."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    issuer: str = Field(min_length=1)
    jwks_url: str = Field(min_length=1)
    endpoints: IssuerEndpoints | None = None
    platform: str = Field(default=DEFAULT_PLATFORM, pattern=r"^[a-z0-9][a-z0-9-]{0,39}$")


class OidcSettings(BaseModel):
    """An OpenID Connect issuer whose bearer JWTs identify users (``sub``, ``email``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    issuer: str = Field(min_length=1)
    audience: str = Field(min_length=1)
    jwks_url: str = Field(min_length=1)
    admin_subjects: tuple[str, ...] = ()


def _default_issuers() -> tuple[TrustedIssuer, ...]:
    """The verifier of :data:`DEFAULT_PLATFORM`, as that platform publishes it."""
    from sealbench.platforms.platform import load_platform

    keys = load_platform(DEFAULT_PLATFORM).verifier
    if keys is None or keys.jwks_url is None:
        return ()
    return (TrustedIssuer(issuer=keys.issuer, jwks_url=keys.jwks_url, platform=DEFAULT_PLATFORM),)


class ServerSettings(BaseSettings):
    """Every knob of the registry server; see docs/server.md for the table."""

    model_config = SettingsConfigDict(
        env_prefix="SEALBENCH_SERVER_", env_nested_delimiter="__", frozen=True, extra="forbid"
    )

    mode: Literal["local", "production"] = "local"
    data_dir: Path = Path("sealbench-data")
    database_url: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    max_body_bytes: int = Field(default=1 << 20, ge=1024, le=64 << 20)
    max_json_depth: int = Field(default=32, ge=4, le=256)
    trusted_issuers: tuple[TrustedIssuer, ...] = Field(default_factory=_default_issuers)
    oidc: OidcSettings | None = None
    token_cache_seconds: float = Field(default=30.0, ge=0.0, le=600.0)
    revocation_check_seconds: float = Field(default=1.0, ge=0.0, le=60.0)
    #: The server runs in its own network namespace whose only way in is the platform's
    #: TLS-terminating proxy (a Cloud Run container, a pod behind an ingress): production mode
    #: then accepts a wildcard bind address, which such platforms require.
    isolated_network: bool = False
    jwks_cache_seconds: float = Field(default=300.0, ge=0.0, le=86400.0)
    db_pool_size: int = Field(default=10, ge=1, le=200)
    worker_threads: int = Field(default=8, ge=1, le=400)
    log_origin: str | None = Field(default=None, pattern=r"^[^\s+]{1,200}$")
    log_key_file: Path | None = None
    pool_key_file: Path | None = None

    @property
    def effective_log_key_file(self) -> Path:
        """Where the transparency log's signing key lives (0600)."""
        return self.log_key_file or self.data_dir / "log-signer.key"

    @property
    def effective_pool_key_file(self) -> Path:
        """Where the registry's pool-release key lives (0600; :mod:`sealbench.server.poolkey`)."""
        return self.pool_key_file or self.data_dir / "pool-release.key"

    @property
    def effective_database_url(self) -> str:
        """The configured URL, or SQLite in the data directory (local mode only)."""
        if self.database_url is not None:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'registry.sqlite3').resolve()}"

    @model_validator(mode="after")
    def _refuse_insecure_outside_local(self) -> Self:
        if self.mode == "local":
            return self
        problems: list[str] = []
        if self.database_url is None or self.database_url.startswith("sqlite"):
            problems.append("database_url must name a PostgreSQL database (received SQLite)")
        wildcard = self.host in {"0.0.0.0", "::"}  # noqa: S104
        if wildcard and not self.isolated_network:
            problems.append(
                "host must be a specific address behind a TLS proxy, not a wildcard (or set "
                "ISOLATED_NETWORK=true in a container whose only ingress is that proxy)"
            )
        urls = [("trusted issuer", t.jwks_url) for t in self.trusted_issuers]
        urls += [("trusted issuer id", t.issuer) for t in self.trusted_issuers]
        if self.oidc is not None:
            urls += [("oidc jwks_url", self.oidc.jwks_url), ("oidc issuer", self.oidc.issuer)]
        for what, url in urls:
            if urlsplit(url).scheme != "https":
                problems.append(f"{what} must use https (received {url!r})")
        if problems:
            raise ValueError(f"insecure settings outside local mode: {'; '.join(problems)}")
        return self
