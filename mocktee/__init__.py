"""The offline stand-in for the confidential cloud: attestation verifier (OIDC issuer + JWKS),
launcher socket and token file, STS with workload identity pools evaluating real CEL conditions,
KMS REST with IAM bindings, and a storage emulator behind an authorization proxy. Insecure by
design; never for production (see ``docs/mock-tee.md``).

Entry points: ``python -m sealbench.mocktee --state-dir DIR`` and
:class:`~sealbench.mocktee.server.MockCloud`; workloads are started with
:meth:`~sealbench.mocktee.launcher.MockLauncher.start_workload`.

The names below are imported on first use (PEP 562), so that importing a light submodule such as
:mod:`sealbench.mocktee.state` does not load the CEL evaluator and the storage emulator of the
``mock`` extra.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sealbench.mocktee.launcher import LaunchedWorkload, MockLauncher, RemoteTokenMinter
    from sealbench.mocktee.provision import OwnerSetup, ProvisionError, provision_owner
    from sealbench.mocktee.server import MockCloud, MockEndpoints, MockPorts
    from sealbench.mocktee.verifier import (
        MockVerifier,
        TokenMinter,
        WorkloadLaunch,
        build_claims,
    )

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

_MODULE_OF = {
    "LaunchedWorkload": "launcher",
    "MockLauncher": "launcher",
    "RemoteTokenMinter": "launcher",
    "OwnerSetup": "provision",
    "ProvisionError": "provision",
    "provision_owner": "provision",
    "MockCloud": "server",
    "MockEndpoints": "server",
    "MockPorts": "server",
    "MockVerifier": "verifier",
    "TokenMinter": "verifier",
    "WorkloadLaunch": "verifier",
    "build_claims": "verifier",
}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
