"""A third-party benchmark plug-in, written only under ``tests/plugins/tiny2dseg`` against the
public interface, packaged as a wheel and installed beside sealbench, is found by name and
runs through the interface; nothing outside ``tests/`` knows it (the test that the benchmark
seam is real). The confidential end-to-end runs of it are in
``test_plugin_is_evaluated_confidentially_on_the_mock_tee`` below (mock TEE) and
``tests/integration/test_third_party_plugin_docker.py`` (the evaluation image)."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from sealbench.client.images.build import WheelhouseError, plugin_wheels

REPO = Path(__file__).resolve().parents[2]
PLUGIN_SOURCE = REPO / "tests" / "plugins" / "tiny2dseg"
SEALBENCH_PACKAGES = ("crypto", "cloud", "mocktee", "server", "enclave", "benchmarks", "client")


def threshold_model() -> bytes:
    """A 1x1 convolution scoring the disc at intensity > 0.5 (logit 2x - 1 against 0)."""
    weight = np.array([[[[-1.0]]], [[[1.0]]]], dtype=np.float32)
    bias = np.array([0.5, -0.5], dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["image", "w", "b"], ["scores"], kernel_shape=[1, 1])],
        "threshold",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, "H", "W"])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 2, "H", "W"])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def plugin_python(root: Path, source: Path = PLUGIN_SOURCE) -> str:
    """A fresh virtual environment that sees this environment's packages (sealbench and its
    dependencies, through a ``.pth``) plus the plug-in's wheel (tiny2dseg by default)
    installed with pip; returns its interpreter. This environment itself never gets it."""
    wheels = root / "wheels"
    wheels.mkdir(parents=True)
    [requirement] = plugin_wheels([source], wheels)
    assert requirement == f"{source.name.replace('-', '_')}==0.1.0"
    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    ours = [p for p in sys.path if p.endswith("site-packages")]
    (Path(site) / "sealbench-host.pth").write_text(
        "".join(f"import site; site.addsitedir({p!r})\n" for p in ours))
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--no-deps", "--no-index", str(next(wheels.glob("*.whl")))],
        check=True, timeout=300)
    return str(python)


def test_plugin_wheel_is_built_from_a_copy_of_its_source(tmp_path: Path) -> None:
    before = sorted(p.relative_to(PLUGIN_SOURCE) for p in PLUGIN_SOURCE.rglob("*"))
    assert plugin_wheels([PLUGIN_SOURCE], tmp_path) == ("tiny2dseg==0.1.0",)
    [wheel] = tmp_path.glob("*.whl")
    assert wheel.name.startswith("tiny2dseg-0.1.0-")
    after = sorted(p.relative_to(PLUGIN_SOURCE) for p in PLUGIN_SOURCE.rglob("*"))
    assert after == before  # no build/ or egg-info left in the source
    again = tmp_path / "again"
    again.mkdir()
    assert plugin_wheels([wheel], again) == ("tiny2dseg==0.1.0",)  # a wheel is taken as is


def test_a_folder_that_is_not_a_package_is_refused(tmp_path: Path) -> None:
    with pytest.raises(WheelhouseError, match=r"neither a \.whl file nor a folder"):
        plugin_wheels([tmp_path], tmp_path)


def test_no_sealbench_package_names_the_plugin() -> None:
    for package in SEALBENCH_PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            assert "tiny2dseg" not in path.read_text(), path


CHILD = r"""
import json, sys
from pathlib import Path
from sealbench.benchmarks.registry import PluginRegistry
from sealbench.benchmarks.release import LocalExact, OpenDPGaussian
root, model = Path(sys.argv[1]), Path(sys.argv[2]).read_bytes()
registry = PluginRegistry()
plugin = registry.get("tiny2dseg")
plugin.write_demo_dataset(root / "raw", 6, seed=3)
prepared = plugin.prepare(root / "raw", root / "prepared")
data = root / "prepared" / plugin.layout.data_dir
layout = plugin.open_dataset((data / plugin.layout.dataset_file).read_bytes())
runner = plugin.load_model(model)
paths = [p.relative_to(data).as_posix() for p in data.glob("cases/*/*")]
results = []
for case_id, files in sorted(layout.group(paths).items()):
    case = layout.load({p: (data / p).read_bytes() for p in files})
    results.append(plugin.score(case, runner.predict(case)))
summary = plugin.summarise(results, OpenDPGaussian())
again = plugin.parse_summary(json.loads(json.dumps(summary.to_json())))
exact = plugin.summarise(results, LocalExact())
print(json.dumps({"names": registry.names(), "ref": str(plugin.ref),
                  "accepted": len(prepared.accepted), "summary": again.to_json(),
                  "exact": exact.to_json()}))
"""


def test_installed_plugin_is_found_by_name_and_evaluates(tmp_path: Path) -> None:
    python = plugin_python(tmp_path / "env")
    (tmp_path / "model.onnx").write_bytes(threshold_model())
    done = subprocess.run([python, "-c", CHILD, str(tmp_path), str(tmp_path / "model.onnx")],
                          check=True, capture_output=True, text=True, timeout=300)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert "tiny2dseg" in out["names"] and "wdbc" in out["names"]
    assert out["ref"] == "tiny2dseg/1" and out["accepted"] == 6
    assert out["summary"]["n_cases"] == 6 and out["summary"]["release"]["epsilon"] == 1.0
    assert out["exact"]["release"]["columns"][0]["sum"] / 6 > 0.8
    # ... and this interpreter, where it was never installed, does not have it.
    from sealbench.benchmarks.registry import PluginRegistry

    assert "tiny2dseg" not in PluginRegistry().names()


def test_plugin_is_evaluated_confidentially_on_the_mock_tee(tmp_path: Path) -> None:
    """The hospital's and model owner's whole confidential path, for a benchmark sealbench has
    never heard of: sealed data and model, keys released by policy to exactly this workload
    and plug-in version, the enclave (the plug-in environment's interpreter) evaluating,
    the result attested, opened and validated by the plug-in."""
    python = plugin_python(tmp_path / "env")
    (tmp_path / "model.onnx").write_bytes(threshold_model())
    done = subprocess.run(
        [python, str(PLUGIN_SOURCE.parent / "confidential_run.py"), "--plugin", "tiny2dseg",
         "--model", str(tmp_path / "model.onnx"), "--root", str(tmp_path / "run"),
         "--cases", "5"],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["pin"] == "tiny2dseg/1" and out["attested_pin"] == "tiny2dseg/1"
    assert out["attested_image"] == out["image_digest"]
    assert out["results"] == 5
    assert out["summary"]["metrics_version"] == "tiny2dseg/1"
    document = out["summary"]["aggregates"]  # the plug-in's own summary document
    assert document["summary_id"] == "tiny2dseg/summary"
    assert document["n_cases"] == 5 and out["failed"] == 0
    assert document["release"]["mechanism"] == "gaussian"  # a private release, OpenDP's noise
    assert out["exact"]["release"]["columns"][0]["sum"] / 5 > 0.8


def test_benchmark_init_scaffolds_a_plugin_that_installs_and_passes_its_own_test(
    tmp_path: Path,
) -> None:
    from typer.testing import CliRunner

    from sealbench.client.cli import app

    made = CliRunner().invoke(app, ["benchmark", "init", "knee-seg", "--dest", str(tmp_path)])
    assert made.exit_code == 0, made.output
    source = tmp_path / "knee-seg"
    assert (source / "src" / "knee_seg" / "plugin.py").is_file()
    again = CliRunner().invoke(app, ["benchmark", "init", "knee-seg", "--dest", str(tmp_path)])
    assert again.exit_code != 0 and "already exists" in again.output
    bad = CliRunner().invoke(app, ["benchmark", "init", "Knee Seg", "--dest", str(tmp_path)])
    assert bad.exit_code != 0 and "invalid benchmark plug-in name" in bad.output
    python = plugin_python(tmp_path / "env", source)
    done = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(source / "tests")], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 passed" in done.stdout  # the plug-in's evaluation and its shipped definition

