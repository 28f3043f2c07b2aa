"""The output the role guides (``docs/guide-*.md``) show is what the commands print (issue 31
item 2).

Why a comparison, and a regeneration that only serves it: each shown output is compared with a
real one from a fresh ``sealbench demo --size small --cases 5 --serve`` at 100 columns, the
width the guides are printed at: a read (``READS``) is run against the serving demo, any other
command's output is the demo's own, from its log (``demo.log``, every command's output after
its ``$ sealbench ...`` line). What differs between two honest runs (ids, digests, ports,
dates, durations, figures drawn with privacy noise, table widths, the log records and progress
bars on stderr) is normalised on both sides; a shown ``…`` line stands for any number of real
lines, so a guide stays short where the output is long (a request preview, a run list). A
block that no longer matches fails here with its diff; ``python -m sealbench.client.cli.doc
--guides WORKDIR [--all] docs/guide-*.md``, against a demo serving from WORKDIR, rewrites the
stale blocks from it (keeping their elisions), so fixing the docs is one command and the diff
of the guide is reviewed like code. A guide was not made a pure template filled at build time:
its outputs must read well on GitHub as written, with hand-chosen elisions.

A block the demo cannot produce (a second run of a command the demo runs once, a refusal the
demo catches, a withdrawal that would change the state later blocks read) carries ``<!-- output
not checked: WHY -->`` above it; every other shown output must be checked, so a new example
cannot slip in unchecked.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx
import pytest

from sealbench.client.cli.doc import (
    GUIDE_COLUMNS,
    GUIDE_WORKDIR,
    ShownOutput,
    compare_guide,
)

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _serve(workdir: Path, home: Path) -> subprocess.Popen[str]:
    """``sealbench demo --size small --cases 5 --serve`` in ``workdir``, once it serves."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "LANG": "C.UTF-8", "COLUMNS": str(GUIDE_COLUMNS), "TERM": "dumb"}
    script = Path(sys.executable).parent / "sealbench"
    proc = subprocess.Popen(
        [str(script), "demo", "--size", "small", "--cases", "5", "--serve", "--workdir",
         str(workdir)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        assert line, "".join(lines)[-4000:]
        lines.append(line)
        if line.startswith("serving the registry"):
            return proc
    raise AssertionError("".join(lines)[-4000:])


def _three_channel_model(workdir: Path) -> None:
    """The model-owner guide's misfit: the demo's reference model declaring 3 input channels."""
    model = onnx.load(workdir / "model-ref" / "brats_small_unet.onnx")
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 3
    onnx.save(model, workdir / "model-ref" / "three-channels.onnx")


@pytest.mark.slow
def test_the_guides_show_what_the_commands_print(tmp_path: Path) -> None:
    # a work folder named as long as the guides' one, so that tables naming it are as wide
    workdir = Path(tempfile.mkdtemp(prefix="sbguid", dir="/tmp"))
    assert len(str(workdir)) == len(GUIDE_WORKDIR)
    home = tmp_path / "home"
    home.mkdir()
    proc = None
    try:
        proc = _serve(workdir, home)
        _three_channel_model(workdir)
        compared: list[ShownOutput] = []
        for guide in sorted(DOCS.glob("guide-*.md")):
            compared.extend(compare_guide(guide, workdir))
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)
    problems = [item.problem for item in compared if item.problem]
    assert not problems, (
        "\n\n".join(problems) + "\n\nthese outputs shown in the guides are stale: against a "
        "'sealbench demo --size small --cases 5 --serve --workdir WORKDIR' (COLUMNS=100), run "
        "'python -m sealbench.client.cli.doc --guides WORKDIR docs/guide-*.md'"
    )
    unexplained = [f"{item.command.guide}: sealbench {' '.join(item.command.argv)}"
                   for item in compared if item.real is None and not item.command.unchecked]
    assert not unexplained, ("outputs neither the demo nor a read produces, with no "
                             "'<!-- output not checked: WHY -->' above them", unexplained)
    checked = [item for item in compared if item.real is not None]
    assert len(checked) >= 35, len(checked)
    assert {re.sub(r"\.md$", "", item.command.guide) for item in checked} == {
        "guide-authority", "guide-hospital", "guide-model-owner"}
