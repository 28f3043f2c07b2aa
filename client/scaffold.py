"""``sealbench benchmark init NAME``: scaffold a benchmark plug-in package to start from.

The package is complete and works as it is (a small 2D segmentation task, Dice per case, the
same example as the test suite's third-party plug-in under ``tests/plugins/``), written only
against the public interface ``sealbench.benchmarks.interface`` and declared in the entry-point
group ``sealbench.benchmarks``: ``pip install ./NAME`` makes it a benchmark sealbench finds by
name. It ships its benchmark definition (``benchmark create --definition NAME``,
``benchmark definition export NAME``) and declares what its own tests need (the ``test``
extra: ``pip install './NAME[test]'``).
``docs/benchmark-authoring.md`` says how to turn it into your task, test it, build it into the
evaluation image and publish it. Written into a hidden sibling folder and renamed into place
only when complete; an existing folder is never touched.
"""

from __future__ import annotations

import re
import secrets
import shutil
from pathlib import Path
from typing import Final

from sealbench.client.errors import ConfigError

__all__ = ["PLUGIN_NAME", "package_name", "scaffold_plugin"]

#: A plug-in's name, as :class:`sealbench.benchmarks.interface.BenchmarkPin` accepts it.
PLUGIN_NAME: Final = re.compile(r"^[a-z][a-z0-9._-]{0,47}$")


def package_name(name: str) -> str:
    """The Python package of plug-in ``name`` (``my-task`` -> ``my_task``)."""
    return re.sub(r"[.-]", "_", name)


def _class_name(name: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[._-]", name) if part) + "Benchmark"


def scaffold_plugin(name: str, parent: Path) -> Path:
    """Write the package of plug-in ``name`` into ``parent/name`` and return that folder;
    :class:`ConfigError` for an invalid name or an existing folder."""
    if not PLUGIN_NAME.match(name):
        raise ConfigError(
            f"invalid benchmark plug-in name {name!r}",
            hint="use 1-48 lower-case letters, digits, '.', '_' or '-', starting with a letter",
        )
    target = parent / name
    if target.exists() or target.is_symlink():
        raise ConfigError(f"{target} already exists", hint="choose another name or folder")
    package = package_name(name)
    files = {
        "pyproject.toml": _PYPROJECT,
        "README.md": _README,
        f"src/{package}/__init__.py": f'"""The {name} benchmark plug-in for sealbench."""\n',
        f"src/{package}/py.typed": "",
        f"src/{package}/plugin.py": _PLUGIN,
        "tests/test_plugin.py": _TEST,
    }
    parent.mkdir(parents=True, exist_ok=True)
    tmp = parent / f".{name}.partial-{secrets.token_hex(4)}"
    try:
        for rel, text in files.items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text.replace("__NAME__", name).replace("__PACKAGE__", package)
                            .replace("__CLASS__", _class_name(name)))
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


_PYPROJECT: Final = '''[build-system]
requires = ["setuptools>=75", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "__NAME__"
version = "0.1.0"
description = "The __NAME__ benchmark plug-in for sealbench"
requires-python = ">=3.11"
# What the evaluation image installs anyway (numpy, scipy, ONNX Runtime, nibabel); anything
# else must be given to the image build as a wheel too (docs/benchmark-authoring.md).
dependencies = ["sealbench[enclave]"]

[project.optional-dependencies]
# What its own tests need besides the above: pip install -e '.[test]'
test = ["pytest>=8.0", "onnx>=1.16"]

[project.entry-points."sealbench.benchmarks"]
__NAME__ = "__PACKAGE__.plugin:PLUGIN"

[tool.setuptools]
package-dir = { "" = "src" }
packages = ["__PACKAGE__"]

[tool.setuptools.package-data]
__PACKAGE__ = ["py.typed"]
'''

_README: Final = '''# __NAME__: a sealbench benchmark plug-in

Made by `sealbench benchmark init __NAME__`. It works as it is (a small 2D segmentation task,
Dice per case); change `src/__PACKAGE__/plugin.py` into your task, following
sealbench's `docs/benchmark-authoring.md`.

```
pip install -e '.[test]'              # sealbench now finds the plug-in '__NAME__'
python -m pytest tests                # the plug-in through the interface, as the enclave uses it
sealbench benchmark definition export __NAME__ > __NAME__.json   # the definition it ships
```

Build it into the evaluation image with
`sealbench.client.images.build.build_image(engine, SEALBENCH_CHECKOUT,
plugins=[Path("__NAME__")])`. The registry's operator installs it into the registry server's
environment too (the registry refuses a benchmark whose plug-in it does not have); then
publish the definition it ships with `sealbench benchmark create --definition __NAME__`.
'''

_TEST: Final = '''"""__NAME__ through the interface, as sealbench's enclave and registry use
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
    plugin = PluginRegistry().get("__NAME__")
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
    plugin = PluginRegistry().get("__NAME__")
    [(name, definition)] = plugin.definitions().items()
    assert name == "__NAME__" and definition["plugin"] == str(plugin.ref)
    assert definition["format"] == "sealbench/benchmark-definition"
    assert definition["contract"] == plugin.data_contract()
    assert definition["metrics"] == plugin.metrics_spec()
    assert json.loads(json.dumps(definition)) == definition
'''

_PLUGIN: Final = '''"""__NAME__/1: a benchmark plug-in made by ``sealbench benchmark init``.

It starts as a complete, working example (segment the bright disc in small noisy grey-level
images, Dice per case) written only against ``sealbench.benchmarks.interface``: change the data
contract, the model contract, the scoring and the summary into your task's, keep the rules of
docs/benchmark-authoring.md (bounded parsed input, deterministic preparation, failures
penalised, a public summary of aggregates only), and bump the version in ``ref`` whenever a
number could change.

- Raw data: one folder per case, ``<case_id>/image.npy`` (float32, 32x32, values in [0, 1]) and
  ``<case_id>/mask.npy`` (uint8, 32x32, 0 or 1). Preparation copies valid cases into
  ``data/cases/<case_id>/`` and rejects the others with a reason.
- Model: ONNX, input float ``[N, 1, H, W]``, output float ``[N, 2, H, W]`` (background and disc
  scores; the arg-max is the prediction).
- Metric: Dice per case (1 when both masks are empty), a failed case scores 0; the summary is a
  differentially private release of the mean (``RELEASE_SPEC``).
"""

from __future__ import annotations

import io
import json
import secrets
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import onnxruntime as ort

from sealbench.benchmarks import interface as api
from sealbench.benchmarks.release import (
    Column,
    NoiseSource,
    Release,
    ReleaseError,
    ReleaseSpec,
    column_mean,
    release,
)
from sealbench.crypto.manifest import build_manifest

__all__ = ["PLUGIN", "__CLASS__"]

SIZE: Final = 32
MAX_NPY_BYTES: Final = 64 * 1024
LAYOUT: Final = api.PreparedLayout()
_FORMAT: Final = "__NAME__/prepared"
_CONTRACT: Final = {"format": "__NAME__/contract", "version": 1, "size": [SIZE, SIZE],
                    "files": ["image.npy", "mask.npy"]}
_ID_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")


@dataclass(frozen=True)
class Case:
    case_id: str
    image: np.ndarray
    mask: np.ndarray


@dataclass(frozen=True)
class CaseScore:
    case_id: str
    dice: float
    reason: str | None = None

    @property
    def failed(self) -> bool:
        return self.reason is not None

    def to_json(self) -> api.JsonObject:
        return {"case_id": self.case_id, "dice": self.dice, "reason": self.reason}


#: What a summary releases (differentially private, OpenDP's Gaussian noise drawn in the enclave):
#: the Dice of each case clipped to [0, 1], summed, at epsilon 1, delta 1e-6 per release.
RELEASE_SPEC: Final = ReleaseSpec((Column("dice", 0.0, 1.0),))


@dataclass(frozen=True)
class Summary:
    n_cases: int
    release: Release

    def to_json(self) -> api.JsonObject:
        return {"summary_id": "__NAME__/summary", "version": 2, "n_cases": self.n_cases,
                "release": self.release.to_json()}


def _valid_id(case_id: str) -> bool:
    return 0 < len(case_id) <= 32 and set(case_id) <= _ID_CHARS and case_id[0] not in "-_"


def _npy(data: bytes, dtype: str, what: str) -> np.ndarray:
    if len(data) > MAX_NPY_BYTES:
        raise api.CaseError(f"{what}: larger than {MAX_NPY_BYTES} bytes")
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise api.CaseError(f"{what}: not a .npy array") from exc
    if array.dtype != np.dtype(dtype) or array.shape != (SIZE, SIZE):
        raise api.CaseError(f"{what}: expected {dtype} {SIZE}x{SIZE}, found {array.dtype} "
                            f"{'x'.join(map(str, array.shape))}")
    return np.asarray(array)


def _check_case(case_id: str, image: np.ndarray, mask: np.ndarray) -> Case:
    if not np.all(np.isfinite(image)) or image.min() < 0 or image.max() > 1:
        raise api.CaseError("image values must be finite and in [0, 1]")
    if not np.isin(mask, (0, 1)).all():
        raise api.CaseError("mask values must be 0 or 1")
    return Case(case_id, image, mask)


def _to_npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array, allow_pickle=False)
    return out.getvalue()


class _Layout:
    def group(self, paths: Iterable[str]) -> Mapping[str, tuple[str, ...]]:
        grouped: dict[str, list[str]] = {}
        for path in paths:
            parts = path.split("/")
            if (len(parts) != 3 or parts[0] != LAYOUT.cases_dir or not _valid_id(parts[1])
                    or parts[2] not in ("image.npy", "mask.npy")):
                raise api.CaseError("a file is not cases/<case id>/{image,mask}.npy")
            grouped.setdefault(parts[1], []).append(path)
        return {case_id: tuple(sorted(files)) for case_id, files in grouped.items()}

    def load(self, files: Mapping[str, bytes]) -> Case:
        grouped = self.group(files)
        if len(grouped) != 1:
            raise api.CaseError("a case object must hold exactly one case")
        [(case_id, paths)] = grouped.items()
        names = {p.rsplit("/", 1)[1]: p for p in paths}
        if set(names) != {"image.npy", "mask.npy"}:
            raise api.CaseError("a case needs image.npy and mask.npy")
        return _check_case(case_id, _npy(files[names["image.npy"]], "float32", "image"),
                           _npy(files[names["mask.npy"]], "uint8", "mask"))


class _Runner:
    def __init__(self, session: ort.InferenceSession) -> None:
        self._session = session
        self._input = session.get_inputs()[0].name

    def predict(self, case: Case) -> np.ndarray:
        try:
            [logits] = self._session.run(None, {self._input: case.image[None, None]})
        except Exception as exc:  # ONNX Runtime's own exception types
            raise api.InferenceError(f"ONNX Runtime failed: {type(exc).__name__}") from exc
        if logits.shape != (1, 2, SIZE, SIZE):
            raise api.InferenceError(f"output shape {list(logits.shape)}, expected [1, 2, H, W]")
        return np.asarray(np.argmax(logits[0], axis=0).astype(np.uint8))


def _dice(pred: np.ndarray, truth: np.ndarray) -> float:
    total = int(pred.sum() + truth.sum())
    return 1.0 if total == 0 else 2.0 * int((pred & truth).sum()) / total


class __CLASS__:
    """The __NAME__/1 plug-in."""

    def __init__(self) -> None:
        self.ref = api.BenchmarkPin("__NAME__", "1")
        self.description = "Segment the bright disc in 32x32 noisy images; Dice per case."
        self.presentation = api.Presentation(
            metrics=(api.MetricSpec("dice", "Dice", "", api.Direction.HIGHER, False,
                                    "mean Dice over the cases"),),
            groups=(), headline=api.MetricRef("dice"),
            columns=(api.MetricRef("dice"),))
        self.model_contract = api.ModelContract(
            inputs=(api.TensorSpec(None, "float32", ("N", 1, "H", "W")),),
            outputs=(api.TensorSpec(None, "float32", ("N", 2, "H", "W")),),
            opsets=(13, 21), max_bytes=1 << 20,
            description="input float [N,1,H,W], output float [N,2,H,W] (background, disc)")
        self.layout = LAYOUT
        self.small_cell_minimum = 3
        self.release_spec = RELEASE_SPEC
        self.shipped_models: tuple[api.ShippedModel, ...] = ()

    def data_contract(self) -> api.JsonObject:
        return dict(_CONTRACT)

    def metrics_spec(self) -> api.JsonObject:
        return {"metric": "dice", "failed_case_dice": 0.0}

    def definitions(self) -> Mapping[str, api.JsonObject]:
        """The benchmark definition it ships (``sealbench benchmark create --definition
        __NAME__``; ``benchmark definition export __NAME__`` writes it out to edit): its pin,
        contract and metrics; the evaluation image is named at publication."""
        return {"__NAME__": {
            "format": "sealbench/benchmark-definition", "format_version": 1,
            "plugin": str(self.ref), "name": "__NAME__", "version": "1.0.0",
            "description": self.description + " Published: the mean Dice, a differentially "
            "private release.",
            "contract": self.data_contract(), "metrics": self.metrics_spec(),
            "evaluation_image_reference": None, "evaluation_image_digest": None}}

    def prepare(self, raw_dir: Path, out_dir: Path, *, progress: api.ProgressFn | None = None,
                strict: bool = False) -> api.Prepared:
        if out_dir.exists():
            raise api.PreparationError(f"output {out_dir} already exists")
        folders = sorted(p for p in raw_dir.iterdir() if p.is_dir()) if raw_dir.is_dir() else []
        accepted: list[str] = []
        rejected: list[api.CaseRejection] = []
        tmp = out_dir.parent / f".{out_dir.name}.partial-{secrets.token_hex(4)}"
        cases = tmp / LAYOUT.data_dir / LAYOUT.cases_dir
        cases.mkdir(parents=True)
        try:
            for done, folder in enumerate(folders, start=1):
                try:
                    if not _valid_id(folder.name):
                        raise api.CaseError("folder name is not a case id")
                    case = _check_case(
                        folder.name,
                        _npy((folder / "image.npy").read_bytes(), "float32", "image"),
                        _npy((folder / "mask.npy").read_bytes(), "uint8", "mask"))
                except (api.CaseError, OSError) as exc:
                    rejected.append(api.CaseRejection(folder.name, str(exc)))
                    continue
                (cases / case.case_id).mkdir()
                (cases / case.case_id / "image.npy").write_bytes(_to_npy(case.image))
                (cases / case.case_id / "mask.npy").write_bytes(_to_npy(case.mask))
                accepted.append(case.case_id)
                if progress is not None:
                    progress(done, len(folders))
            if not accepted or (strict and rejected):
                error = api.PreparationError(f"{len(rejected)} cases rejected, "
                                             f"{len(accepted)} accepted")
                error.rejected = tuple(rejected)
                raise error
            data = tmp / LAYOUT.data_dir
            (data / LAYOUT.dataset_file).write_text(json.dumps(
                {"format": _FORMAT, "contract": _CONTRACT, "n_cases": len(accepted)},
                sort_keys=True))
            statistics: api.JsonObject = {"n_cases": len(accepted)}
            (data / LAYOUT.statistics_file).write_text(json.dumps(statistics))
            manifest = build_manifest(data)
            (tmp / LAYOUT.manifest_file).write_bytes(manifest.to_bytes())
            tmp.rename(out_dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return api.Prepared(tuple(accepted), tuple(rejected), manifest.digest, statistics)

    def open_dataset(self, dataset_json: bytes) -> _Layout:
        try:
            doc = json.loads(dataset_json[: 1 << 16])
        except ValueError as exc:
            raise api.CaseError("dataset.json is not JSON") from exc
        if (not isinstance(doc, dict) or doc.get("format") != _FORMAT
                or doc.get("contract") != _CONTRACT):
            raise api.CaseError("the dataset was not prepared for __NAME__/1")
        return _Layout()

    def _session(self, model_bytes: bytes) -> ort.InferenceSession:
        if len(model_bytes) > self.model_contract.max_bytes:
            raise api.ModelContractError(("model larger than 1 MiB",))
        try:
            session = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ONNX Runtime's own exception types
            raise api.ModelContractError(("not a loadable ONNX model",)) from exc
        inputs, outputs = session.get_inputs(), session.get_outputs()
        differences = []
        if len(inputs) != 1 or len(inputs[0].shape) != 4 or inputs[0].shape[1] != 1:
            differences.append("expected one input [N, 1, H, W]")
        if len(outputs) != 1 or len(outputs[0].shape) != 4 or outputs[0].shape[1] != 2:
            differences.append("expected one output [N, 2, H, W]")
        if differences:
            raise api.ModelContractError(tuple(differences))
        return session

    def check_model(self, model_bytes: bytes) -> api.ModelReport:
        session = self._session(model_bytes)
        return api.ModelReport(
            inputs=(api.TensorSpec(session.get_inputs()[0].name, "float32",
                                   tuple(session.get_inputs()[0].shape)),),
            outputs=(api.TensorSpec(session.get_outputs()[0].name, "float32",
                                    tuple(session.get_outputs()[0].shape)),),
            opset=0)

    def load_model(self, model_bytes: bytes) -> _Runner:
        return _Runner(self._session(model_bytes))

    def score(self, case: Case, prediction: Any) -> CaseScore:
        if not isinstance(prediction, np.ndarray) or prediction.shape != case.mask.shape:
            return CaseScore(case.case_id, 0.0, "prediction is not a mask of the image's size")
        return CaseScore(case.case_id, _dice(prediction.astype(bool), case.mask.astype(bool)))

    def failure(self, case_id: str, reason: str) -> CaseScore:
        return CaseScore(case_id, 0.0, reason)

    def summarise(self, results: Sequence[api.CaseResult], noise: NoiseSource) -> Summary:
        if not results:
            raise ValueError("cannot summarise zero cases")
        dice = np.array([[r.dice] for r in results if isinstance(r, CaseScore)])
        if len(dice) != len(results):
            raise TypeError("results of another benchmark")
        made = release(dice, RELEASE_SPEC, noise)
        return Summary(made.n_cases, made)

    def parse_summary(self, doc: Mapping[str, Any]) -> Summary:
        if (set(doc) != {"summary_id", "version", "n_cases", "release"}
                or doc["summary_id"] != "__NAME__/summary" or doc["version"] != 2):
            raise api.SummaryError("not a __NAME__/summary version 2 document")
        try:
            made = Release.from_json(doc["release"])
        except ReleaseError as exc:
            raise api.SummaryError(str(exc)) from exc
        if not made.matches(RELEASE_SPEC) or made.n_cases != doc["n_cases"]:
            raise api.SummaryError("the summary's release is not the one __NAME__ declares")
        return Summary(made.n_cases, made)

    def parse_case_result(self, doc: Mapping[str, Any]) -> CaseScore:
        try:
            return CaseScore(str(doc["case_id"]), float(doc["dice"]), doc.get("reason"))
        except (KeyError, TypeError, ValueError) as exc:
            raise api.SummaryError("not a __NAME__ case result") from exc

    def figures(self, summary: api.PublicSummary) -> tuple[api.Figure, ...]:
        if not isinstance(summary, Summary):
            raise TypeError("a summary of another benchmark")
        mean = column_mean(summary.release, "dice")
        return (api.Figure(api.MetricRef("dice"), mean.shown if mean.informative else None,
                           mean.low, mean.high),)

    def pool(self, summaries: Sequence[api.PublicSummary]) -> api.PooledFigures:
        raise api.PoolingNotSupportedError("__NAME__ keeps no sufficient statistics")

    def model_bytes(self, name: str) -> bytes:
        raise KeyError(name)

    def write_demo_dataset(self, out_dir: Path, n_cases: int, *, seed: int = 0) -> tuple[str, ...]:
        rng = np.random.default_rng(seed)
        yy, xx = np.mgrid[:SIZE, :SIZE]
        ids = []
        for i in range(n_cases):
            cy, cx = rng.uniform(8, SIZE - 8, 2)
            radius = rng.uniform(3, 7)
            mask = ((yy - cy) ** 2 + (xx - cx) ** 2 <= radius**2).astype(np.uint8)
            image = np.clip(0.25 + 0.5 * mask + rng.normal(0, 0.08, mask.shape), 0, 1)
            case_id = f"disc-{seed:03d}-{i:03d}"
            (out_dir / case_id).mkdir(parents=True, exist_ok=True)
            np.save(out_dir / case_id / "image.npy", image.astype(np.float32))
            np.save(out_dir / case_id / "mask.npy", mask)
            ids.append(case_id)
        return tuple(ids)


PLUGIN: Final[api.Benchmark] = __CLASS__()
'''
