"""The shipped BraTS benchmark definition: what an authority publishes to the registry.

A :class:`BenchmarkDefinition` (wire format ``sealbench/benchmark-definition`` version 1,
canonical JSON) names the benchmark and binds its data contract, its metrics spec (with id and
version) and its reference models by SHA-256. The evaluation image fields stay empty until the
image build fills them (:meth:`BenchmarkDefinition.with_image`). The ONNX files ship inside this
package (``model/*.onnx``); :func:`load_model_bytes` returns a model's bytes only after checking
them against the recorded digest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from importlib import resources
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.digest import Sha256Digest, parse_digest, sha256_digest

from .contract import (
    BRATS_2023_GLI,
    BRATS_2023_GLI_SMALL,
    BRATS_2025_GLI,
    BRATS_2025_MET,
    BratsContract,
)
from .errors import ModelDigestMismatchError
from .metrics import BRATS_2023_GLI_METRICS, MetricsSpec
from .results2025 import Metrics2025
from .scoring2025 import GLI_2025, MET_2025

__all__ = [
    "GLI_2025_REFERENCE_MODEL",
    "GLI_2025_WEAK_MODEL",
    "MET_2025_REFERENCE_MODEL",
    "MET_2025_WEAK_MODEL",
    "REFERENCE_MODEL",
    "SHIPPED_2025_DEFINITIONS",
    "SHIPPED_DEFINITIONS",
    "SMALL_REFERENCE_MODEL",
    "SMALL_WEAK_MODEL",
    "WEAK_MODEL",
    "BenchmarkDefinition",
    "ModelReference",
    "load_2025_definition",
    "load_definition",
    "load_model_bytes",
    "load_small_definition",
    "shipped_definition",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")

REFERENCE_MODEL = "brats_unet"
WEAK_MODEL = "brats_unet_weak"
#: The small benchmark's models: registered, associated and ranked under their own names.
SMALL_REFERENCE_MODEL = "brats_small_unet"
SMALL_WEAK_MODEL = "brats_small_unet_weak"
#: The 2025 pins' models (five classes: RC added), one pair per task.
GLI_2025_REFERENCE_MODEL = "brats25_gli_unet"
GLI_2025_WEAK_MODEL = "brats25_gli_unet_weak"
MET_2025_REFERENCE_MODEL = "brats25_met_unet"
MET_2025_WEAK_MODEL = "brats25_met_unet_weak"

# SHA-256 of the shipped ONNX files, recorded when they were trained (docs/benchmarks.md).
_DIGESTS = {
    REFERENCE_MODEL: "sha256:dce059dcb0014b0d8a7414daff63154a391dd5dffae51c394abbcfb4a5b83f69",
    WEAK_MODEL: "sha256:18bc56267d59fb3f191b244aee02d33a48caa60c965222804a5604f027823a2c",
    # The 600-step cartoon-trained U-Net (brats_unet before it was fine-tuned on anatomy).
    SMALL_WEAK_MODEL: "sha256:b9b7303b8c91182e37cc91741289080527a2c7c725228478ec3473c82a08002c",
    # The 2025 pins' U-Nets (docs/benchmarks.md section 16): brats_unet fine-tuned per task (gli
    # step 400, met step 300 of the same recipe) and a 60-step run from random weights.
    GLI_2025_REFERENCE_MODEL:
        "sha256:0fcafc7ce103835045c665526691e7aaaf2d602826a448a339e0cfb0be0e0d47",
    GLI_2025_WEAK_MODEL: "sha256:60a666d0493b48f70bae7e2e7d45b1e370fd099d8dbcfabb043c66bddb2bf9fd",
    MET_2025_REFERENCE_MODEL:
        "sha256:4808eef0406907fb39cf956df0deb9f3c8da47d6e346b4b10250ba3f4346bffc",
    MET_2025_WEAK_MODEL: "sha256:f12e1aa4118f133ba27ce2aecbce58f4d45aa47065a9486cd0dac03e8d28eb5e",
}


class ModelReference(BaseModel):
    """A model bound to the benchmark by name and SHA-256."""

    model_config = _FROZEN

    name: str
    file: str
    sha256: str
    description: str

    @field_validator("sha256")
    @classmethod
    def _digest(cls, value: str) -> str:
        return parse_digest(value)


class BenchmarkDefinition(BaseModel):
    """Everything a registry needs to publish the benchmark (version 1)."""

    model_config = _FROZEN

    format: Literal["sealbench/benchmark-definition"] = "sealbench/benchmark-definition"
    format_version: Literal[1] = 1
    name: str
    version: str
    description: str
    contract: BratsContract
    #: The 2023 lesion-wise metrics or a 2025 task's official ones, told apart by ``metrics_id``.
    metrics: Annotated[MetricsSpec | Metrics2025, Field(discriminator="metrics_id")]
    reference_model: ModelReference
    baseline_models: tuple[ModelReference, ...] = ()
    evaluation_image_reference: str | None = None
    evaluation_image_digest: str | None = None

    @field_validator("evaluation_image_digest")
    @classmethod
    def _image_digest(cls, value: str | None) -> str | None:
        return None if value is None else parse_digest(value)

    def with_image(self, reference: str, digest: str) -> BenchmarkDefinition:
        """The same definition bound to a built evaluation image."""
        return BenchmarkDefinition.model_validate({
            **self.model_dump(), "evaluation_image_reference": reference,
            "evaluation_image_digest": digest})

    def to_canonical_json(self) -> bytes:
        """Canonical JSON bytes (what the registry stores and hashes)."""
        return canonical_json(self.model_dump(mode="json"))

    @property
    def digest(self) -> Sha256Digest:
        """SHA-256 of the canonical JSON."""
        return sha256_digest(self.to_canonical_json())

    def model(self, name: str) -> ModelReference:
        """The reference or baseline model called ``name`` (``KeyError`` if none)."""
        for ref in (self.reference_model, *self.baseline_models):
            if ref.name == name:
                return ref
        raise KeyError(name)


def load_definition(contract: BratsContract = BRATS_2023_GLI,
                    metrics: MetricsSpec = BRATS_2023_GLI_METRICS) -> BenchmarkDefinition:
    """The shipped BraTS 2023 GLI-style benchmark on synthetic data."""
    return BenchmarkDefinition(
        name="brats-gli-synthetic",
        version="1.0.0",
        description=(
            "Brain-tumour (glioma) segmentation in the BraTS 2023 GLI format: four MRI "
            "modalities (t1n, t1c, t2w, t2f) at 1 mm on 240x240x155; labels NETC=1, SNFH=2, "
            "ET=3. Published: Dice on WT, TC and ET and its mean over the three, each run's a "
            "differentially private release. Each hospital's private per-case results add HD95 "
            "(DeepMind robust Hausdorff), sensitivity, specificity and BraTS 2023 lesion-wise "
            "Dice/HD95, which are never published."),
        contract=contract,
        metrics=metrics,
        reference_model=ModelReference(
            name=REFERENCE_MODEL, file=f"{REFERENCE_MODEL}.onnx", sha256=_DIGESTS[REFERENCE_MODEL],
            description="3D U-Net (8,16,32,64): 600 steps on 8 cartoon cases, 1200 on 20 "
                        "MNI-anatomy cases, 500 more with 8 tumour-free brains added; declares "
                        "its tuned post-processing"),
        baseline_models=(ModelReference(
            name=WEAK_MODEL, file=f"{WEAK_MODEL}.onnx", sha256=_DIGESTS[WEAK_MODEL],
            description="the cartoon run stopped after 120 steps, never fine-tuned on "
                        "anatomy (deliberately weaker)"),),
    )


def load_small_definition() -> BenchmarkDefinition:
    """The small demo benchmark: the BraTS 2023 GLI contract on a 64x64x48 grid
    (:data:`~.contract.BRATS_2023_GLI_SMALL`), with its own models and leaderboard.

    Its models are the two shipped networks under their own names, ranked by what they do on
    this grid. Both are fully convolutional (dynamic spatial axes, multiples of 8) and were
    trained on 64-voxel crops of full-size cases; on 64x64x48 a brain is about a quarter of its
    real size. There the 120-step network segments (mean Dice WT/TC/ET 0.60/0.63/0.41 on the
    held-out seeds 900000-900009) and the 600-step one, which learnt the full-size scale, does
    not (0.12/0.03/0.02), so the first is this benchmark's reference and the second its
    baseline (docs/benchmarks.md). Neither was retrained on the small grid."""
    full = load_definition(BRATS_2023_GLI_SMALL)
    weak, = full.baseline_models
    return BenchmarkDefinition(
        name="brats-gli-synthetic-small",
        version="1.0.0",
        description=(
            "Small demo benchmark: the BraTS 2023 GLI contract (t1n, t1c, t2w, t2f; NETC=1, "
            "SNFH=2, ET=3; published: Dice on WT/TC/ET, as brats-gli-synthetic) on a 64x64x48 "
            "grid at 1 mm, for quick tries of the workflow. Cases on any other grid are "
            "refused; its results are never mixed with brats-gli-synthetic's."),
        contract=full.contract,
        metrics=full.metrics,
        reference_model=weak.model_copy(update={
            "name": SMALL_REFERENCE_MODEL,
            "description": "the 120-step U-Net (brats_unet_weak's weights, trained on 64^3 "
                           "crops of 240x240x155 cases): it segments quarter-size brains"}),
        baseline_models=(ModelReference(
            name=SMALL_WEAK_MODEL, file=f"{SMALL_WEAK_MODEL}.onnx",
            sha256=_DIGESTS[SMALL_WEAK_MODEL],
            description="the 600-step U-Net trained on 64^3 crops of full-size cartoon cases: "
                        "tuned to full-size brains, it misses most tumours on this grid"),),
    )


_TASKS_2025: dict[str, tuple[str, BratsContract, Metrics2025, str, str, str]] = {
    "gli": ("brats-2025-gli-synthetic", BRATS_2025_GLI, Metrics2025.of(GLI_2025),
            GLI_2025_REFERENCE_MODEL, GLI_2025_WEAK_MODEL,
            "Adult glioma, pre- and post-treatment, in the BraTS 2025 format: labels NETC=1, "
            "SNFH=2, ET=3, RC=4 (resection cavity); scored on NETC, SNFH, ET, RC, TC and WT as "
            "the official BraTS_evaluation 0.0.10 config_gli scores it"),
    "met": ("brats-2025-met-synthetic", BRATS_2025_MET, Metrics2025.of(MET_2025),
            MET_2025_REFERENCE_MODEL, MET_2025_WEAK_MODEL,
            "Brain metastases in the BraTS 2025 format: labels NETC=1, SNFH=2, ET=3, RC=4; "
            "scored on ET, RC, TC and WT as the official BraTS_evaluation 0.0.10 config_mets "
            "scores it"),
}


def load_2025_definition(task: Literal["gli", "met"]) -> BenchmarkDefinition:
    """A shipped BraTS 2025 benchmark on synthetic data: ``gli`` (post-treatment glioma, pin
    ``brats-2025-gli/1``) or ``met`` (metastases, ``brats-2025-met/1``), each with its reference
    U-Net (the 2023 reference fine-tuned on the task's cases, its head widened to RC) and a
    weak baseline (docs/benchmarks.md section 16)."""
    name, contract, metrics, reference, weak, text = _TASKS_2025[task]
    return BenchmarkDefinition(
        name=name,
        version="1.0.0",
        description=(f"{text}: four MRI modalities (t1n, t1c, t2w, t2f) at 1 mm on "
                     "240x240x155. Published: global Dice and panoptic quality per group, "
                     "each the mean over the cases where the group is defined (as the official "
                     "parser averages), with the count of those cases; each run's a "
                     "differentially private release. Each hospital's private per-case "
                     "results add lesion-wise Dice, NSD and HD95 after maximum bipartite "
                     "matching and detection F1, which are never published."),
        contract=contract,
        metrics=metrics,
        reference_model=ModelReference(
            name=reference, file=f"{reference}.onnx", sha256=_DIGESTS[reference],
            description=f"3D U-Net (8,16,32,64), five classes: brats_unet fine-tuned (head "
                        f"widened to RC) on 16 synthetic {task} cases and 4 tumour-free ones, "
                        f"the snapshot best on a validation split"),
        baseline_models=(ModelReference(
            name=weak, file=f"{weak}.onnx", sha256=_DIGESTS[weak],
            description=f"the same network trained from random weights for 60 steps on 4 of the "
                        f"same {task} cases (deliberately weaker)"),),
    )


#: Definitions shipped with sealbench, by the name ``benchmark create --definition`` takes:
#: the BraTS 2023 pin's (``brats-2023-gli``) ...
SHIPPED_DEFINITIONS: dict[str, Callable[[], BenchmarkDefinition]] = {
    "brats": load_definition,
    "brats-small": load_small_definition,
}
#: ... and the 2025 pins' (``brats-2025-gli``, ``brats-2025-met``), each shipped by its plug-in.
SHIPPED_2025_DEFINITIONS: dict[str, Callable[[], BenchmarkDefinition]] = {
    "brats-2025-gli": lambda: load_2025_definition("gli"),
    "brats-2025-met": lambda: load_2025_definition("met"),
}


def shipped_definition(name: str) -> BenchmarkDefinition:
    """The shipped definition called ``name`` (``KeyError`` if none)."""
    return {**SHIPPED_DEFINITIONS, **SHIPPED_2025_DEFINITIONS}[name]()


def load_model_bytes(ref: ModelReference) -> bytes:
    """Bytes of a shipped model, checked against ``ref.sha256``."""
    data = (resources.files("sealbench.benchmarks.brats") / "model" / ref.file).read_bytes()
    actual = "sha256:" + hashlib.sha256(data).hexdigest()
    if actual != ref.sha256:
        raise ModelDigestMismatchError(f"shipped model {ref.file} has {actual}, the definition "
                                       f"records {ref.sha256}")
    return data
