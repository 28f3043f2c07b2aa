"""Each role's extra, installed alone (with its dependencies, from the session's wheel) into a
fresh virtual environment, runs that role's commands; the other roles' packages are absent from
it, so none of this passes by accident:

- ``sealbench[server]``: ``sealbench-server`` creates a registry, an account, and serves it;
- ``sealbench[client]``: every ``sealbench ... --help``, and the registry commands against that
  server (profile, whoami, benchmark ls, keys, result ls); a command that needs another extra
  exits 3 naming it (``pip install 'sealbench[enclave]'``, ``[mock]``, ``[docker]``; the demo
  names all five it needs);
- ``sealbench[enclave,gcp-enclave]`` (what the evaluation image installs; no Compute client):
  ``python -m sealbench.enclave`` starts and refuses a missing run specification with its
  documented exit code;
- ``sealbench[mock]``: ``python -m sealbench.mocktee`` serves the mock cloud until SIGTERM.

The four environments are installed in parallel (``pip --python``, pip's usual cache), about a
minute together. Needs the package index (or pip's cache) as ``test_wheel_install.py`` does.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import venv
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from sealbench.contract.errors import SpecError

pytestmark = pytest.mark.slow

INSTALL_TIMEOUT_S = 600
COMMAND_TIMEOUT_S = 120
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Role:
    extras: str
    #: Import names of other roles' packages that must not be importable in this environment.
    absent: tuple[str, ...]


ROLES = {
    "client": Role("client", ("onnxruntime", "numpy", "fastapi", "sqlalchemy", "celpy",
                              "google.cloud.kms", "docker")),
    "server": Role("server", ("typer", "onnxruntime", "numpy", "celpy", "google.cloud.kms",
                              "docker")),
    "enclave": Role("enclave,gcp-enclave", ("typer", "fastapi", "sqlalchemy", "celpy", "docker",
                                            "google.cloud.compute_v1")),
    "mock": Role("mock", ("typer", "fastapi", "onnxruntime", "numpy", "google.cloud.kms",
                          "docker")),
}

IMPORTABLE = """
import importlib, json, sys
found = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ImportError:
        continue
    found.append(name)
print(json.dumps(found))
"""

EVERY_HELP = """
import json
import typer.main
from typer.testing import CliRunner
from sealbench.client.cli import app
paths = []
def walk(command, path):
    paths.append(path)
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        walk(sub, [*path, name])
walk(typer.main.get_command(app), [])
runner = CliRunner()
failed = {}
for path in paths:
    result = runner.invoke(app, [*path, "--help"], prog_name="sealbench")
    if result.exit_code != 0 or "Usage:" not in result.output:
        failed[" ".join(path)] = result.output[-600:]
print(json.dumps({"count": len(paths), "failed": failed}))
"""


def _install(wheel: Path, root: Path, role: Role) -> Path:
    env_dir = root / role.extras.replace(",", "-")
    venv.EnvBuilder(clear=True, with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--disable-pip-version-check", f"sealbench[{role.extras}] @ {wheel.as_uri()}"],
        check=True,
        timeout=INSTALL_TIMEOUT_S,
        capture_output=True,
    )
    return python


@pytest.fixture(scope="module")
def role_pythons(
    sealbench_wheel: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """Role name -> the python of its fresh environment (installed in parallel)."""
    root = tmp_path_factory.mktemp("role-venvs")
    with ThreadPoolExecutor(max_workers=len(ROLES)) as pool:
        futures = {
            name: pool.submit(_install, sealbench_wheel, root, role) for name, role in ROLES.items()
        }
        return {name: future.result() for name, future in futures.items()}


def _env(home: Path, **extra: str) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "COLUMNS": "200",
            "TERM": "dumb", **extra}


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def _ok(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    proc = _run(argv, env, cwd)
    assert proc.returncode == 0, (argv, proc.stdout[-2000:], proc.stderr[-2000:])
    return proc.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{what} did not come up within {START_TIMEOUT_S} s")


def _stop(process: subprocess.Popen[bytes]) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return int(process.returncode)


@pytest.mark.parametrize("role", sorted(ROLES))
def test_role_environment_lacks_the_other_roles_packages(
    role: str, role_pythons: dict[str, Path], tmp_path: Path
) -> None:
    out = _ok([str(role_pythons[role]), "-I", "-c", IMPORTABLE, *ROLES[role].absent],
              _env(tmp_path / "home"), tmp_path)
    assert json.loads(out) == []


@dataclass(frozen=True)
class Registry:
    url: str
    token: str


@pytest.fixture(scope="module")
def served_registry(
    role_pythons: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Registry]:
    """``sealbench-server init``, ``user add`` and ``serve`` from the server-only environment."""
    tmp = tmp_path_factory.mktemp("server-role")
    server = role_pythons["server"].parent / "sealbench-server"
    env = _env(tmp / "home", SEALBENCH_SERVER_DATA_DIR=str(tmp / "data"))
    assert "serve" in _ok([str(server), "--help"], env, tmp)
    for command in ("init", "serve", "user", "audit"):
        _ok([str(server), command, "--help"], env, tmp)
    _ok([str(server), "init"], env, tmp)
    token = _ok([str(server), "user", "add", "--email", "it@hospital.example"], env, tmp)
    token = token.strip().splitlines()[-1]
    assert token.startswith("sbt_")
    port = _free_port()
    process = subprocess.Popen(
        [str(server), "serve", "--port", str(port)], env=env, cwd=tmp,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
            return bool(json.loads(response.read())["status"] == "ok")

    try:
        _wait_for(healthy, "sealbench-server serve")
        yield Registry(url, token)
    finally:
        _stop(process)


def test_client_extra_runs_every_help_and_the_registry_commands(
    role_pythons: dict[str, Path], served_registry: Registry, tmp_path: Path
) -> None:
    python = role_pythons["client"]
    sealbench = str(python.parent / "sealbench")
    env = _env(tmp_path / "home", SEALBENCH_CONFIG_DIR=str(tmp_path / "config"),
               SEALBENCH_DEMO_DIR=str(tmp_path / "demos"))
    report = json.loads(_ok([str(python), "-I", "-c", EVERY_HELP], env, tmp_path))
    assert report["count"] > 40 and report["failed"] == {}
    _ok([sealbench, "profile", "add", "hospital", "--server", served_registry.url,
         "--token", served_registry.token, "--trust-on-first-use"], env, tmp_path)
    assert "it@hospital.example" in _ok([sealbench, "whoami"], env, tmp_path)
    _ok([sealbench, "benchmark", "ls"], env, tmp_path)
    assert "recipient digest sha256:" in _ok([sealbench, "keys", "init"], env, tmp_path)
    _ok([sealbench, "keys", "show"], env, tmp_path)
    _ok([sealbench, "result", "ls"], env, tmp_path)
    assert "hospital" in _ok([sealbench, "profile", "ls"], env, tmp_path)
    for argv, extra in (
        (["dataset", "synthesize", "raw", "--cases", "1", "--definition", "brats-small"],
         "enclave"),
        (["benchmark", "create", "--definition", "brats"], "enclave"),
        (["mock-tee", "up", "--state-dir", "mock"], "mock"),
        (["image", "build"], "docker"),
        (["demo", "--cases", "1", "--size", "small"], "server,enclave,gcp,mock,datasets"),
    ):
        proc = _run([sealbench, *argv], env, tmp_path)
        output = proc.stdout + proc.stderr
        assert proc.returncode == 3, (argv, output)
        assert f"pip install 'sealbench[{extra}]'" in output, (argv, output)
        assert "Traceback" not in output and "unexpected" not in output, (argv, output)
    for made in ("raw", "mock", "demos"):  # refused before doing anything
        assert not (tmp_path / made).exists(), made


def test_enclave_extra_runs_the_entry_point_of_the_image(
    role_pythons: dict[str, Path], tmp_path: Path
) -> None:
    python = str(role_pythons["enclave"])
    env = _env(tmp_path / "home")
    assert "--launcher-dir" in _ok([python, "-m", "sealbench.enclave", "--help"], env, tmp_path)
    proc = _run([python, "-m", "sealbench.enclave"], env, tmp_path)  # no run specification
    assert proc.returncode == SpecError.exit_code, proc.stderr
    assert "sealbench-enclave: invalid run specification" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_mock_extra_serves_the_mock_cloud_until_terminated(
    role_pythons: dict[str, Path], tmp_path: Path
) -> None:
    python = str(role_pythons["mock"])
    env = _env(tmp_path / "home")
    assert "--state-dir" in _ok([python, "-m", "sealbench.mocktee", "--help"], env, tmp_path)
    state = tmp_path / "state"
    process = subprocess.Popen(
        [python, "-m", "sealbench.mocktee", "--state-dir", str(state)], env=env, cwd=tmp_path,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(lambda: (state / "endpoints.json").is_file(), "the mock cloud")
        endpoints = json.loads((state / "endpoints.json").read_text())
        assert endpoints["insecure"] is True

        def serving() -> bool:
            with urllib.request.urlopen(endpoints["jwks_uri"], timeout=5) as response:
                return bool(json.loads(response.read())["keys"])

        _wait_for(serving, "the mock verifier's JWKS")
    finally:
        code = _stop(process)
    assert code in (0, -signal.SIGTERM, 128 + signal.SIGTERM), code


def test_environments_are_fresh(role_pythons: dict[str, Path]) -> None:
    """Not this checkout, not the outer environment: each role's sealbench is its own copy."""
    for python in role_pythons.values():
        proc = subprocess.run(
            [str(python), "-I", "-c", "import sealbench.crypto as c; print(c.__file__)"],
            capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
        assert Path(proc.stdout.strip()).is_relative_to(python.parent.parent)
