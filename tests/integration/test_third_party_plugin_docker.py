"""The third-party plug-in (``tests/plugins/tiny2dseg``) installed into an evaluation image and
evaluated confidentially in it: the image is built from the session's source snapshot with the
plug-in's wheel beside sealbench (no change outside ``tests/``), its label names the plug-in,
its digest differs from the plain image's, and a run in it through the Docker launcher gets its
keys released for exactly that digest and plug-in version and returns a result the hospital
opens; the packages a plug-in may import stay whole in its image (``scipy.stats``, which the
image without plug-ins does not ship). (The label is part of the image configuration, so the
digest differs from the plain image's too.)"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sealbench.client.images.build import LABEL_PLUGINS, build_image

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PLUGIN_SOURCE = REPO / "tests" / "plugins" / "tiny2dseg"


def _helpers() -> tuple[object, object]:
    """``plugin_python`` and ``threshold_model`` of the plug-in's own test module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "third_party_plugin_helpers", Path(__file__).with_name("test_third_party_plugin.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.plugin_python, module.threshold_model


def test_plugin_in_the_evaluation_image_is_evaluated_confidentially(
    docker_engine: DockerClient,
    source_snapshot: Path,
    tmp_path: Path,
) -> None:
    plugin_python, threshold_model = _helpers()
    built = build_image(docker_engine, source_snapshot, plugins=[PLUGIN_SOURCE],
                        repository="sealbench-eval-plugins")
    assert built.labels[LABEL_PLUGINS] == "tiny2dseg==0.1.0"
    # a plug-in's imports were not traced: the packages it may use stay whole (scipy.stats,
    # which the image without plug-ins does not ship, docs/image.md)
    listed = docker_engine.containers.run(
        built.reference, entrypoint=["python", "-c",
                                     "import importlib.util;"
                                     "from sealbench.benchmarks.registry import PluginRegistry;"
                                     "print(' '.join(PluginRegistry().names()),"
                                     " importlib.util.find_spec('scipy.stats') is not None)"],
        remove=True, network_disabled=True)
    assert "tiny2dseg" in listed.decode().split()
    assert listed.decode().split()[-1] == "True"
    python = plugin_python(tmp_path / "env")  # type: ignore[operator]
    (tmp_path / "model.onnx").write_bytes(threshold_model())  # type: ignore[operator]
    done = subprocess.run(
        [python, str(PLUGIN_SOURCE.parent / "confidential_run.py"), "--plugin", "tiny2dseg",
         "--model", str(tmp_path / "model.onnx"), "--root", str(tmp_path / "run"),
         "--cases", "4", "--tee", "docker", "--image", built.reference],
        capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["image_digest"] == built.digest == out["attested_image"]
    assert out["attested_pin"] == "tiny2dseg/1" and out["results"] == 4
    document = out["summary"]["aggregates"]
    assert document["summary_id"] == "tiny2dseg/summary"
    assert document["release"]["mechanism"] == "gaussian" and out["failed"] == 0
    assert out["exact"]["release"]["columns"][0]["sum"] / 4 > 0.8
