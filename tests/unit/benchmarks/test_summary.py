"""The public summary: aggregates only, failures penalised and counted, never a silent NaN."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from sealbench.benchmarks.brats import (
    BRATS_2023_GLI_METRICS,
    CaseFailure,
    CaseScores,
    RegionScores,
    aggregate,
    score_or_fail,
)

SPEC = BRATS_2023_GLI_METRICS


def _scores(case_id: str, dice: float, hd95: float = 2.0) -> CaseScores:
    row = RegionScores(dice=dice, hd95=hd95, sensitivity=0.9, specificity=1.0, lesion_dice=dice,
                       lesion_hd95=hd95, num_tp=1, num_fp=0, num_fn=0, gt_volume_mm3=1000.0,
                       pred_volume_mm3=900.0)
    return CaseScores(case_id=case_id, regions=dict.fromkeys(SPEC.regions, row))


def test_failed_case_is_penalised_and_counted() -> None:
    summary = aggregate([_scores("a", 0.9), _scores("b", 0.7),
                         CaseFailure(case_id="c", reason="prediction missing")], SPEC)
    assert (summary.n_cases, summary.n_scored, summary.n_failed) == (3, 2, 1)
    wt = summary.regions["WT"]
    assert wt["dice"].mean == pytest.approx((0.9 + 0.7 + 0.0) / 3)
    assert wt["hd95"].mean == pytest.approx((2 + 2 + 374) / 3)
    assert wt["dice"].median == pytest.approx(0.7)


def test_nan_is_never_dropped_silently() -> None:
    summary = aggregate([_scores("a", 0.9), _scores("b", math.nan, math.inf)], SPEC)
    assert summary.n_nonfinite_cases == 1
    assert summary.regions["ET"]["dice"].nonfinite_replaced == 1
    assert summary.regions["ET"]["dice"].mean == pytest.approx(0.45)
    assert summary.regions["ET"]["hd95"].mean == pytest.approx((2 + 374) / 2)


def test_summary_holds_no_case_identifier_and_is_canonical() -> None:
    summary = aggregate([_scores("BraTS-GLI-00007-000", 0.8), _scores("BraTS-GLI-00008-000", 0.6)],
                        SPEC)
    data = summary.to_canonical_json()
    assert b"BraTS-GLI" not in data
    assert json.loads(data) == summary.model_dump(mode="json")
    assert data == summary.to_canonical_json()


def test_invalid_and_missing_predictions_become_flagged_failures() -> None:
    gt = np.zeros((8, 8, 8), dtype=np.uint8)
    missing = score_or_fail("x", None, gt, SPEC, (1.0, 1.0, 1.0))
    wrong = score_or_fail("y", np.zeros((8, 8, 7), np.uint8), gt, SPEC, (1.0, 1.0, 1.0))
    assert isinstance(missing, CaseFailure) and missing.flagged
    assert isinstance(wrong, CaseFailure) and "shape" in wrong.reason


def test_zero_cases_cannot_be_summarised() -> None:
    with pytest.raises(ValueError, match="zero cases"):
        aggregate([], SPEC)
