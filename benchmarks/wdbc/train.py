"""Train the two shipped WDBC models and convert them to ONNX (``sealbench[train]``).

    python -m sealbench.benchmarks.wdbc.train --out benchmarks/wdbc/model

The recipe (reproducible: the split and the MLP's initialisation are seeded, the solvers are
deterministic):

- data: the training split of :func:`.data.split_cases` (30% of each class, seed
  :data:`.data.SPLIT_SEED`; 171 cases, 64 malignant), never a site's case;
- ``wdbc_logreg`` (reference): ``StandardScaler`` + ``LogisticRegression(C=1.0, lbfgs)``;
- ``wdbc_mlp`` (baseline): ``StandardScaler`` + ``MLPClassifier((16,), alpha=1e-4, adam,
  max_iter=2000, random_state=seed)``: it separates its training split perfectly and is
  overconfident, which the calibration summary shows;
- conversion: skl2onnx, opsets ``'' = 17`` and ``ai.onnx.ml = 3``, no ZipMap, so the model has
  the benchmark's I/O contract: input ``features`` float32 ``[N, 30]`` (raw features, in
  :data:`.data.FEATURES` order) and output ``probabilities`` float32 ``[N, 2]`` (benign,
  malignant); the ``label`` output is ignored. Graph name and producer fields are fixed so the
  bytes depend only on the fitted weights.

Only this module needs scikit-learn and skl2onnx; the enclave needs ONNX Runtime only.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from .data import FEATURES, WdbcCase, load_wdbc, split_cases

__all__ = ["MODELS", "fit", "main", "to_onnx", "training_arrays"]

logger = logging.getLogger(__name__)

INPUT_NAME: Final = "features"
OPSETS: Final = {"": 17, "ai.onnx.ml": 3}
MODELS: Final = ("wdbc_logreg", "wdbc_mlp")


def training_arrays(
    cases: Sequence[WdbcCase],
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """Features (float32 ``[N, 30]``) and labels (1 = malignant) of ``cases``."""
    x = np.array([c.features for c in cases], dtype=np.float32)
    y = np.array([int(c.malignant) for c in cases], dtype=np.int64)
    return x, y


def fit(name: str, x: npt.NDArray[np.float32], y: npt.NDArray[np.int64], seed: int = 0) -> Any:
    """The fitted scikit-learn pipeline of model ``name``."""
    pipeline = importlib.import_module("sklearn.pipeline")
    preprocessing = importlib.import_module("sklearn.preprocessing")
    if name == "wdbc_logreg":
        linear = importlib.import_module("sklearn.linear_model")
        head: Any = linear.LogisticRegression(C=1.0, solver="lbfgs", max_iter=5000)
    elif name == "wdbc_mlp":
        network = importlib.import_module("sklearn.neural_network")
        head = network.MLPClassifier(hidden_layer_sizes=(16,), alpha=1e-4, solver="adam",
                                     max_iter=2000, random_state=seed)
    else:
        raise ValueError(f"unknown model {name!r}; expected one of {MODELS}")
    model = pipeline.make_pipeline(preprocessing.StandardScaler(), head)
    model.fit(x.astype(np.float64), y)
    return model


def to_onnx(model: Any, name: str) -> bytes:
    """ONNX bytes of a fitted pipeline, in the benchmark's I/O contract."""
    skl2onnx = importlib.import_module("skl2onnx")
    types = importlib.import_module("skl2onnx.common.data_types")
    onx = skl2onnx.convert_sklearn(
        model,
        name=name,
        initial_types=[(INPUT_NAME, types.FloatTensorType([None, len(FEATURES)]))],
        target_opset=OPSETS,
        options={id(model): {"zipmap": False}},
    )
    onx.producer_name = "sealbench.benchmarks.wdbc.train"
    onx.producer_version = "1"
    onx.doc_string = ""
    onx.graph.doc_string = ""
    data: bytes = onx.SerializeToString()
    return data


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the .onnx files")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    x, y = training_arrays(split_cases(load_wdbc()).training)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in MODELS:
        data = to_onnx(fit(name, x, y, args.seed), name)
        (args.out / f"{name}.onnx").write_bytes(data)
        logger.info("%s.onnx: %d bytes, sha256:%s (%d training cases, %d malignant)", name,
                    len(data), hashlib.sha256(data).hexdigest(), len(y), int(y.sum()))


if __name__ == "__main__":
    main()
