"""Grants follow approvals without anyone remembering (issue 29), through the ``sealbench`` CLI
against a real registry process and the mock TEE: a new hospital joins a benchmark whose model
owner synced its grants before the hospital was there. Until the model's grants follow, the
model owner's inbox lists "policy sync needed" with the command, and the hospital's refused run
names the model's owner and that command (not "ask both owners"). Then the model owner's
``policy sync --watch``, running in the background as its own process, picks the approval up,
and the hospital's run succeeds without anyone else typing a command; Ctrl-C ends the watch
with exit 130."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from sealbench.client.cli import app
from sealbench.client.registry.local import create_accounts, publish_log_key, registry_process
from sealbench.mocktee import MockCloud
from tests.e2e.test_cli_flow import ok, tiny_onnx

ACCOUNTS = {
    "admin": ("admin@grants.example", True),
    "authority": ("authority@grants.example", False),
    "hospital": ("it@hospital.grants.example", False),
    "lab-a": ("ml@lab-a.grants.example", False),
}


@dataclass
class Flow:
    cli: Callable[..., Result]
    tmp: Path


@pytest.fixture(scope="module")
def flow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flow]:
    tmp = tmp_path_factory.mktemp("grants")
    mock_state, data = tmp / "mock", tmp / "registry"
    patch = pytest.MonkeyPatch()
    patch.setenv("SEALBENCH_CONFIG_DIR", str(tmp / "home"))
    for name in ("SEALBENCH_DATA_DIR", "SEALBENCH_PROFILE", "SEALBENCH_SERVER", "SEALBENCH_TOKEN"):
        patch.delenv(name, raising=False)
    runner = CliRunner()

    def cli(*args: str) -> Result:
        return runner.invoke(app, list(args))

    try:
        with MockCloud(mock_state) as cloud:
            tokens = create_accounts(data, ACCOUNTS)
            log_key = publish_log_key(data)
            with registry_process(data, cloud.endpoints, tmp / "server.log") as url:
                for name, token in tokens.items():
                    ok(cli("profile", "add", name, "--server", url, "--token", token,
                           "--mock-tee", str(mock_state), "--log-key", log_key))
                yield Flow(cli, tmp)
    finally:
        patch.undo()


def text(result: Result) -> str:
    """The output with the console's line wrapping undone."""
    return " ".join(result.output.split())


def sync_items(flow: Flow, profile: str) -> list[dict[str, object]]:
    inbox = json.loads(ok(flow.cli("inbox", "--json", "--profile", profile)).stdout)
    return [i for i in inbox["items"] if i["action"] == "policy sync needed"]


class Watch:
    """``sealbench policy sync --watch`` as the model owner's own background process."""

    def __init__(self, profile: str) -> None:
        command = [sys.executable, "-m", "sealbench.client.cli", "policy", "sync", "--watch",
                   "--interval", "0.5", "--profile", profile]
        self.process = subprocess.Popen(command, env=dict(os.environ), stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, needle: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                assert self.process.poll() is None, self.seen
                continue
            self.seen.append(line)
            if needle in line:
                return line
        raise AssertionError(f"no {needle!r} from the watch: {self.seen}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        return self.process.wait(30)


def test_new_hospital_runs_once_the_model_owners_watch_syncs(flow: Flow) -> None:
    cli, tmp = flow.cli, flow.tmp
    b = str(json.loads(ok(cli("benchmark", "create", "--tee", "mock", "--definition",
                              "brats-small", "--json", "--profile", "authority")).stdout)["id"])
    ok(cli("benchmark", "approve", b, "--profile", "admin"))
    # the model owner joins and syncs its grants: nothing is approved on the data side yet
    onnx = tiny_onnx(tmp / "lab-a.onnx", 0)
    m = str(json.loads(ok(cli("model", "register", str(onnx), "--name", "lab-a", "--benchmark",
                              b, "--json", "--profile", "lab-a")).stdout)["id"])
    ok(cli("model", "seal", str(onnx), "--model", m, "--profile", "lab-a"))
    ok(cli("model", "associate", "--model", m, "--benchmark", b, "--profile", "lab-a"))
    ok(cli("association", "approve", "--benchmark", b, "--model", m, "--profile", "authority"))
    first = json.loads(ok(cli("policy", "sync", "--model", m, "--json", "--profile", "lab-a"))
                       .stdout)
    assert first["workloads"] == [] and list(first["reported"]) == [m]
    assert sync_items(flow, "lab-a") == []

    # a new hospital joins; the authority approves it; the hospital syncs its own grants
    ok(cli("keys", "init", "--profile", "hospital"))
    raw, prepared = tmp / "raw", tmp / "prepared"
    ok(cli("dataset", "synthesize", str(raw), "--cases", "1", "--benchmark", b, "--profile",
           "hospital"))
    ok(cli("dataset", "prepare", str(raw), str(prepared), "--benchmark", b,
           "--profile", "hospital"))
    d = str(json.loads(ok(cli("dataset", "register", str(prepared), "--name", "h-glioma",
                              "--benchmark", b, "--json", "--profile", "hospital")).stdout)["id"])
    ok(cli("dataset", "seal", str(prepared), "--dataset", d, "--profile", "hospital"))
    ok(cli("dataset", "associate", "--dataset", d, "--benchmark", b, "--profile", "hospital"))
    ok(cli("association", "approve", "--benchmark", b, "--dataset", d, "--profile", "authority"))
    ok(cli("policy", "sync", "--dataset", d, "--profile", "hospital"))
    assert sync_items(flow, "hospital") == []

    # the model owner's grants lag: its inbox says so, with the command
    [item] = sync_items(flow, "lab-a")
    assert item["command"] == f"sealbench policy sync --model {m}"
    shown = text(ok(cli("inbox", "--profile", "lab-a")))
    assert f"policy sync needed: model lab-a (#{m})" in shown
    assert "nothing waits for you" not in shown

    # the hospital's run is refused, naming the model's owner and what it runs
    run = ("run", "--benchmark", b, "--dataset", d, "--model", m, "--profile", "hospital")
    refused = cli(*run)  # no IAM wait: the registry says the grant was never written
    assert refused.exit_code == 7, refused.output
    said = text(refused)
    assert f"model {m}'s owner (user " in said and "has not synced its grants" in said
    assert f"they run: sealbench policy sync --model {m}" in said
    assert "both owners" not in said

    # the model owner's watch, in the background, picks the approval up
    watch = Watch("lab-a")
    try:
        watch.wait_for(f"model {m}: approvals changed")
        assert "+1 -0" in watch.wait_for(f"model {m}: synced")
        synced_lines = len(watch.seen)
        assert sync_items(flow, "lab-a") == []
        # the hospital's run now succeeds; nobody else typed a command
        done = ok(cli(*run))
        assert "succeeded" in done.output
        # a further pass writes nothing: the watch stays quiet
        time.sleep(1.5)
        while not watch.lines.empty():
            watch.seen.append(watch.lines.get())
        assert not [line for line in watch.seen[synced_lines:] if "sync" in line], watch.seen
    finally:
        code = watch.stop()
    assert code == 130, watch.seen
