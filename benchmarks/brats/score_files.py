"""Scoring predictions stored on disk against truth on disk, outside any enclave (a challenge's
validation phase: ``sealbench benchmark score --pin``).

Files are paired as the official ``brats-evaluate`` (``BraTS_evaluation`` 0.0.10) pairs them: every
``*.nii.gz`` of the truth folder, in sorted order, is a subject; its id is the first match of
``\\d{5}(-\\d{3})?|\\d{4}-\\d{1,3}`` in its name, and its prediction is the file of the
predictions folder whose name ends with ``<id>.nii.gz``. A truth file without an id or without a
prediction goes to ``missings``; predictions no truth file claims are reported as extras (the
official command ignores them silently). The subject's name is its truth file's name.

The output is the official summary (``{"metrics": [...], "missings": [...]}``, NaN and Infinity
written as the official ``json.dump`` writes them) and a CSV with the columns of the official
parser (``brats-parse-metrics seg``: per subject, then ``mean``, ``std``, ``median`` rows; a
missing subject scores 0, its HD95 373). A 2023 pin writes the same shapes with its own
per-case figures (regions WT, TC, ET; a missing subject is the 2023 penalty).

Errors::

    BenchmarkError
     ├── CaseError                 a truth file unreadable, or the folders unusable
     └── InvalidPredictionError    a prediction unreadable, of another shape or spacing, or
                                   holding a label outside the pin's map (each names the case)
"""

from __future__ import annotations

import csv
import inspect
import io
import json
import math
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import nibabel as nib
import numpy as np
import numpy.typing as npt

from .errors import CaseError, InvalidPredictionError
from .metrics import CaseFailure, MetricsSpec, RegionScores, score_case
from .scoring2025 import Scoring2025, score_stored_volumes

__all__ = [
    "DEFAULT_CSV_MODE",
    "METS_OVERLAP_THRESHOLD",
    "METS_VOLUME_THRESHOLD",
    "SUBJECT_ID",
    "FileScores",
    "FolderScorer",
    "Pairing",
    "lesionwise_2023_scorer",
    "official_2025_scorer",
    "official_csv_columns",
    "official_mets_csv_columns",
    "official_missing_value",
    "pair_files",
    "score_folders",
]

#: The official evaluator's subject id in a file name (``evaluation.py``).
SUBJECT_ID: Final = re.compile(r"(\d{5}(?:-\d{3})?|\d{4}-\d{1,3})")
_SUFFIX: Final = ".nii.gz"
#: The CSV layout :meth:`FileScores.to_csv` writes by default (the official parser's ``seg``).
DEFAULT_CSV_MODE: Final = "seg"
#: The official check of prediction against reference spacing (panoptica's sitk check).
_SPACING_TOLERANCE: Final = 1e-3
#: The largest NIfTI file read (a 240x240x155 float64 volume is 71 MB uncompressed).
_MAX_FILE_BYTES: Final = 256 * 1024 * 1024

Volume = npt.NDArray[np.generic]
GroupDicts = dict[str, dict[str, Any]]
CsvRow = dict[str, float | int | None]


@dataclass(frozen=True)
class FolderScorer:
    """How a pin scores one stored case and flattens it into the parser's CSV row.

    ``score(prediction, truth, zooms)`` takes the stored (x, y, z) arrays and the truth's zooms
    and returns the per-group dictionaries (or raises :class:`InvalidPredictionError`);
    ``csv_columns(groups)`` is one row of the CSV (column order as the parser writes it);
    ``missing_value(column)`` what a missing subject counts as in a column."""

    score: Callable[[Volume, Volume, tuple[float, ...]], GroupDicts]
    csv_columns: Callable[[Mapping[str, Mapping[str, Any]]], CsvRow]
    missing_value: Callable[[str], float]
    #: Other CSV layouts by name (the 2025 pins: the official parser's ``mets`` mode), each a
    #: row function taking the subject's groups and the mode's numeric options.
    other_csv: Mapping[str, Callable[..., CsvRow]] = field(default_factory=dict)


@dataclass(frozen=True)
class Pairing:
    """Truth files with their predictions (names), the truth files left unpaired, and the
    predictions no truth file claims."""

    pairs: tuple[tuple[str, str], ...]
    missings: tuple[str, ...]
    extras: tuple[str, ...]


def pair_files(truth_names: Sequence[str], prediction_names: Sequence[str]) -> Pairing:
    """Pair file names as the official evaluator does (see the module docstring); a truth file
    two predictions claim is refused (the official command would take whichever its directory
    listing gives first)."""
    predictions = sorted(n for n in prediction_names if n.endswith(_SUFFIX))
    pairs: list[tuple[str, str]] = []
    missings: list[str] = []
    for name in sorted(n for n in truth_names if n.endswith(_SUFFIX)):
        found = SUBJECT_ID.search(name)
        if found is None:
            missings.append(name)
            continue
        claimed = [p for p in predictions if p.endswith(f"{found.group(1)}{_SUFFIX}")]
        if len(claimed) > 1:
            raise CaseError(f"{name}: predictions {', '.join(claimed)} all end with "
                            f"{found.group(1)}{_SUFFIX}; keep one")
        if claimed:
            pairs.append((name, claimed[0]))
        else:
            missings.append(name)
    used = {p for _, p in pairs}
    return Pairing(tuple(pairs), tuple(missings), tuple(p for p in predictions if p not in used))


def _read(path: Path, case: str, part: str,
          error: type[CaseError] | type[InvalidPredictionError],
          ) -> tuple[Volume, tuple[float, ...], npt.NDArray[np.float64]]:
    try:
        if path.stat().st_size > _MAX_FILE_BYTES:
            raise error(f"{case}: the {part} {path.name} is larger than "
                        f"{_MAX_FILE_BYTES // 2**20} MiB")
        image: Any = nib.load(path)
        array = np.asanyarray(image.dataobj)
        zooms = tuple(float(z) for z in image.header.get_zooms()[:3])
        affine = np.asarray(image.affine, dtype=np.float64)
    except (CaseError, InvalidPredictionError):
        raise
    except Exception as exc:  # nibabel and gzip raise many types for a damaged file
        raise error(f"{case}: the {part} {path.name} is not a readable NIfTI image "
                    f"({type(exc).__name__})") from exc
    if array.ndim != 3:
        raise error(f"{case}: the {part} {path.name} is {array.ndim}-dimensional, expected 3")
    return array, zooms, affine


def _directions(affine: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    linear = affine[:3, :3]
    norms = np.linalg.norm(linear, axis=0)
    out: npt.NDArray[np.float64] = linear / np.where(norms == 0, 1.0, norms)
    return out


def _score_pair(truth: Path, prediction: Path, case: str, scorer: FolderScorer) -> GroupDicts:
    ref, zooms, ref_affine = _read(truth, case, "truth", CaseError)
    pred, pred_zooms, pred_affine = _read(prediction, case, "prediction",
                                          InvalidPredictionError)
    if pred.shape != ref.shape:
        raise InvalidPredictionError(f"{case}: the prediction {prediction.name} has shape "
                                     f"{pred.shape}, the truth {ref.shape}")
    # The official evaluator refuses (as an error row) a pair whose origin, spacing or axis
    # directions differ (panoptica's SimpleITK sanity check, tolerance 1e-3); so does this.
    if any(abs(p - r) > _SPACING_TOLERANCE for p, r in zip(pred_zooms, zooms, strict=True)):
        raise InvalidPredictionError(f"{case}: the prediction's spacing {pred_zooms} mm is not "
                                     f"the truth's {zooms}")
    if not np.allclose(pred_affine[:3, 3], ref_affine[:3, 3], rtol=0, atol=_SPACING_TOLERANCE):
        raise InvalidPredictionError(f"{case}: the prediction's origin "
                                     f"{tuple(pred_affine[:3, 3].round(3))} is not the truth's "
                                     f"{tuple(ref_affine[:3, 3].round(3))}")
    if not np.allclose(_directions(pred_affine), _directions(ref_affine), rtol=0,
                       atol=_SPACING_TOLERANCE):
        raise InvalidPredictionError(f"{case}: the prediction's orientation (axis directions) "
                                     "is not the truth's")
    try:
        return scorer.score(pred, ref, zooms)
    except InvalidPredictionError as exc:
        raise InvalidPredictionError(f"{case}: {exc}") from exc


@dataclass(frozen=True)
class FileScores:
    """The scored folders: rows ``(subject name, per-group dictionaries or an error)``, the
    missing truth files and the unclaimed predictions."""

    rows: tuple[tuple[str, GroupDicts | str], ...]
    missings: tuple[str, ...]
    extras: tuple[str, ...]
    scorer: FolderScorer

    @property
    def n_scored(self) -> int:
        """Subjects scored without error."""
        return sum(not isinstance(r, str) for _, r in self.rows)

    def summary(self) -> dict[str, Any]:
        """The official summary document (error rows as ``{"subject_name", "error"}``)."""
        metrics: list[dict[str, Any]] = []
        for name, result in self.rows:
            if isinstance(result, str):
                metrics.append({"subject_name": name, "error": result})
            else:
                metrics.append({**{k: dict(v) for k, v in result.items()}, "subject_name": name})
        return {"metrics": metrics, "missings": list(self.missings)}

    def to_json(self) -> bytes:
        """The summary as the official command writes it (indent 4, NaN and Infinity bare)."""
        return json.dumps(self.summary(), indent=4).encode()

    @property
    def csv_modes(self) -> tuple[str, ...]:
        """The CSV layouts :meth:`to_csv` writes, the default first."""
        return (DEFAULT_CSV_MODE, *self.scorer.other_csv)

    def _columns(self, mode: str | None,
                 options: Mapping[str, float]) -> Callable[[Mapping[str, Any]], CsvRow]:
        if mode is None or mode == DEFAULT_CSV_MODE:
            if options:
                raise ValueError(f"the {DEFAULT_CSV_MODE} CSV takes no options "
                                 f"({', '.join(sorted(options))} given)")
            return self.scorer.csv_columns
        if mode not in self.scorer.other_csv:
            raise ValueError(f"no CSV mode {mode!r}; this pin writes "
                             f"{', '.join(self.csv_modes)}")
        columns = self.scorer.other_csv[mode]
        accepted = [p.name for p in inspect.signature(columns).parameters.values()
                    if p.kind is inspect.Parameter.KEYWORD_ONLY]
        unknown = sorted(set(options) - set(accepted))
        if unknown:
            raise ValueError(f"the {mode} CSV takes the options {', '.join(accepted) or 'none'}, "
                             f"not {', '.join(unknown)}")
        return lambda groups: columns(groups, **options)

    def csv_rows(self, mode: str | None = None,
                 options: Mapping[str, float] | None = None) -> list[dict[str, Any]]:
        """The parser's rows: scored subjects, missing ones (error rows are skipped, as the
        parser skips them), then ``mean``, ``std`` (n-1) and ``median`` over each column's
        finite-or-infinite values (NaN skipped). ``mode`` picks a layout of
        :attr:`csv_modes` (``ValueError`` for another, or for options it does not take)."""
        row_of = self._columns(mode, options or {})
        rows: list[dict[str, Any]] = [
            {"subject_id": name, **row_of(result)}
            for name, result in self.rows if not isinstance(result, str)]
        columns = [k for k in rows[0] if k != "subject_id"] if rows else []
        rows += [{"subject_id": name, **{c: self.scorer.missing_value(c) for c in columns}}
                 for name in self.missings]
        stats: dict[str, dict[str, Any]] = {n: {"subject_id": n}
                                            for n in ("mean", "std", "median")}
        for column in columns:
            values = [float(v) for r in rows if (v := r.get(column)) is not None
                      and not math.isnan(float(v))]
            stats["mean"][column] = _mean(values)
            stats["std"][column] = _std(values)
            stats["median"][column] = statistics.median(values) if values else None
        return [*rows, *stats.values()] if rows else []

    def to_csv(self, mode: str | None = None, options: Mapping[str, float] | None = None) -> bytes:
        """The parser's CSV (an empty cell where the parser writes NaN), in ``mode``'s layout
        (:meth:`csv_rows`)."""
        rows = self.csv_rows(mode, options)
        if not rows:
            return b""
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(v) for k, v in row.items()})
        return buffer.getvalue().encode()


#: The official parser's columns per group (``parse_seg_results``): column stem, key.
_OFFICIAL_COLUMNS: Final = (
    ("all_instance_tp", "tp"), ("all_instance_fp", "fp"), ("all_instance_fn", "fn"),
    ("all_instance_prec", "prec"), ("all_instance_rec", "rec"), ("all_instance_f1", "rq"),
    ("global_dsc", "global_bin_dsc"), ("global_nsd", "global_bin_nsd"),
    ("global_hd95", "global_bin_hd95"),
    ("lesionwise_dsc_mean", "sq_dsc"), ("lesionwise_dsc_std", "sq_dsc_std"),
    ("lesionwise_nsd_mean", "sq_nsd"), ("lesionwise_nsd_std", "sq_nsd_std"),
    ("lesionwise_hd95_mean", "sq_hd95"), ("lesionwise_hd95_std", "sq_hd95_std"),
)
#: What the official parser writes for an infinite global HD95 and a missing subject's HD95.
_HD95_PENALTY: Final = 373


def official_csv_columns(groups: Mapping[str, Mapping[str, Any]]) -> CsvRow:
    """One subject's row of the official parser (``brats-parse-metrics seg``): per group, in
    the summary's order, detection counts and rates, global Dice / NSD / HD95 (an infinite HD95
    as 373), lesion-wise means and standard deviations; an absent key is NaN (empty)."""
    row: CsvRow = {}
    for group, values in groups.items():
        for stem, key in _OFFICIAL_COLUMNS:
            value = values.get(key)
            if key == "global_bin_hd95" and value is not None and math.isinf(value):
                value = _HD95_PENALTY
            row[f"{stem}_{group}"] = value
    return row


#: The official parser's ``mets`` defaults: a reference lesion of at least this many ``volume``
#: units is large; a matched small lesion counts as detected from this instance Dice on.
METS_VOLUME_THRESHOLD: Final = 20.0
METS_OVERLAP_THRESHOLD: Final = 0.1


def _rates(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    """Precision, recall and F1 with 0 for an empty denominator (the parser's rule)."""
    prec = tp / (tp + fp) if tp + fp else 0
    rec = tp / (tp + fn) if tp + fn else 0
    f1 = 2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn else 0
    return prec, rec, f1


def official_mets_csv_columns(groups: Mapping[str, Mapping[str, Any]], *,
                              vol_threshold: float = METS_VOLUME_THRESHOLD,
                              overlap_threshold: float = METS_OVERLAP_THRESHOLD) -> CsvRow:
    """One subject's row of the official parser's metastases mode (``brats-parse-metrics
    mets``): per group, the detection counts of all lesions; then the reference lesions split
    by ``volume`` at ``vol_threshold`` into large and small ones.

    Large lesions: a matched one is detected when its Dice reaches ``overlap_threshold``;
    every predicted lesion left unmatched (``fp``) is a large false positive; lesion-wise Dice,
    HD95 and NSD are the mean and population std over the large lesions (an unmatched one
    and each false positive counting Dice 0, NSD 0, HD95 373; infinite HD95s left out),
    NaN when there are none. Small lesions: detection counts and rates only, matched ones
    detected from ``overlap_threshold`` on, the same false positives. Then global Dice, NSD
    and HD95 (infinite as 373)."""
    row: CsvRow = {}
    nan = math.nan
    for group, values in groups.items():
        for stem, key in _OFFICIAL_COLUMNS[:6]:
            row[f"{stem}_{group}"] = values.get(key, nan)
        num_fp = int(values.get("fp", 0))
        large_dsc: list[float] = []
        large_hd95: list[float] = []
        large_nsd: list[float] = []
        large_tp = large_fn = small_tp = small_fn = 0
        any_large = any_small = False
        for lesion in values.get("reference_instances", []):
            volume = lesion.get("volume")
            if volume is None:
                continue
            large = volume >= vol_threshold
            any_large, any_small = any_large or large, any_small or not large
            dsc = lesion.get("sq_dsc")
            matched = lesion.get("is_matched") == 1
            detected = matched and dsc is not None and dsc >= overlap_threshold
            if large:
                large_tp += detected
                large_fn += not detected
                if matched:
                    large_dsc.append(dsc)
                    large_hd95.append(lesion.get("sq_hd95"))
                    large_nsd.append(lesion.get("sq_nsd"))
                else:
                    large_dsc.append(0)
                    large_nsd.append(0)
                    large_hd95.append(_HD95_PENALTY)
            elif not matched or dsc is not None:  # a matched small lesion without Dice: neither
                small_tp += detected
                small_fn += not detected
        large_dsc += [0] * num_fp
        large_nsd += [0] * num_fp
        large_hd95 += [_HD95_PENALTY] * num_fp
        stems = ("tp", "fp", "fn", "prec", "rec", "f1")
        large_values = ((large_tp, num_fp, large_fn, *_rates(large_tp, num_fp, large_fn))
                        if any_large else (nan,) * 6)
        row.update({f"large_instance_{s}_{group}": v
                    for s, v in zip(stems, large_values, strict=True)})
        if values.get("n_ref_instances", 0) == 0 or not any_large:
            lesionwise: tuple[Any, ...] = (nan,) * 6
        else:
            finite_hd95 = [v for v in large_hd95 if v is not None and not math.isinf(v)]
            lesionwise = (*_mean_pstd(large_dsc, 0, 0),
                          *_mean_pstd(finite_hd95, _HD95_PENALTY, 0),
                          *_mean_pstd(large_nsd, 0, 0))
        row.update({f"lesionwise_{m}_{s}_{group}": v for (m, s), v in zip(
            (("dsc", "mean"), ("dsc", "std"), ("hd95", "mean"), ("hd95", "std"),
             ("nsd", "mean"), ("nsd", "std")), lesionwise, strict=True)})
        small_values = ((small_tp, small_fn, num_fp, *_rates(small_tp, num_fp, small_fn))
                        if any_small else (nan,) * 6)
        row.update({f"small_instance_{s}_{group}": v for s, v in zip(
            ("tp", "fn", "fp", "prec", "rec", "f1"), small_values, strict=True)})
        for stem, key in _OFFICIAL_COLUMNS[6:9]:
            value = values.get(key, nan)
            if key == "global_bin_hd95" and value is not None and math.isinf(value):
                value = _HD95_PENALTY
            row[f"{stem}_{group}"] = value
    return row


def _mean_pstd(values: Sequence[float], empty_mean: float,
               empty_std: float) -> tuple[float, float]:
    """Mean and population standard deviation (numpy's ``mean``/``std``), or the given
    values for an empty list."""
    if not values:
        return empty_mean, empty_std
    array = np.asarray(values, dtype=np.float64)
    return float(np.mean(array)), float(np.std(array))


def official_missing_value(column: str) -> float:
    """A missing subject's value in the official parser: 373 for an HD95 that is not a
    standard deviation, else 0."""
    return _HD95_PENALTY if "hd95" in column and "std" not in column else 0


def official_2025_scorer(config: Scoring2025) -> FolderScorer:
    """A 2025 pin's scoring of files: the official per-group dictionaries
    (:func:`.scoring2025.score_stored_volumes`) and the official parser's CSV."""
    def score(pred: Volume, truth: Volume, zooms: tuple[float, ...]) -> GroupDicts:
        return score_stored_volumes(pred, truth, zooms, config)

    return FolderScorer(score, official_csv_columns, official_missing_value,
                        {"mets": official_mets_csv_columns})


def _integers(array: Volume, part: str) -> Volume:
    if array.dtype.kind == "f":
        if not (np.all(np.isfinite(array)) and np.array_equal(array, np.rint(array))):
            raise InvalidPredictionError(f"the {part} holds non-integer values")
        return array.astype(np.int32)
    return array


def lesionwise_2023_scorer(spec: MetricsSpec) -> FolderScorer:
    """A 2023 pin's scoring of files: its own per-case figures per region (``dice``, ``hd95``,
    ``lesion_dice``, ...: :func:`.metrics.score_case`) as ``{"WT": {...}, ...}``; CSV columns
    ``<figure>_<region>``; a missing subject counts as the 2023 penalty (Dice 0, HD95 374)."""
    penalty = next(iter(CaseFailure(case_id="", reason="").penalised(spec).values()))

    def score(pred: Volume, truth: Volume, zooms: tuple[float, ...]) -> GroupDicts:
        scores = score_case(_integers(pred, "prediction"), _integers(truth, "ground truth"),
                            spec, (zooms[0], zooms[1], zooms[2]))
        return {str(region): s.model_dump() for region, s in scores.regions.items()}

    def columns(groups: Mapping[str, Mapping[str, Any]]) -> CsvRow:
        return {f"{figure}_{region}": values[figure]
                for region, values in groups.items() for figure in RegionScores.model_fields}

    def missing(column: str) -> float:
        return float(getattr(penalty, column.rsplit("_", 1)[0]))

    return FolderScorer(score, columns, missing)


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def _std(values: Sequence[float]) -> float | None:
    if len(values) < 2 or any(math.isinf(v) for v in values):
        return None if len(values) < 2 else math.nan
    return statistics.stdev(values)


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return str(value)


def score_folders(truth_dir: Path, predictions_dir: Path, scorer: FolderScorer, *,
                  keep_going: bool = False,
                  on_case: Callable[[str, int, int], None] | None = None) -> FileScores:
    """Score every truth file of ``truth_dir`` against its prediction in ``predictions_dir``.

    A case that cannot be scored raises (:class:`InvalidPredictionError` or
    :class:`CaseError`, naming it), unless ``keep_going``: then it becomes an error row, as the
    official command writes one. ``on_case(name, done, total)`` is called after each case."""
    for folder, what in ((truth_dir, "truth"), (predictions_dir, "predictions")):
        if not folder.is_dir():
            raise CaseError(f"the {what} folder {folder} does not exist or is not a folder")
    pairing = pair_files([p.name for p in truth_dir.iterdir() if p.is_file()],
                         [p.name for p in predictions_dir.iterdir() if p.is_file()])
    if not pairing.pairs and not pairing.missings:
        raise CaseError(f"no *{_SUFFIX} truth files in {truth_dir}")
    rows: list[tuple[str, GroupDicts | str]] = []
    for done, (truth, prediction) in enumerate(pairing.pairs, start=1):
        try:
            rows.append((truth, _score_pair(truth_dir / truth, predictions_dir / prediction,
                                            truth, scorer)))
        except (CaseError, InvalidPredictionError) as exc:
            if not keep_going:
                raise
            rows.append((truth, str(exc)))
        if on_case is not None:
            on_case(truth, done, len(pairing.pairs))
    return FileScores(tuple(rows), pairing.missings, pairing.extras, scorer)
