"""Train the reference BraTS U-Net on synthetic cases and export it to ONNX (``sealbench[train]``).

    python -m sealbench.benchmarks.brats.train --out benchmarks/brats/model/brats_unet.onnx

Reproducible from ``--seed`` (torch on CPU, deterministic algorithms, fixed data seeds): training
cases use generator seeds ``100000 + seed*1000 + i``; the held-out evaluation set uses seeds
``900000..900019``, so the two never overlap. The network is a small 3D U-Net (levels of
``--channels``, two 3x3x3 conv + ReLU each, max-pool down, transposed conv up, skip concat, 1x1x1
head to 4 class logits). It is written functionally (plain tensors), and exported by building the
ONNX graph directly with ``onnx.helper`` (opset 17, input ``input`` [N,4,D,H,W] with dynamic N and
spatial axes, output ``logits`` [N,4,D,H,W]); spatial sizes must be multiples of
``2**(levels-1)``. Only this module needs torch; inference needs ONNX Runtime only.

With ``--thick-slices P`` each training crop is, with probability P, seen as a clinical protocol
acquires it: every sequence through its own random thick-slice, oblique stack and back
(:mod:`.thick_slices`), masked to the brain as a prepared case is.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .normalise import normalise_modalities
from .synthetic import generate_case
from .thick_slices import MARGIN, acquire_and_back, draw_acquisition

__all__ = ["TrainConfig", "check_parity", "export_onnx", "main", "train"]

logger = logging.getLogger(__name__)

N_CLASSES = 4
#: Training cases: the 2023 generators (4 classes) and the 2025 tasks' ones (:mod:`.tasks2025`,
#: on its geometric anatomy, as the 2025 pins' demo data; 5 classes, RC included).
TASKS_2025 = ("post-treatment", "metastases")
SYNTHETIC = ("cartoon", "anatomy", *TASKS_2025)
OPSET = 17
WARMUP_STEPS = 20
#: Training case ``i`` has seed ``100000 + 1000 * seed + i``; tumour-free case ``j`` (the seed's
#: own draws with no focus) ``100000 + 1000 * seed + TUMOUR_FREE_OFFSET + j``.
TUMOUR_FREE_OFFSET = 500

#: A training case: normalised modalities [4, X, Y, Z] (float16, cropped to the brain), class
#: indices, and each modality's raw zero in normalised units (the background a thick slice
#: averages in at the brain's edge).
TrainingCase = tuple[npt.NDArray[np.float16], npt.NDArray[np.uint8], npt.NDArray[np.float32]]


class TrainConfig:
    """Hyper-parameters of one training run (all have documented defaults)."""

    def __init__(self, *, seed: int = 0, channels: Sequence[int] = (8, 16, 32, 64),
                 steps: int = 300, batch: int = 2, crop: int = 64, n_cases: int = 8,
                 lr: float = 1e-3, threads: int = 2, synthetic: str = "cartoon",
                 init: bytes | None = None, tumour_free: int = 0,
                 grid: tuple[int, int, int] | None = None, thick_slices: float = 0.0,
                 ) -> None:
        if synthetic not in SYNTHETIC:
            raise ValueError(f"synthetic must be one of {', '.join(SYNTHETIC)}, received "
                             f"{synthetic!r}")
        if not 0 <= n_cases <= TUMOUR_FREE_OFFSET or not 0 <= tumour_free <= TUMOUR_FREE_OFFSET:
            raise ValueError(f"cases and tumour-free cases must each be 0-{TUMOUR_FREE_OFFSET}")
        if not 0.0 <= thick_slices <= 1.0:
            raise ValueError(f"thick_slices is a probability (0-1), received {thick_slices}")
        self.seed = seed
        self.synthetic = synthetic
        #: The grid training cases are generated on (None: the generator's default, full size).
        self.grid = grid
        #: Output classes: 5 (with RC) for the 2025 tasks' cases, else 4.
        self.n_classes = N_CLASSES + 1 if synthetic in TASKS_2025 else N_CLASSES
        self.init = init
        self.channels = tuple(channels)
        self.steps = steps
        self.batch = batch
        self.crop = crop
        self.n_cases = n_cases
        self.tumour_free = tumour_free
        self.lr = lr
        self.threads = threads
        #: Probability that a crop's sequences are acquired as thick slices and resampled back.
        self.thick_slices = thick_slices


def _torch() -> Any:
    return importlib.import_module("torch")


def init_params(channels: Sequence[int], generator: Any,
                n_classes: int = N_CLASSES) -> dict[str, Any]:
    """Kaiming-initialised parameters, named as the ONNX initialisers will be."""
    torch = _torch()
    params: dict[str, Any] = {}

    def conv(name: str, cin: int, cout: int, k: int) -> None:
        fan_in = cin * k**3
        w = torch.randn((cout, cin, k, k, k), generator=generator) * (2.0 / fan_in) ** 0.5
        params[f"{name}.w"] = w.requires_grad_()
        params[f"{name}.b"] = torch.zeros(cout).requires_grad_()

    cin = 4
    for i, c in enumerate(channels):
        conv(f"enc{i}a", cin, c, 3)
        conv(f"enc{i}b", c, c, 3)
        cin = c
    for i in range(len(channels) - 2, -1, -1):
        c, cup = channels[i], channels[i + 1]
        w = torch.randn((cup, c, 2, 2, 2), generator=generator) * (2.0 / (cup * 8)) ** 0.5
        params[f"up{i}.w"] = w.requires_grad_()
        params[f"up{i}.b"] = torch.zeros(c).requires_grad_()
        conv(f"dec{i}a", 2 * c, c, 3)
        conv(f"dec{i}b", c, c, 3)
    conv("head", channels[0], n_classes, 1)
    return params


def forward(params: dict[str, Any], x: Any, levels: int) -> Any:
    """U-Net forward pass on plain tensors."""
    functional = importlib.import_module("torch.nn.functional")
    torch = _torch()

    def conv(name: str, t: Any, pad: int = 1) -> Any:
        return functional.relu(functional.conv3d(t, params[f"{name}.w"], params[f"{name}.b"],
                                                 padding=pad))

    skips = []
    for i in range(levels):
        x = conv(f"enc{i}b", conv(f"enc{i}a", x))
        if i < levels - 1:
            skips.append(x)
            x = functional.max_pool3d(x, 2)
    for i in range(levels - 2, -1, -1):
        x = functional.conv_transpose3d(x, params[f"up{i}.w"], params[f"up{i}.b"], stride=2)
        x = torch.cat([x, skips[i]], dim=1)
        x = conv(f"dec{i}b", conv(f"dec{i}a", x))
    return functional.conv3d(x, params["head.w"], params["head.b"])


def export_onnx(params: dict[str, Any], levels: int,
                metadata: dict[str, str] | None = None) -> bytes:
    """The ONNX model (opset 17, dynamic N and spatial axes) computing :func:`forward`, with
    ``metadata`` as its ``metadata_props`` (e.g. the declared post-processing)."""
    onnx = importlib.import_module("onnx")
    helper, tp = onnx.helper, onnx.TensorProto
    inits = [onnx.numpy_helper.from_array(v.detach().cpu().numpy().astype(np.float32), k)
             for k, v in sorted(params.items())]
    nodes: list[Any] = []

    def conv(name: str, src: str, pad: int = 1, relu: bool = True) -> str:
        k = 3 if pad else 1
        out = f"{name}.conv"
        nodes.append(helper.make_node("Conv", [src, f"{name}.w", f"{name}.b"], [out],
                                      kernel_shape=[k] * 3, pads=[pad] * 6, name=name))
        if not relu:
            return out
        nodes.append(helper.make_node("Relu", [out], [f"{name}.relu"]))
        return f"{name}.relu"

    x, skips = "input", []
    for i in range(levels):
        x = conv(f"enc{i}b", conv(f"enc{i}a", x))
        if i < levels - 1:
            skips.append(x)
            nodes.append(helper.make_node("MaxPool", [x], [f"pool{i}"], kernel_shape=[2] * 3,
                                          strides=[2] * 3))
            x = f"pool{i}"
    for i in range(levels - 2, -1, -1):
        nodes.append(helper.make_node("ConvTranspose", [x, f"up{i}.w", f"up{i}.b"], [f"up{i}"],
                                      kernel_shape=[2] * 3, strides=[2] * 3))
        nodes.append(helper.make_node("Concat", [f"up{i}", skips[i]], [f"cat{i}"], axis=1))
        x = conv(f"dec{i}b", conv(f"dec{i}a", f"cat{i}"))
    head = conv("head", x, pad=0, relu=False)
    nodes.append(helper.make_node("Identity", [head], ["logits"]))
    dims = ["N", 4, "D", "H", "W"]
    graph = helper.make_graph(
        nodes, "brats_unet",
        [helper.make_tensor_value_info("input", tp.FLOAT, dims)],
        [helper.make_tensor_value_info("logits", tp.FLOAT,
                                       ["N", int(params["head.b"].shape[0]), "D", "H", "W"])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="sealbench.benchmarks.brats.train")
    model.ir_version = 8
    helper.set_model_props(model, dict(metadata or {}))
    onnx.checker.check_model(model, full_check=True)
    data: bytes = model.SerializeToString()
    return data


def check_parity(model_bytes: bytes, channels: Sequence[int], rtol: float = 1e-5) -> float:
    """Largest |ONNX Runtime - torch| logit difference on a random 32^3 input, relative to the
    largest |logit|, with the torch network built from the ONNX file's own initialisers; raises
    ``AssertionError`` over ``rtol``."""
    torch = _torch()
    onnx = importlib.import_module("onnx")
    ort = importlib.import_module("onnxruntime")
    model = onnx.load_from_string(model_bytes)
    params = {t.name: torch.from_numpy(onnx.numpy_helper.to_array(t).copy())
              for t in model.graph.initializer}
    x = np.random.default_rng(0).standard_normal((1, 4, 32, 32, 32)).astype(np.float32)
    with torch.no_grad():
        expected = forward(params, torch.from_numpy(x), len(channels)).numpy()
    session = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    (actual,) = session.run(None, {"input": x})
    diff = float(np.abs(np.asarray(actual) - expected).max()) / max(1.0, float(
        np.abs(expected).max()))
    if diff > rtol:
        raise AssertionError(f"ONNX Runtime and torch differ by {diff} (relative) > {rtol}")
    return diff


def params_from_onnx(model_bytes: bytes, channels: Sequence[int],
                     n_classes: int | None = None, seed: int = 0) -> dict[str, Any]:
    """Trainable parameters read from an ONNX file this module exported (to fine-tune it);
    ``ValueError`` when its initialisers are not those of a U-Net with ``channels``.

    With ``n_classes`` one more than the file's (a 4-class BraTS 2023 model fine-tuned for a
    2025 task, which adds RC), the head gains one output row, Kaiming-initialised from
    ``seed``, its bias at the background's minus 4 so that the new class starts rare; every
    other weight is the file's."""
    torch = _torch()
    onnx = importlib.import_module("onnx")
    found = {t.name: onnx.numpy_helper.to_array(t)
             for t in onnx.load_from_string(model_bytes).graph.initializer}
    classes = int(found["head.b"].shape[0]) if "head.b" in found else N_CLASSES
    expected = init_params(channels, torch.Generator().manual_seed(0), classes)
    shapes = {k: tuple(v.shape) for k, v in expected.items()}
    if {k: tuple(v.shape) for k, v in found.items()} != shapes:
        raise ValueError(f"the initial model is not a U-Net with channels {tuple(channels)}")
    if n_classes is not None and n_classes not in (classes, classes + 1):
        raise ValueError(f"the initial model has {classes} classes; it can start a model of "
                         f"{classes} or {classes + 1}, not {n_classes}")
    if n_classes == classes + 1:
        fresh = init_params(channels, torch.Generator().manual_seed(seed), n_classes)
        found["head.w"] = np.concatenate(
            [found["head.w"], fresh["head.w"].detach().numpy()[-1:]], axis=0)
        found["head.b"] = np.concatenate([found["head.b"], found["head.b"][:1] - 4.0])
    return {k: torch.from_numpy(found[k].astype(np.float32).copy()).requires_grad_()
            for k in expected}


def _load_cases(cfg: TrainConfig) -> list[TrainingCase]:
    generate: Any = generate_case
    if cfg.synthetic == "anatomy":
        from .anatomy import generate_anatomy_case as generate
    elif cfg.synthetic in TASKS_2025:
        from .contract import BRATS_2025_GLI, BRATS_2025_MET
        from .tasks2025 import generate_task_case

        contract = BRATS_2025_GLI if cfg.synthetic == "post-treatment" else BRATS_2025_MET
        grid = cfg.grid or contract.shape

        def generate(case_seed: int, foci: int | None = None) -> Any:
            return generate_task_case(cfg.synthetic, case_seed, grid,  # type: ignore[arg-type]
                                      contract.model_copy(update={"shape": grid}), foci=foci,
                                      anatomy="geometric")
    base = 100_000 + cfg.seed * 1000
    wanted: list[tuple[int, int | None]] = [(base + i, None) for i in range(cfg.n_cases)]
    wanted += [(base + TUMOUR_FREE_OFFSET + j, 0) for j in range(cfg.tumour_free)]
    cases: list[TrainingCase] = []
    for case_seed, foci in wanted:
        case = (generate(case_seed, foci=foci) if cfg.grid is None or cfg.synthetic in TASKS_2025
                else generate(case_seed, cfg.grid, foci=foci))
        image = normalise_modalities(case.modalities)
        mask = image.any(axis=0)
        idx = np.argwhere(mask)
        lo, hi = idx.min(0), idx.max(0) + 1
        sl = tuple(slice(int(a), int(b)) for a, b in zip(lo, hi, strict=True))
        zero: npt.NDArray[np.float32] = np.zeros(len(image), dtype=np.float32)
        for channel, raw in enumerate(case.modalities.values()):
            values = np.asarray(raw, dtype=np.float32)[mask]
            zero[channel] = -values.mean(dtype=np.float64) / max(
                float(values.std(dtype=np.float64)), 1e-8)
        cases.append((image[(slice(None), *sl)].astype(np.float16), case.classes[sl].copy(),
                      zero))
    return cases


def _window(array: npt.NDArray[Any], lo: npt.NDArray[np.int64], size: int) -> npt.NDArray[Any]:
    """``array[..., lo:lo+size]`` on its last three axes, zero where that lies outside it."""
    shape = np.array(array.shape[-3:])
    out = np.zeros((*array.shape[:-3], size, size, size), dtype=array.dtype)
    src_lo, src_hi = np.maximum(lo, 0), np.minimum(lo + size, shape)
    if (src_hi > src_lo).all():
        src: tuple[Any, ...] = (..., *(slice(int(a), int(b))
                                       for a, b in zip(src_lo, src_hi, strict=True)))
        dst: tuple[Any, ...] = (..., *(slice(int(a - o), int(b - o))
                                       for a, b, o in zip(src_lo, src_hi, lo, strict=True)))
        out[dst] = array[src]
    return out


def _thick_sliced(image: npt.NDArray[np.float16], zero: npt.NDArray[np.float32],
                  lo: npt.NDArray[np.int64], crop: int,
                  rng: np.random.Generator) -> npt.NDArray[np.float32]:
    """The crop at ``lo`` with each modality acquired through its own random thick-slice
    stack and resampled back, zero outside the brain (as a prepared case is)."""
    window = _window(image, lo - MARGIN, crop + 2 * MARGIN).astype(np.float32)
    brain: npt.NDArray[np.bool_] = np.any(window, axis=0)
    inner = brain[MARGIN:-MARGIN, MARGIN:-MARGIN, MARGIN:-MARGIN]
    out = np.zeros((len(window), crop, crop, crop), dtype=np.float32)
    for channel, values in enumerate(window):
        values[~brain] = zero[channel]
        back = acquire_and_back(values, draw_acquisition(rng), float(zero[channel]))
        out[channel][inner] = back[inner]
    return out


def _sample(cases: list[TrainingCase], crop: int, rng: np.random.Generator,
            thick_slices: float = 0.0,
            ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    image, classes, zero = cases[int(rng.integers(len(cases)))]
    shape = np.array(classes.shape)
    padded = np.maximum(shape, crop)
    if (padded > shape).any():
        pad = [(0, int(p - s)) for p, s in zip(padded, shape, strict=True)]
        image = np.pad(image, [(0, 0), *pad])
        classes = np.pad(classes, pad)
    tumour = np.argwhere(classes[::2, ::2, ::2] > 0) * 2
    if tumour.size and rng.uniform() < 0.7:
        centre = tumour[int(rng.integers(len(tumour)))] + rng.integers(-crop // 4, crop // 4, 3)
    else:
        centre = rng.integers(0, padded)
    lo = np.clip(centre - crop // 2, 0, padded - crop)
    sl = tuple(slice(int(a), int(a) + crop) for a in lo)
    # No draw without the augmentation, so a run without it samples as before it existed.
    if thick_slices and rng.uniform() < thick_slices:
        return _thick_sliced(image, zero, lo, crop, rng), classes[sl].astype(np.int64)
    return image[(slice(None), *sl)].astype(np.float32), classes[sl].astype(np.int64)


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".partial")
    tmp.write_bytes(data)
    tmp.replace(path)


def train(cfg: TrainConfig, snapshot_dir: Path | None = None, snapshot_every: int = 0,
          metadata: dict[str, str] | None = None) -> bytes:
    """Train a U-Net per ``cfg`` and return its ONNX bytes (with ``metadata``); optionally also
    write the ONNX after every ``snapshot_every`` steps to ``snapshot_dir/step-<n>.onnx``. With
    ``cfg.init`` and no steps, this re-exports the initial model with ``metadata``."""
    torch = _torch()
    functional = importlib.import_module("torch.nn.functional")
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads)
    torch.use_deterministic_algorithms(True)
    start = time.monotonic()
    levels = len(cfg.channels)
    params = (init_params(cfg.channels, torch.Generator().manual_seed(cfg.seed), cfg.n_classes)
              if cfg.init is None else params_from_onnx(cfg.init, cfg.channels, cfg.n_classes,
                                                        cfg.seed))
    if cfg.steps == 0:
        return export_onnx(params, levels, metadata)
    cases = _load_cases(cfg)
    logger.info("generated %d %s training cases in %.0f s", len(cases), cfg.synthetic,
                time.monotonic() - start)
    optimiser = torch.optim.Adam(list(params.values()), lr=cfg.lr)
    # Linear warm-up, then constant: the schedule does not depend on cfg.steps, so the snapshot
    # after step n of a long run equals the result of a run with --steps n.
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda step: min(1.0, (step + 1) / WARMUP_STEPS))
    rng = np.random.default_rng(cfg.seed)
    for step in range(cfg.steps):
        batch = [_sample(cases, cfg.crop, rng, cfg.thick_slices) for _ in range(cfg.batch)]
        x = torch.from_numpy(np.stack([b[0] for b in batch]))
        y = torch.from_numpy(np.stack([b[1] for b in batch]))
        logits = forward(params, x, levels)
        ce = functional.cross_entropy(logits, y)
        prob = torch.softmax(logits, dim=1)[:, 1:]
        onehot = functional.one_hot(y, cfg.n_classes).permute(0, 4, 1, 2, 3)[:, 1:].float()
        # Soft Dice on the tumour regions as the metric scores them: WT (NETC + SNFH + ET), TC
        # (NETC + ET), ET, and RC when the cases have a resection cavity.
        def regions(p: Any) -> Any:
            parts = [p[:, :3].sum(1), p[:, 0] + p[:, 2], p[:, 2]]
            return torch.stack([*parts, p[:, 3]] if p.shape[1] > 3 else parts, 1)

        regions_p, regions_t = regions(prob), regions(onehot)
        inter = (regions_p * regions_t).sum((0, 2, 3, 4))
        denom = regions_p.sum((0, 2, 3, 4)) + regions_t.sum((0, 2, 3, 4))
        dice = (2 * inter + 1.0) / (denom + 1.0)
        loss = ce + (1 - dice).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        schedule.step()
        if snapshot_dir is not None and snapshot_every and (step + 1) % snapshot_every == 0:
            _write(snapshot_dir / f"step-{step + 1}.onnx", export_onnx(params, levels, metadata))
        if step % 20 == 0 or step == cfg.steps - 1:
            logger.info("step %d/%d loss %.4f ce %.4f dice %s (%.0f s)", step, cfg.steps,
                        loss.item(), ce.item(), [round(d, 3) for d in dice.tolist()],
                        time.monotonic() - start)
    return export_onnx(params, levels, metadata)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: train, export, print the SHA-256 of the ONNX file."""
    parser = argparse.ArgumentParser(prog="python -m sealbench.benchmarks.brats.train",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--channels", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--steps", type=int, default=300,
                        help="optimiser steps (0 with --init: re-export it, e.g. to declare "
                             "--postprocess)")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--crop", type=int, default=64)
    parser.add_argument("--cases", type=int, default=8)
    parser.add_argument("--tumour-free", type=int, default=0, metavar="N",
                        help="also train on N tumour-free cases (the generators make about 5 %% "
                             "of cases without tumour; more teaches the model healthy anatomy)")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--synthetic", choices=SYNTHETIC, default="cartoon",
                        help="training cases: the cartoon generator, the MNI-anatomy one, or a "
                             "2025 task's (post-treatment, metastases: a 5-class model)")
    parser.add_argument("--grid", type=int, nargs=3, default=None, metavar=("X", "Y", "Z"),
                        help="generate the training cases on this grid (e.g. 64 64 48, the "
                             "small benchmarks'), not the full BraTS one")
    parser.add_argument("--init", type=Path, default=None,
                        help="start from this ONNX U-Net (one this module exported) instead of "
                             "random weights: fine-tuning; a 4-class (2023) model can start a "
                             "2025 task's 5-class one (the head gains an RC row)")
    parser.add_argument("--thick-slices", type=float, default=0.0, metavar="P",
                        help="acquire each crop's sequences through random thick-slice, oblique "
                             "stacks and back with probability P (a model for clinical "
                             "protocols' thick slices; thick_slices.py)")
    parser.add_argument("--postprocess", default=None, metavar="JSON",
                        help="declare this post-processing in the model's metadata, e.g. "
                             '\'{"min_component_mm3": 50, "et_min_mm3": 100}\' (the '
                             "'postprocess' object 'python -m sealbench.benchmarks.brats."
                             "evaluate --tune' prints)")
    parser.add_argument("--snapshot-dir", type=Path, default=None)
    parser.add_argument("--snapshot-every", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.steps < 0 or (args.steps == 0 and args.init is None):
        parser.error("--steps must be positive (or 0 with --init)")
    metadata = None
    if args.postprocess is not None:
        from .postprocess import PostProcess

        try:
            metadata = PostProcess.model_validate_json(args.postprocess).to_metadata()
        except ValueError as exc:
            parser.error(f"--postprocess is not a valid post-processing: {exc}")
    try:
        cfg = TrainConfig(seed=args.seed, channels=args.channels, steps=args.steps,
                          batch=args.batch, crop=args.crop, n_cases=args.cases, lr=args.lr,
                          threads=args.threads, synthetic=args.synthetic,
                          tumour_free=args.tumour_free, thick_slices=args.thick_slices,
                          grid=None if args.grid is None else tuple(args.grid),
                          init=None if args.init is None else args.init.read_bytes())
    except ValueError as exc:  # the configuration's own range checks, as a usage error
        parser.error(str(exc))
    if args.snapshot_dir is not None:
        args.snapshot_dir.mkdir(parents=True, exist_ok=True)
    data = train(cfg, args.snapshot_dir, args.snapshot_every, metadata)
    logger.info("ONNX Runtime vs torch, max relative |diff| %.2e",
                check_parity(data, cfg.channels))
    _write(args.out, data)
    from sealbench.crypto.digest import sha256_digest

    logger.info("wrote %s (%d bytes) %s", args.out, len(data), sha256_digest(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
