"""Standard BraTS post-processing, declared by the model and applied by the segmenter.

Four steps, in this order, on the arg-max class indices (0 background, 1 NETC, 2 SNFH, 3 ET);
components are 26-connected, as the lesion-wise metrics count them:

1. **Small whole-tumour components** smaller than ``min_component_mm3`` become background
   (lesion-wise false positives that barely move the legacy Dice).
2. **Small enhancing components** (ET) smaller than ``min_enhancing_mm3`` become NETC.
3. **Small tumour-core components** (NETC + ET) smaller than ``min_core_mm3`` become SNFH:
   stray core specks inside the oedema are each a lesion-wise TC false positive, while the
   whole tumour keeps its extent.
4. **ET -> NETC relabelling**: when the case's total enhancing tumour is smaller than
   ``et_min_mm3``, it is relabelled as non-enhancing core (BraTS scores an empty ET prediction
   on a case without ET as perfect, a few stray ET voxels as 0).

The model declares its post-processing in its ONNX metadata under :data:`METADATA_KEY`, as JSON
``{"min_component_mm3": 100, "et_min_mm3": 50, "min_core_mm3": 50, "min_enhancing_mm3": 20}``
(strictly validated: only these keys, integers in ``0..MAX_MM3``, at most 256 bytes; the last
two may be left out and then are 0, so declarations written before they existed keep their
meaning); a model that declares nothing gets :data:`DEFAULT_POSTPROCESS`; all zeros turn it off.
Volumes are in mm³ and converted with the contract's voxel spacing. :func:`tune` picks the
thresholds on a validation split by mean lesion-wise Dice.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from scipy import ndimage  # type: ignore[import-untyped]

from .errors import ModelContractError

__all__ = ["DEFAULT_POSTPROCESS", "MAX_MM3", "METADATA_KEY", "PostProcess", "declared",
           "relabel_small_components", "remove_small_components", "tune"]

METADATA_KEY = "sealbench.brats.postprocess"
MAX_MM3 = 1_000_000
_MAX_JSON = 256


class PostProcess(BaseModel):
    """Thresholds of the two post-processing steps (0 turns a step off)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    min_component_mm3: int = Field(ge=0, le=MAX_MM3)
    et_min_mm3: int = Field(ge=0, le=MAX_MM3)
    min_core_mm3: int = Field(default=0, ge=0, le=MAX_MM3)
    min_enhancing_mm3: int = Field(default=0, ge=0, le=MAX_MM3)

    def to_metadata(self) -> dict[str, str]:
        """The ONNX ``metadata_props`` entry that declares this post-processing."""
        return {METADATA_KEY: json.dumps(self.model_dump(), separators=(",", ":"),
                                         sort_keys=True)}

    def apply(self, classes: npt.NDArray[np.uint8],
              spacing_mm: tuple[float, float, float]) -> npt.NDArray[np.uint8]:
        """Post-process ``classes`` in place (and return it)."""
        voxel = float(np.prod(spacing_mm))

        def voxels(mm3: int) -> int:
            return int(np.ceil(mm3 / voxel))

        remove_small_components(classes, voxels(self.min_component_mm3))
        relabel_small_components(classes, classes == 3, voxels(self.min_enhancing_mm3), 1)
        relabel_small_components(classes, (classes == 1) | (classes == 3),
                                 voxels(self.min_core_mm3), 2)
        et = classes == 3
        if self.et_min_mm3 and 0 < int(et.sum()) * voxel < self.et_min_mm3:
            classes[et] = 1
        return classes


#: Applied to models that declare nothing: what ``evaluate --tune`` chose (two steps only) for
#: the cartoon-trained reference on 6 anatomy-based validation cases (seeds 800000-800005);
#: the shipped reference now declares its own (docs/benchmarks.md section 11).
DEFAULT_POSTPROCESS = PostProcess(min_component_mm3=25, et_min_mm3=100)


def declared(metadata: Mapping[str, str]) -> PostProcess:
    """The post-processing a model's ONNX metadata declares (the default when it declares
    none); a malformed declaration is a :class:`ModelContractError`."""
    text = metadata.get(METADATA_KEY)
    if text is None:
        return DEFAULT_POSTPROCESS
    if len(text) > _MAX_JSON:
        raise ModelContractError((f"{METADATA_KEY} metadata is {len(text)} characters, "
                                  f"over {_MAX_JSON}",))
    try:
        return PostProcess.model_validate(json.loads(text))
    except (ValueError, ValidationError) as exc:
        raise ModelContractError((f"{METADATA_KEY} metadata is not "
                                  '{"min_component_mm3": int, "et_min_mm3": int[, '
                                  '"min_core_mm3": int, "min_enhancing_mm3": int]} with values '
                                  f"in 0..{MAX_MM3}",)) from exc


def relabel_small_components(classes: npt.NDArray[np.uint8], region: npt.NDArray[np.bool_],
                             min_voxels: int, to: int) -> npt.NDArray[np.uint8]:
    """Set the components (26-connectivity) of ``region`` with fewer than ``min_voxels``
    voxels to class ``to`` (in place; returns ``classes``)."""
    if min_voxels <= 1:
        return classes
    components, n = ndimage.label(region, structure=np.ones((3, 3, 3), dtype=bool))
    if n == 0:
        return classes
    small = np.bincount(components.ravel(), minlength=n + 1) < min_voxels
    small[0] = False
    classes[small[components]] = to
    return classes


def remove_small_components(classes: npt.NDArray[np.uint8],
                            min_voxels: int) -> npt.NDArray[np.uint8]:
    """Set tumour components (26-connectivity) of fewer than ``min_voxels`` voxels to
    background (in place; returns ``classes``)."""
    return relabel_small_components(classes, classes > 0, min_voxels, 0)


def tune(predictions: Sequence[npt.NDArray[np.uint8]], truths: Sequence[npt.NDArray[np.uint8]],
         spacing_mm: tuple[float, float, float], *,
         component_grid: Sequence[int] = (0, 25, 50, 100, 200, 400, 800, 1600),
         enhancing_grid: Sequence[int] = (0, 10, 25, 50, 100, 200),
         core_grid: Sequence[int] = (0, 25, 50, 100, 200, 400, 800, 1600),
         et_grid: Sequence[int] = (0, 25, 50, 100, 200, 400, 800)) -> tuple[PostProcess,
                                                                          float]:
    """The thresholds maximising the mean lesion-wise Dice over WT, TC and ET on a validation
    split (class-index predictions and truths); ties go to the smaller threshold. Returns the
    choice and its score. One threshold at a time, in the order the steps run, each scored on
    the regions it changes: the whole-tumour components on WT and TC, then the enhancing
    components on ET and TC, the core components on TC, the total ET on ET and TC (a later step
    never changes the regions an earlier one was chosen on, except through its own)."""
    from .metrics import BRATS_2023_GLI_METRICS, score_case

    label_map = BRATS_2023_GLI_METRICS.label_map
    labelled = [label_map.from_class_indices(t) for t in truths]
    if len(predictions) != len(truths) or not predictions:
        raise ValueError("tune needs as many predictions as truths, at least one")

    def score(post: PostProcess, regions: tuple[str, ...]) -> float:
        values: list[float] = []
        for prediction, truth in zip(predictions, labelled, strict=True):
            cleaned = label_map.from_class_indices(post.apply(prediction.copy(), spacing_mm))
            scores = score_case(cleaned, truth, BRATS_2023_GLI_METRICS, spacing_mm)
            values.extend(scores.regions[r].lesion_dice for r in regions)  # type: ignore[index]
        return float(np.mean(values))

    chosen = PostProcess(min_component_mm3=0, et_min_mm3=0)
    for field, grid, regions in (("min_component_mm3", component_grid, ("WT", "TC")),
                                 ("min_enhancing_mm3", enhancing_grid, ("ET", "TC")),
                                 ("min_core_mm3", core_grid, ("TC",)),
                                 ("et_min_mm3", et_grid, ("ET", "TC"))):
        base = chosen

        def scored(value: int, base: PostProcess = base, field: str = field,
                   regions: tuple[str, ...] = regions) -> tuple[float, int]:
            return score(base.model_copy(update={field: value}), regions), -value

        chosen = base.model_copy(update={field: max(grid, key=scored)})
    return chosen, score(chosen, ("WT", "TC", "ET"))
