"""``sealbench run --tee BACKEND`` reaches a launcher through the platform registry: the backend
maps to the one installed platform whose ``launcher_backends`` names it, each launcher speaks
only for such a platform and renders the run spec with that platform's ``launch_environment``;
no module of the client imports a launcher implementation (they live in their platforms'
packages, ``gcp/`` and ``mocktee/``; the CLI goes through
:mod:`sealbench.client.backends`, which asks the platform to build one)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sealbench.client
from sealbench.client.backends import TeeBackend, build_launcher
from sealbench.contract.spec import AssetLocation, RunSpec
from sealbench.crypto.digest import sha256_digest
from sealbench.platforms.launcher import (
    LaunchError,
    check_backend,
    launch_environment,
    platform_for_backend,
)
from sealbench.platforms.platform import load_platform

CLIENT = Path(sealbench.client.__file__).resolve().parent
IMPLEMENTATIONS = frozenset(
    {
        "sealbench.mocktee.process_launcher",
        "sealbench.mocktee.docker_launcher",
        "sealbench.gcp.launcher",
        "sealbench.gcp._cs_resources",
    }
)
IMPLEMENTATION_CLASSES = frozenset(
    {"MockProcessLauncher", "DockerLauncher", "ConfidentialSpaceLauncher", "VmSettings"}
)


def launcher_imports(source: str) -> set[str]:
    """The launcher implementation modules and classes ``source`` imports (any depth)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in IMPLEMENTATIONS}
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module in IMPLEMENTATIONS:
                found.add(node.module)
            if node.module.startswith(("sealbench.client", "sealbench.gcp", "sealbench.mocktee")):
                found |= {a.name for a in node.names if a.name in IMPLEMENTATION_CLASSES}
                found |= {
                    f"{node.module}.{a.name}"
                    for a in node.names
                    if f"{node.module}.{a.name}" in IMPLEMENTATIONS
                }
    return found


def test_no_client_module_imports_an_implementation() -> None:
    offenders = {
        path.relative_to(CLIENT).as_posix(): sorted(found)
        for path in sorted(CLIENT.rglob("*.py"))
        if (found := launcher_imports(path.read_text()))
    }
    assert offenders == {}


def test_the_scan_sees_each_import_form() -> None:
    source = (
        "from sealbench.mocktee.docker_launcher import DockerLauncher\n"
        "import sealbench.gcp.launcher\n"
        "def f():\n"
        "    from sealbench.mocktee import MockProcessLauncher, process_launcher\n"
    )
    assert launcher_imports(source) == {
        "sealbench.mocktee.docker_launcher",
        "DockerLauncher",
        "sealbench.gcp.launcher",
        "MockProcessLauncher",
        "sealbench.mocktee.process_launcher",
    }


@pytest.mark.parametrize(
    ("backend", "platform"),
    [("mock", "insecure-mock"), ("docker", "insecure-mock"),
     ("confidential-space", "confidential-space")],
)
def test_each_backend_maps_to_its_platform(backend: str, platform: str) -> None:
    assert platform_for_backend(backend).name == platform


def test_a_backend_no_platform_names_is_refused() -> None:
    with pytest.raises(LaunchError, match=r"'nitro'.*installed: confidential-space, docker, mock"):
        platform_for_backend("nitro")
    both = [load_platform("insecure-mock"), load_platform("insecure-mock")]
    with pytest.raises(LaunchError, match="2 platforms"):
        platform_for_backend("mock", both)


def test_a_launcher_never_speaks_for_another_platform() -> None:
    cs = load_platform("confidential-space")
    with pytest.raises(LaunchError, match="not started by the 'mock' launcher"):
        check_backend(cs, "mock")
    from sealbench.mocktee.process_launcher import MockProcessLauncher

    with pytest.raises(LaunchError, match="confidential-space platform"):
        MockProcessLauncher(None, platform=cs)  # type: ignore[arg-type]


def _spec() -> RunSpec:
    digest = sha256_digest(b"x")
    pool = "projects/1/locations/global/workloadIdentityPools/pool/providers/attestation"
    key = "projects/p/locations/global/keyRings/r/cryptoKeys/k"
    location = AssetLocation(asset_id="1", uri="file:///tmp/x", kms_key=key, pool_provider=pool)
    return RunSpec(
        run_id="r1", benchmark_id="1", metrics_version="wdbc/1", dataset=location,
        model=location, result_uri="file:///tmp/out", recipient_public_key="A" * 43 + "=",
        data_digest=digest, model_digest=digest, recipient_digest=digest,
    )


def test_the_run_spec_reaches_each_platform_its_own_way() -> None:
    spec = _spec()
    environ = spec.to_environ()
    assert launch_environment(load_platform("insecure-mock"), spec) == environ
    rendered = launch_environment(load_platform("confidential-space"), spec)
    assert rendered == {f"tee-env-{k}": v for k, v in environ.items()}


def test_choosing_the_production_launcher_constructs_no_mock_platform(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sealbench.mocktee.platform import InsecureMockPlatform

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("the mock platform was constructed")

    monkeypatch.setattr(InsecureMockPlatform, "__init__", forbidden)
    assert platform_for_backend("confidential-space").name == "confidential-space"
    with pytest.raises(AssertionError, match="constructed"):
        platform_for_backend("mock")  # the check above can fail


def test_the_tee_backends_are_the_shipped_platforms_backends() -> None:
    assert {b.value for b in TeeBackend} == {"mock", "docker", "confidential-space"}
    assert TeeBackend.DOCKER.platform.name == "insecure-mock"
    assert TeeBackend.CONFIDENTIAL_SPACE.platform.name == "confidential-space"


def test_each_backend_builds_a_typed_launcher_of_its_platform() -> None:
    from sealbench.mocktee.process_launcher import MockProcessLauncher

    launcher = TeeBackend.MOCK.launcher(control_url="http://127.0.0.1:1")
    assert isinstance(launcher, MockProcessLauncher)
    with pytest.raises(LaunchError, match="'nitro'"):
        build_launcher("nitro")
    with pytest.raises(LaunchError, match="not started by the 'mock' launcher"):
        load_platform("confidential-space").launcher("mock")
