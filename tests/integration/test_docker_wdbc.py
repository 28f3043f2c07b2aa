"""The WDBC benchmark in the real evaluation image on the Docker tier: the image built from the
session's source snapshot carries the ``wdbc`` plug-in (found by name inside it), and a
confidential run of the shipped reference model over real cases of a demo site, through the
Docker launcher, gets its keys released by policy for exactly that image digest and plug-in
version and returns an attested result the hospital opens and the plug-in validates."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sealbench.benchmarks.registry import PluginRegistry

if TYPE_CHECKING:
    from docker import DockerClient

    from sealbench.client.images.build import ImageBuildResult

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[1] / "plugins" / "confidential_run.py"


def test_wdbc_runs_confidentially_in_the_evaluation_image(
    docker_engine: DockerClient, evaluation_image: ImageBuildResult, tmp_path: Path
) -> None:
    listed = docker_engine.containers.run(
        evaluation_image.reference,
        entrypoint=["python", "-c", "from sealbench.benchmarks.registry import PluginRegistry;"
                    "print(' '.join(PluginRegistry().names()))"],
        remove=True, network_disabled=True)
    assert "wdbc" in listed.decode().split()
    model = tmp_path / "wdbc_logreg.onnx"
    model.write_bytes(PluginRegistry().get("wdbc").model_bytes("wdbc_logreg"))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--plugin", "wdbc", "--model", str(model),
         "--root", str(tmp_path / "run"), "--cases", "100", "--seed", "0", "--tee", "docker",
         "--image", evaluation_image.reference],
        capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["image_digest"] == evaluation_image.digest == out["attested_image"]
    assert out["attested_pin"] == "wdbc/1" and out["results"] == 100
    summary = out["summary"]["aggregates"]
    assert summary["summary_id"] == "sealbench/wdbc-summary"
    # a release: the case count and noisy sums, with the privacy loss the pin declares
    assert summary["n_cases"] == 100 and summary["release"]["epsilon"] == 1.0
    assert summary["release"]["mechanism"] == "gaussian"
    assert "n_malignant" not in summary and "n_failed" not in summary
