"""Standard BraTS post-processing, declared by the model and applied by the segmenter.

Two steps, in this order, on the arg-max class indices (0 background, 1 NETC, 2 SNFH, 3 ET):

1. **Small-component removal**: whole-tumour components (26-connectivity) smaller than
   ``min_component_mm3`` become background (they are lesion-wise false positives that barely
   move the legacy Dice).
2. **ET -> NETC relabelling**: when the case's total enhancing tumour is smaller than
   ``et_min_mm3``, it is relabelled as non-enhancing core (BraTS scores an empty ET prediction
   on a case without ET as perfect, a few stray ET voxels as 0).

The model declares its post-processing in its ONNX metadata under :data:`METADATA_KEY`, as JSON
``{"min_component_mm3": 100, "et_min_mm3": 50}`` (strictly validated: only these keys,
integers in ``0..MAX_MM3``, at most 256 bytes); a model that declares nothing gets
:data:`DEFAULT_POSTPROCESS`; ``{"min_component_mm3": 0, "et_min_mm3": 0}`` turns it off.
Volumes are in mm³ and converted with the contract's voxel spacing. :func:`tune` picks both
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
           "remove_small_components", "tune"]

METADATA_KEY = "sealbench.brats.postprocess"
MAX_MM3 = 1_000_000
_MAX_JSON = 256


class PostProcess(BaseModel):
    """Thresholds of the two post-processing steps (0 turns a step off)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    min_component_mm3: int = Field(ge=0, le=MAX_MM3)
    et_min_mm3: int = Field(ge=0, le=MAX_MM3)

    def to_metadata(self) -> dict[str, str]:
        """The ONNX ``metadata_props`` entry that declares this post-processing."""
        return {METADATA_KEY: json.dumps(self.model_dump(), separators=(",", ":"),
                                         sort_keys=True)}

    def apply(self, classes: npt.NDArray[np.uint8],
              spacing_mm: tuple[float, float, float]) -> npt.NDArray[np.uint8]:
        """Post-process ``classes`` in place (and return it)."""
        voxel = float(np.prod(spacing_mm))
        remove_small_components(classes, int(np.ceil(self.min_component_mm3 / voxel)))
        et = classes == 3
        if self.et_min_mm3 and 0 < int(et.sum()) * voxel < self.et_min_mm3:
            classes[et] = 1
        return classes


#: Applied to models that declare nothing: tuned for the shipped reference on 6 anatomy-based
#: validation cases (seeds 800000-800005; ``evaluate --tune``; docs/benchmarks.md section 11).
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
                                  '{"min_component_mm3": int, "et_min_mm3": int} with values '
                                  f"in 0..{MAX_MM3}",)) from exc


def remove_small_components(classes: npt.NDArray[np.uint8],
                            min_voxels: int) -> npt.NDArray[np.uint8]:
    """Set tumour components (26-connectivity) of fewer than ``min_voxels`` voxels to
    background (in place; returns ``classes``)."""
    if min_voxels <= 1:
        return classes
    components, n = ndimage.label(classes > 0, structure=np.ones((3, 3, 3), dtype=bool))
    if n == 0:
        return classes
    small = np.bincount(components.ravel(), minlength=n + 1) < min_voxels
    small[0] = False
    classes[small[components]] = 0
    return classes


def tune(predictions: Sequence[npt.NDArray[np.uint8]], truths: Sequence[npt.NDArray[np.uint8]],
         spacing_mm: tuple[float, float, float], *,
         component_grid: Sequence[int] = (0, 25, 50, 100, 200, 400, 800, 1600),
         et_grid: Sequence[int] = (0, 25, 50, 100, 200, 400, 800)) -> tuple[PostProcess,
                                                                          float]:
    """The thresholds maximising the mean lesion-wise Dice over WT, TC and ET on a validation
    split (class-index predictions and truths); ties go to the smaller threshold. Returns the
    choice and its score. The component threshold is chosen first (on WT and TC), then the ET
    one (on ET), since the second step does not change the whole tumour."""
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

    best_cc = max(component_grid, key=lambda v: (score(PostProcess(min_component_mm3=v,
                                                                   et_min_mm3=0),
                                                       ("WT", "TC")), -v))
    best_et = max(et_grid, key=lambda v: (score(PostProcess(min_component_mm3=best_cc,
                                                            et_min_mm3=v), ("ET",)), -v))
    chosen = PostProcess(min_component_mm3=best_cc, et_min_mm3=best_et)
    return chosen, score(chosen, ("WT", "TC", "ET"))
