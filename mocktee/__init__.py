"""The offline stand-in for the confidential cloud: attestation verifier (OIDC issuer + JWKS),
launcher socket and token file, STS with workload identity pools evaluating real CEL conditions,
KMS REST with IAM bindings, and a storage emulator behind an authorization proxy. Insecure by
design; never for production (see ``docs/mock-tee.md``).

Entry points: ``python -m sealbench.mocktee --state-dir DIR`` and
:class:`~sealbench.mocktee.server.MockCloud`; workloads are started with
:meth:`~sealbench.mocktee.launcher.MockLauncher.start_workload`.
"""

from sealbench.mocktee.launcher import LaunchedWorkload, MockLauncher, RemoteTokenMinter
from sealbench.mocktee.provision import OwnerSetup, ProvisionError, provision_owner
from sealbench.mocktee.server import MockCloud, MockEndpoints, MockPorts
from sealbench.mocktee.verifier import MockVerifier, TokenMinter, WorkloadLaunch, build_claims

__all__ = [
    "LaunchedWorkload",
    "MockCloud",
    "MockEndpoints",
    "MockLauncher",
    "MockPorts",
    "MockVerifier",
    "OwnerSetup",
    "ProvisionError",
    "RemoteTokenMinter",
    "TokenMinter",
    "WorkloadLaunch",
    "build_claims",
    "provision_owner",
]
