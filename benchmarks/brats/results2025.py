"""The per-case results and the release of the BraTS 2025 pins (``brats-2025-gli/1``,
``brats-2025-met/1``).

A case's result (:class:`CaseScores2025`, kind ``scores-2025``) holds, per group, the official
evaluator's dictionary as typed fields (:class:`GroupScores2025`): what
:func:`.scoring2025.score_case` returns, so a hospital's sealed per-case results compare key by
key with ``BraTS_evaluation``'s. Non-finite values (NaN when neither side has an instance, inf
for HD95 when nothing is matched) travel as the JSON strings ``"NaN"`` and ``"Infinity"``
(canonical JSON has no NaN). A failed case is the 2023 pins' :class:`~.metrics.CaseFailure`.

The release (:func:`release_spec`, part of the pin) carries per group the sum over cases of the
global Dice (``global_bin_dsc``) and of the panoptic quality (``pq_dsc`` = mean matched-instance
Dice x F1 of detection), each clipped to [0, 1]; a failed case enters with 0 and a group with
nothing in truth or prediction (official value NaN) with 1, the BraTS convention for "nothing
to find, nothing found" (the official parser's NaN-skipping mean would need the per-case count
of such groups to leave the enclave).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from sealbench.benchmarks import release as rel

from .metrics import CaseFailure
from .scoring2025 import OFFICIAL_HD95_PENALTY, Scoring2025

__all__ = [
    "RELEASED_2025",
    "CaseResult2025",
    "CaseScores2025",
    "GroupScores2025",
    "InstanceRow2025",
    "Metrics2025",
    "contributions",
    "release_spec",
]

_MODEL = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="strings")
#: The per-case figures a release carries, per group: global Dice and panoptic quality.
RELEASED_2025: tuple[str, str] = ("dsc", "pq_dsc")
_RELEASED_FIELD = {"dsc": "global_bin_dsc", "pq_dsc": "pq_dsc"}


class InstanceRow2025(BaseModel):
    """One reference instance: matched (with its pair's figures) or missed."""

    model_config = _MODEL

    sq_dsc: float | None = None
    sq_hd95: float | None = None
    sq_nsd: float | None = None
    voxel_count: int
    volume: float
    is_matched: Literal[0, 1]


class GroupScores2025(BaseModel):
    """One group's official figures (``PanopticaResult.to_dict(True)``; ``prec`` / ``rec`` are
    absent there, None here, when nothing was predicted / nothing is in the truth)."""

    model_config = _MODEL

    n_ref_instances: int
    n_pred_instances: int
    tp: int
    fp: int
    fn: int
    prec: float | None = None
    rec: float | None = None
    rq: float
    sq_dsc: float
    sq_dsc_std: float
    pq_dsc: float
    sq_hd95: float
    sq_hd95_std: float
    sq_nsd: float
    sq_nsd_std: float
    instance_voxel_count_ref: float
    instance_volume_ref: float
    global_bin_volume_pred: int
    global_bin_volume_ref: int
    global_bin_dsc: float
    global_bin_hd95: float
    global_bin_nsd: float
    reference_instances: tuple[InstanceRow2025, ...]

    def official(self) -> dict[str, Any]:
        """The dictionary as the official evaluator writes it (keys in its order)."""
        out = self.model_dump(exclude={"reference_instances"})
        for key in ("prec", "rec"):
            if out[key] is None:
                del out[key]
        out["reference_instances"] = [r.model_dump(exclude_none=True)
                                      for r in self.reference_instances]
        return out


class CaseScores2025(BaseModel):
    """One case's figures per group, under one official task configuration."""

    model_config = _MODEL

    kind: Literal["scores-2025"] = "scores-2025"
    case_id: str
    task: str
    groups: dict[str, GroupScores2025]

    @property
    def failed(self) -> bool:
        """False: the case was scored."""
        return False

    def to_json(self) -> dict[str, object]:
        """The result as a JSON object (non-finite values as ``"NaN"`` / ``"Infinity"``)."""
        doc: dict[str, object] = json.loads(self.model_dump_json())
        return doc

    @classmethod
    def from_official(cls, case_id: str, task: str,
                      groups: Mapping[str, Mapping[str, Any]]) -> CaseScores2025:
        return cls(case_id=case_id, task=task,
                   groups={g: GroupScores2025.model_validate(dict(v)) for g, v in groups.items()})


CaseResult2025 = CaseScores2025 | CaseFailure


class Metrics2025(BaseModel):
    """The metric definition a 2025 pin publishes: the official configuration it reproduces and
    what its release carries."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metrics_id: Literal["sealbench/brats-2025"] = "sealbench/brats-2025"
    version: Literal[1] = 1
    task: str
    source: str
    groups: dict[str, tuple[int, ...]]
    matching: str
    matching_threshold: float
    instance_metrics: tuple[str, ...] = ("dsc", "nsd", "hd95")
    global_metrics: tuple[str, ...] = ("dsc", "nsd", "hd95")
    zero_match_rules: dict[str, dict[str, str]]
    hd95_reported_penalty_mm: float = OFFICIAL_HD95_PENALTY
    released: tuple[str, ...] = RELEASED_2025
    released_when_nothing_either_side: float = 1.0

    @classmethod
    def of(cls, config: Scoring2025) -> Metrics2025:
        rules = {metric: {situation: str(getattr(rule, situation)) for situation in
                          ("no_instances", "empty_prediction", "empty_reference", "normal")}
                 for metric, rule in config.rules.items()}
        return cls(task=config.task, source=config.source,
                   groups={g.name: g.labels for g in config.groups},
                   matching="maximum bipartite matching on Dice (26-connected components)",
                   matching_threshold=config.matching_threshold, zero_match_rules=rules)


def release_spec(config: Scoring2025, *, epsilon: float = rel.DEFAULT_EPSILON,
                 delta: float = rel.DEFAULT_DELTA) -> rel.ReleaseSpec:
    """Global Dice and panoptic quality per group, clipped to [0, 1]."""
    return rel.ReleaseSpec(
        columns=tuple(rel.Column(f"{metric}:{g.name}", 0.0, 1.0)
                      for metric in RELEASED_2025 for g in config.groups),
        epsilon=epsilon, delta=delta)


def contributions(results: Sequence[CaseResult2025], config: Scoring2025,
                  ) -> npt.NDArray[np.float64]:
    """One row per case, in :func:`release_spec`'s column order: a failure 0, NaN 1."""
    columns = [(metric, g.name) for metric in RELEASED_2025 for g in config.groups]
    rows = np.zeros((len(results), len(columns)), dtype=np.float64)
    for i, result in enumerate(results):
        if isinstance(result, CaseFailure):
            continue
        for j, (metric, group) in enumerate(columns):
            value = float(getattr(result.groups[group], _RELEASED_FIELD[metric]))
            rows[i, j] = 1.0 if math.isnan(value) else min(max(value, 0.0), 1.0)
    return rows
