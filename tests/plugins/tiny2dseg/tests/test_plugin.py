"""tiny2dseg through the interface, as sealbench's enclave and registry use
it: found by name, demo data prepared, every case loaded, predicted and scored, the summary
validated."""

import json
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from sealbench.benchmarks.registry import PluginRegistry
from sealbench.benchmarks.release import InsecureFixedNoise


def _threshold_model() -> bytes:
    """Scores the disc where the intensity is above 0.5."""
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


def test_every_case_is_scored_and_the_summary_validates(tmp_path: Path) -> None:
    plugin = PluginRegistry().get("tiny2dseg")
    plugin.write_demo_dataset(tmp_path / "raw", 5, seed=1)
    prepared = plugin.prepare(tmp_path / "raw", tmp_path / "prepared")
    assert len(prepared.accepted) == 5 and not prepared.rejected
    data = tmp_path / "prepared" / plugin.layout.data_dir
    layout = plugin.open_dataset((data / plugin.layout.dataset_file).read_bytes())
    runner = plugin.load_model(_threshold_model())
    paths = [p.relative_to(data).as_posix() for p in data.glob("cases/*/*")]
    results = []
    for files in layout.group(paths).values():
        case = layout.load({p: (data / p).read_bytes() for p in files})
        results.append(plugin.score(case, runner.predict(case)))
    summary = plugin.summarise(results, InsecureFixedNoise())
    assert summary.n_cases == 5 and summary.release.epsilon == 1.0
    assert plugin.parse_summary(json.loads(json.dumps(summary.to_json()))) == summary


def test_the_shipped_definition_is_this_plugins() -> None:
    plugin = PluginRegistry().get("tiny2dseg")
    [(name, definition)] = plugin.definitions().items()
    assert name == "tiny2dseg" and definition["plugin"] == str(plugin.ref)
    assert definition["format"] == "sealbench/benchmark-definition"
    assert definition["contract"] == plugin.data_contract()
    assert definition["metrics"] == plugin.metrics_spec()
    assert json.loads(json.dumps(definition)) == definition
