"""Adding a platform touches its own package and an entry point (issue 26): a third platform,
neither Google's nor the mock (``tests/platforms_double/double_platform.py``), installed only as
an entry point of the group ``sealbench.platforms`` in a ``*.dist-info`` on ``sys.path``, is
found by name and by issuer, and the client's launcher selection, the owner's policy rendering
and the enclave's asset access reach its adapters, while no module of the cores names it."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from sealbench.platforms import platform as registry
from sealbench.platforms.platform import load_platform, platform_for_issuer

REPO = Path(__file__).resolve().parents[2]
MODULE = "sealbench_double_platform"


@pytest.fixture
def double(third_platform: ModuleType) -> ModuleType:
    return third_platform


def test_the_registry_finds_it_by_name_and_by_issuer(double: ModuleType) -> None:
    platform = load_platform("double")
    assert isinstance(platform, double.DoublePlatform)
    assert platform_for_issuer(double.ISSUER).name == "double"
    assert registry.platforms_for_backend(double.BACKEND) == ("double",)
    # the shipped ones are still there
    assert {"confidential-space", "insecure-mock"} <= set(registry.installed_launcher_backends())


def test_launcher_selection_reaches_its_launcher(double: ModuleType) -> None:
    from sealbench.client.backends import build_launcher

    launcher = build_launcher(double.BACKEND, image="x")
    assert isinstance(launcher, double.DoubleLauncher)
    assert launcher.options == {"image": "x"} and launcher.platform.name == "double"


def test_policy_rendering_reaches_its_condition_and_grantees(double: ModuleType) -> None:
    from sealbench.contract.workload import WorkloadIdentity
    from sealbench.gcp.policy import AssetPolicy, PoolProvider, provider_body

    digest = "sha256:" + "1" * 64
    workload = WorkloadIdentity(double.IMAGE, digest, digest, digest, "1", "wdbc/1")
    policy = AssetPolicy(
        PoolProvider("123", "double-pool", "attestation"),
        "projects/p/locations/global/keyRings/r/cryptoKeys/k", None, frozenset({workload}),
        True, issuer_uri=f"{double.ISSUER}/", endpoints=double.ENDPOINTS,
    )
    assert policy.platform().name == "double"
    assert provider_body(policy)["attributeCondition"] == f"double: images {[double.IMAGE]}"
    assert policy.members() == {
        double.DoublePlatform().grantee(policy.provider.pool_name, workload.uid())
    }


def test_the_enclave_reaches_its_asset_access(double: ModuleType) -> None:
    from sealbench.enclave.platforms import evidence_from, resolve_platform
    from sealbench.enclave.run import platform_access

    evidence = evidence_from(double.DoubleAttester())
    assert evidence.platform.name == "double" and evidence.workload.image_digest == double.IMAGE
    destinations = resolve_platform(double.ISSUER)
    run = SimpleNamespace(
        platform=evidence.platform, destinations=destinations.endpoints, attester=evidence.attester
    )
    access = platform_access(run)  # type: ignore[arg-type]
    assert isinstance(access, double.DoubleAccess)
    assert access.destinations == double.ENDPOINTS


def test_no_core_module_names_it() -> None:
    for core in ("crypto", "contract", "platforms", "enclave", "server", "client", "gcp",
                 "mocktee"):
        for path in (REPO / core).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            assert MODULE not in text and "DoublePlatform" not in text, path
