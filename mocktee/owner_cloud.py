"""One owner's account in the INSECURE local mock cloud (never for real data), the
:class:`~sealbench.platforms.owner_cloud.OwnerCloud` the mock platform hands out: Google's
owner cloud (:class:`~sealbench.gcp.owner_cloud.GcpOwnerCloud`, the production code) with the
mock's endpoints, an owner token from its INSECURE control endpoint and the mock's platform
(``sealbench mock-tee up``), which provisions the owner's project, key and bucket on first use.

Naming in the mock, derived from the owner's registry email so that each owner is separate::

    project      sb-<slug of the email>            (number: 12 digits from its SHA-256)
    KMS key      projects/<project>/locations/global/keyRings/sealbench/cryptoKeys/assets
    bucket       <project>-assets                  (assets under datasets/<id>/, models/<id>/)
    pool         projects/<number>/locations/global/workloadIdentityPools/sealbench
                 /providers/attestation
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sealbench.gcp.owner_cloud import GcpOwnerCloud, GoogleApis, PlatformPolicy
from sealbench.platforms.errors import OwnerCloudError as CloudError
from sealbench.platforms.errors import OwnerSettingsError as ConfigError

if TYPE_CHECKING:
    from sealbench.mocktee import MockEndpoints, OwnerSetup

__all__ = ["InsecureMockOwnerCloud", "insecure_mock_platform", "mock_apis", "mock_project_for"]

log = logging.getLogger("sealbench.client")


def mock_project_for(email: str) -> tuple[str, str]:
    """(project id, project number) of an owner in the mock, from its email."""
    slug = re.sub(r"[^a-z0-9]+", "-", email.lower()).strip("-")[:20].strip("-") or "owner"
    digest = hashlib.sha256(email.lower().encode()).hexdigest()
    number = 10**11 + int(digest[:15], 16) % (9 * 10**11)
    return f"sb-{slug}-{digest[:6]}", str(number)


@dataclass(frozen=True)
class InsecureMockOwnerCloud(GcpOwnerCloud):
    """One owner's account in the INSECURE local mock cloud (never for real data): the mock
    provisions the owner's project, key and bucket and hands it an owner token; everything else
    is :class:`GcpOwnerCloud`, the production code, with the mock's endpoints, that token and
    the mock's platform (its own issuer, its exact endpoints pinned)."""

    endpoints: MockEndpoints = field(kw_only=True)
    setup: OwnerSetup = field(kw_only=True, repr=False)  # holds an owner token: never log it

    @classmethod
    def connect(cls, state_dir: Path, email: str) -> InsecureMockOwnerCloud:
        """Read the running mock's endpoints from ``state_dir`` and provision the owner."""
        from google.oauth2.credentials import Credentials as OwnerToken

        from sealbench.mocktee import MockEndpoints, ProvisionError, provision_owner
        from sealbench.mocktee.state import warn_insecure_once

        try:
            endpoints = MockEndpoints.load(state_dir)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"no running mock TEE found in {state_dir}",
                hint="start one with 'sealbench mock-tee up --state-dir DIR' and pass that "
                "directory with --mock-tee (or 'sealbench profile add ... --mock-tee DIR')",
            ) from exc
        project_id, number = mock_project_for(email)
        try:
            setup = provision_owner(
                endpoints, email=email, project_id=project_id, project_number=number
            )
        except ProvisionError as exc:
            raise CloudError(
                f"the mock cloud refused to set up {email}: {exc}",
                hint="check that 'sealbench mock-tee up' is still running",
            ) from exc
        warn_insecure_once("sealbench.client", "INSECURE mock cloud: never for real data")
        log.info("using the mock cloud in %s for %s", state_dir, email)
        token = OwnerToken(setup.access_token)  # type: ignore[no-untyped-call]
        return cls(
            project_id=setup.project_id,
            project_number=setup.project_number,
            credentials_source=lambda: token,
            platform=insecure_mock_platform(endpoints),
            key_ring=setup.key_name.split("/keyRings/")[1].split("/")[0],
            key=setup.key_name.rsplit("/", 1)[1],
            bucket=setup.bucket,
            apis=mock_apis(endpoints),
            endpoints=endpoints,
            setup=setup,
        )


def insecure_mock_platform(endpoints: MockEndpoints) -> PlatformPolicy:
    """The INSECURE mock: its own verifier as the issuer, its exact endpoints pinned."""
    return PlatformPolicy("insecure-mock", f"{endpoints.issuer}/", endpoints.service_endpoints())


def mock_apis(endpoints: MockEndpoints) -> GoogleApis:
    """The mock's Google-compatible KMS, Storage, IAM, Compute, Service Usage and Resource
    Manager endpoints."""
    apis = endpoints.apis or GoogleApis.serviceusage
    return GoogleApis(
        kms=endpoints.kms, storage=endpoints.storage, iam=endpoints.iam,
        compute=endpoints.compute or GoogleApis.compute, serviceusage=apis,
        cloudresourcemanager=endpoints.apis or GoogleApis.cloudresourcemanager,
        # the mock serves Artifact Registry beside Compute (the VMs' image pulls ask it)
        artifactregistry=endpoints.compute or GoogleApis.artifactregistry,
    )
