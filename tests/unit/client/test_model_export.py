"""``model export`` / ``model check``: a PyTorch model exported for the BraTS contract, checked
for the contract, for really dynamic spatial axes and for parity with PyTorch; models that break
one of them refused with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from sealbench.benchmarks.interface import Benchmark
from sealbench.client.assets import model_export
from sealbench.client.assets import prepare as assets
from sealbench.client.cli import app
from sealbench.client.errors import ConfigError


@pytest.fixture(scope="module")
def plugin() -> Benchmark:
    return assets.definition_plugin("brats-small")


class TinySeg(torch.nn.Module):
    """A plain torch.nn.Module of the contract's shape (4 modalities in, 4 classes out)."""

    def __init__(self, in_channels: int = 4, out_channels: int = 4) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv3d(in_channels, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv3d(8, out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(torch.relu(self.conv1(x)))


class FixedSize(TinySeg):
    """Flattens through a hard-coded size: exports, but only runs at 32x32x32."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        return y.reshape(1, 4, 32 * 32 * 32).reshape(1, 4, 32, 32, 32)


class Drifts(TinySeg):
    """Different in PyTorch and ONNX: a training-mode dropout the export folds away."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        return y + 0.5 if torch.jit.is_tracing() or torch.onnx.is_in_onnx_export() else y


def test_plain_module_exports_checks_and_matches_pytorch(tmp_path: Path, plugin: Benchmark) -> None:
    torch.manual_seed(0)
    out = tmp_path / "tiny.onnx"
    check = model_export.export_module(TinySeg(), plugin, out)
    assert out.is_file() and check.bytes == out.stat().st_size
    assert check.report.opset == model_export.DEFAULT_OPSET
    assert [s[2:] for s in check.run_shapes] == [(32, 32, 32), (48, 32, 64)]
    assert check.parity is not None and check.parity.max_abs_diff < 1e-4
    assert check.parity.argmax_agreement > 0.999
    # the file alone passes the check again, ORT only
    again = model_export.check_onnx(out.read_bytes(), plugin)
    assert again.parity is None and again.report.opset == check.report.opset


def test_wrong_channels_refused_with_nothing_written(tmp_path: Path, plugin: Benchmark) -> None:
    out = tmp_path / "bad.onnx"
    with pytest.raises(ConfigError, match="output classes 3, expected 4"):
        model_export.export_module(TinySeg(out_channels=3), plugin, out)
    with pytest.raises(ConfigError, match=r"torch.onnx.export failed: .*3 channels"):
        model_export.export_module(TinySeg(in_channels=3), plugin, out)
    assert list(tmp_path.iterdir()) == []


def test_fixed_size_graph_refused(tmp_path: Path, plugin: Benchmark) -> None:
    with pytest.raises(ConfigError, match="fixed, expected dynamic"):
        model_export.export_module(FixedSize(), plugin, tmp_path / "fixed.onnx")
    assert list(tmp_path.iterdir()) == []


def test_declared_dynamic_but_fixed_inside_refused_by_running_it(plugin: Benchmark) -> None:
    """Axes declared dynamic pass the static contract check; the second run shape finds the
    constant crop inside."""
    dims = ["N", 4, "D", "H", "W"]
    graph = helper.make_graph(
        [helper.make_node("Slice", ["image", "starts", "ends", "axes"], ["logits"])], "fixed",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, dims)],
        [numpy_helper.from_array(np.array(v, dtype=np.int64), n)
         for v, n in (([0, 0, 0], "starts"), ([32, 32, 32], "ends"), ([2, 3, 4], "axes"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    with pytest.raises(ConfigError, match=r"gave \(1, 4, 32, 32, 32\), expected \(1, 4, 48"):
        model_export.check_onnx(model.SerializeToString(), plugin)


def test_parity_failure_refused(tmp_path: Path, plugin: Benchmark) -> None:
    with pytest.raises(ConfigError, match="ONNX Runtime and PyTorch disagree"):
        model_export.export_module(Drifts(), plugin, tmp_path / "drift.onnx")
    assert list(tmp_path.iterdir()) == []


def test_opset_outside_the_contract_refused(tmp_path: Path, plugin: Benchmark) -> None:
    with pytest.raises(ConfigError, match=r"opset 13 is outside the benchmark's 17..21"):
        model_export.export_module(TinySeg(), plugin, tmp_path / "m.onnx", opset=13)


def test_weights_must_fit_and_are_read_weights_only(tmp_path: Path, plugin: Benchmark) -> None:
    weights = tmp_path / "w.pt"
    torch.save(TinySeg(in_channels=3).state_dict(), weights)
    with pytest.raises(ConfigError, match="does not fit"):
        model_export.load_torch_module(f"{__name__}:TinySeg", {}, weights)
    evil = tmp_path / "evil.pt"
    torch.save({"state_dict": TinySeg()}, evil)  # a pickled object, not tensors
    with pytest.raises(ConfigError, match="cannot read weights"):
        model_export.load_torch_module(f"{__name__}:TinySeg", {}, evil)
    with pytest.raises(ConfigError, match=r"module.path:Callable"):
        model_export.load_torch_module("os.system('x')", {}, None)
    with pytest.raises(ConfigError, match=r"expected a torch.nn.Module"):
        model_export.load_torch_module("collections:OrderedDict", {}, None)


def test_cli_export_then_check_with_parity(tmp_path: Path, plugin: Benchmark) -> None:
    weights = tmp_path / "w.pt"
    torch.manual_seed(1)
    torch.save(TinySeg().state_dict(), weights)
    out = tmp_path / "m.onnx"
    runner = CliRunner()
    factory = ["--factory", f"{__name__}:TinySeg", "--weights", str(weights), "--definition",
               "brats-small"]
    result = runner.invoke(app, ["model", "export", str(out), *factory])
    assert result.exit_code == 0, result.output
    assert "meets the model contract" in result.output and "parity with PyTorch" in result.output
    result = runner.invoke(app, ["model", "check", str(out), *factory, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["parity"]["max_abs_diff"] < 1e-4 and doc["opset"] == 18
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not onnx")
    result = runner.invoke(app, ["model", "check", str(bad), "--definition", "brats-small"])
    assert result.exit_code == 3 and "not a loadable ONNX model" in result.output


class Recording(TinySeg):
    """Remembers the input of its last forward call (the parity input, in eval mode)."""

    seen: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (torch.jit.is_tracing() or torch.onnx.is_in_onnx_export()):
            Recording.seen = x.clone()
        return super().forward(x)


def test_parity_is_checked_on_the_plugins_demo_case_as_the_segmenter_feeds_it(
    tmp_path: Path, plugin: Benchmark
) -> None:
    from sealbench.benchmarks.brats import OnnxSegmenter
    from sealbench.benchmarks.brats.cases import Case
    from sealbench.benchmarks.brats.contract import BRATS_2023_GLI_SMALL
    from sealbench.benchmarks.brats.synthetic import generate_case
    from sealbench.benchmarks.interface import ProvidesDemoModelInput

    torch.manual_seed(0)
    out = tmp_path / "rec.onnx"
    check = model_export.export_module(Recording(), plugin, out)
    assert check.parity is not None
    assert check.parity.input.startswith("demo case BraTS-GLI-00000-000 of brats-2023-gli")
    assert check.to_json()["parity"]["input"] == check.parity.input
    assert isinstance(plugin, ProvidesDemoModelInput)
    demo = plugin.demo_model_input()
    assert check.parity.shape == demo.array.shape and demo.array.shape[:2] == (1, 4)
    assert all(n % 16 == 0 for n in demo.array.shape[2:])  # padded as the segmenter pads
    assert Recording.seen is not None
    np.testing.assert_array_equal(Recording.seen.numpy(), demo.array)  # PyTorch saw the case
    # the very input the BraTS segmenter hands ONNX Runtime for that case
    fed: list[np.ndarray] = []
    segmenter = OnnxSegmenter(out.read_bytes(), BRATS_2023_GLI_SMALL, postprocess=None)

    def capture(x: np.ndarray) -> np.ndarray:
        fed.append(x[None].copy())
        return np.zeros((4, *x.shape[1:]), dtype=np.float32)

    segmenter._run = capture  # type: ignore[method-assign]
    case = generate_case(0, BRATS_2023_GLI_SMALL.shape, BRATS_2023_GLI_SMALL)
    segmenter.segment_raw(Case("BraTS-GLI-00000-000", case.modalities, case.affine, None))
    [x] = fed
    np.testing.assert_array_equal(x, demo.array)


def test_parity_falls_back_to_noise_when_the_plugin_has_no_demo_case(
    tmp_path: Path, plugin: Benchmark
) -> None:
    class NoDemo:
        """The BraTS plug-in without ``demo_model_input``."""

        def __getattr__(self, name: str) -> object:
            if name == "demo_model_input":
                raise AttributeError(name)
            return getattr(plugin, name)

    torch.manual_seed(0)
    check = model_export.export_module(TinySeg(), NoDemo(), tmp_path / "n.onnx")  # type: ignore[arg-type]
    assert check.parity is not None and check.parity.input == "synthetic random input"
    assert check.parity.shape == (1, 4, *model_export.CHECK_SHAPES[0])


def test_cli_check_says_which_input_parity_used(tmp_path: Path) -> None:
    weights = tmp_path / "w.pt"
    torch.manual_seed(2)
    torch.save(TinySeg().state_dict(), weights)
    out = tmp_path / "m.onnx"
    factory = ["--factory", f"{__name__}:TinySeg", "--weights", str(weights), "--definition",
               "brats-small"]
    result = CliRunner().invoke(app, ["model", "export", str(out), *factory])
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert "parity with PyTorch on the demo case BraTS-GLI-00000-000" in flat
