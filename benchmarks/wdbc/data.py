"""The WDBC cases: the feature contract, the raw CSV a hospital holds, and the demo splits.

The Wisconsin Diagnostic Breast Cancer data (Wolberg, Street and Mangasarian, UCI 1995; 569
real cases, 212 malignant) describes the cell nuclei of a digitised fine-needle aspirate by 30
features: the mean, standard error and worst (mean of the three largest) of ten measurements.

**Raw CSV** (what a hospital prepares, :func:`read_raw_csv`): UTF-8, a header row
``case_id,diagnosis,<the 30 FEATURES in order>``, then one row per case; ``case_id`` matches
:data:`CASE_ID_PATTERN`, ``diagnosis`` is ``M`` (malignant) or ``B`` (benign), every feature a
finite non-negative decimal number. The UCI ``wdbc.data`` file has the same columns.

**Demo data** (:func:`load_wdbc`, needs ``sealbench[datasets]``): scikit-learn ships the UCI data
inside its package (``sklearn.datasets.load_breast_cancer``, nothing downloaded); case ``i`` (row
order of the UCI file) is ``wdbc-{i+1:04d}``. Label 1 is malignant here (scikit-learn's target
is 0 for malignant). :func:`split_cases` deals the cases, seeded, into a training split (what the
shipped models were trained on) and disjoint hospital sites of fixed, different case mixes.
"""

from __future__ import annotations

import csv
import importlib
import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = [
    "CASE_ID_PATTERN",
    "FEATURES",
    "MAX_RAW_BYTES",
    "SITES",
    "SPLIT_SEED",
    "TRAINING_FRACTION",
    "RawFormatError",
    "RowRejection",
    "Site",
    "WdbcCase",
    "WdbcSplits",
    "format_raw_csv",
    "load_wdbc",
    "parse_raw_csv",
    "read_raw_csv",
    "split_cases",
    "write_raw_csv",
]

_MEASUREMENTS: Final = (
    "radius", "texture", "perimeter", "area", "smoothness", "compactness", "concavity",
    "concave_points", "symmetry", "fractal_dimension",
)
#: The 30 features in the order of the UCI file (and of scikit-learn's columns): the ten means,
#: their standard errors, then their worst values. A model's input row follows this order.
FEATURES: Final[tuple[str, ...]] = tuple(
    f"{m}_{kind}" for kind in ("mean", "se", "worst") for m in _MEASUREMENTS
)
CASE_ID_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: Largest raw CSV read (the whole UCI file is about 125 kB).
MAX_RAW_BYTES: Final = 16 << 20
_HEADER: Final = ("case_id", "diagnosis", *FEATURES)
_DIAGNOSES: Final = {"M": 1, "B": 0}
#: Largest magnitude accepted for a feature (the UCI maximum is 4254, worst area).
_MAX_FEATURE: Final = 1e6


class RawFormatError(ValueError):
    """The raw CSV is not in the documented format (says where, never a feature value)."""


@dataclass(frozen=True)
class WdbcCase:
    """One case: its id, its 30 features (in :data:`FEATURES` order) and its label."""

    case_id: str
    features: tuple[float, ...]
    malignant: bool

    def __post_init__(self) -> None:
        if not CASE_ID_PATTERN.fullmatch(self.case_id):
            raise RawFormatError("a case id must be 1-64 letters, digits, '_', '.' or '-'")
        if len(self.features) != len(FEATURES):
            raise RawFormatError(f"{len(self.features)} features, expected {len(FEATURES)}")
        if not all(math.isfinite(v) and 0.0 <= v <= _MAX_FEATURE for v in self.features):
            raise RawFormatError(f"features must be finite numbers in [0, {_MAX_FEATURE:g}]")


@dataclass(frozen=True)
class RowRejection:
    """A row of the raw CSV that is not a valid case: its case id (or ``line N`` when the id
    itself is unusable) and why (never a feature value)."""

    case: str
    reason: str


def parse_raw_csv(data: bytes) -> tuple[tuple[WdbcCase, ...], tuple[RowRejection, ...]]:
    """Parse a raw CSV (the whole file's bytes) into its valid cases and its rejected rows.

    The file as a whole must be bounded UTF-8 CSV with the documented header, or
    :class:`RawFormatError`; a row that fails (columns, diagnosis, a feature, a repeated id) is
    rejected with its reason and the other rows go on."""
    if len(data) > MAX_RAW_BYTES:
        raise RawFormatError(f"the file has {len(data)} bytes, more than {MAX_RAW_BYTES}")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise RawFormatError("the file is not UTF-8 text") from exc
    rows = csv.reader(io.StringIO(text, newline=""), strict=True)
    cases: list[WdbcCase] = []
    rejected: list[RowRejection] = []
    seen: set[str] = set()
    try:
        header = next(rows, None)
        if header is None or tuple(h.strip() for h in header) != _HEADER:
            raise RawFormatError(
                "line 1 must be the header 'case_id,diagnosis,' followed by the 30 feature "
                f"names in order ({', '.join(FEATURES[:2])}, ..., {FEATURES[-1]})"
            )
        for row in rows:
            if not row or all(not cell.strip() for cell in row):
                continue
            line = rows.line_num
            case_id = row[0].strip()
            who = case_id if CASE_ID_PATTERN.fullmatch(case_id) else f"line {line}"
            try:
                cases.append(_parse_row(row, seen))
            except RawFormatError as exc:
                rejected.append(RowRejection(who, f"line {line}: {exc}"))
    except csv.Error as exc:
        raise RawFormatError(f"line {rows.line_num}: not valid CSV ({exc})") from exc
    return tuple(cases), tuple(rejected)


def _parse_row(row: list[str], seen: set[str]) -> WdbcCase:
    if len(row) != len(_HEADER):
        raise RawFormatError(f"{len(row)} columns, expected {len(_HEADER)}")
    case_id, diagnosis = row[0].strip(), row[1].strip()
    if diagnosis not in _DIAGNOSES:
        raise RawFormatError("diagnosis must be M or B")
    try:
        features = tuple(float(cell) for cell in row[2:])
    except ValueError as exc:
        raise RawFormatError("a feature is not a number") from exc
    case = WdbcCase(case_id, features, bool(_DIAGNOSES[diagnosis]))
    if case_id in seen:
        raise RawFormatError("case id repeated")
    seen.add(case_id)
    return case


def read_raw_csv(data: bytes) -> tuple[WdbcCase, ...]:
    """Parse a raw CSV strictly: every row must be a valid case (:class:`RawFormatError` naming
    the first bad line), and there must be at least one."""
    cases, rejected = parse_raw_csv(data)
    if rejected:
        raise RawFormatError(rejected[0].reason)
    if not cases:
        raise RawFormatError("the file holds no cases")
    return cases


def format_raw_csv(cases: Sequence[WdbcCase]) -> bytes:
    """The raw CSV of ``cases`` (``repr`` of each float, so it reads back exactly)."""
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(_HEADER)
    for case in cases:
        writer.writerow([case.case_id, "M" if case.malignant else "B",
                         *(repr(v) for v in case.features)])
    return out.getvalue().encode("utf-8")


def write_raw_csv(path: Path, cases: Sequence[WdbcCase]) -> None:
    """Write the raw CSV of ``cases`` to ``path`` (through a temporary name)."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_bytes(format_raw_csv(cases))
    partial.replace(path)


def load_wdbc() -> tuple[WdbcCase, ...]:
    """The 569 WDBC cases from scikit-learn's copy of the UCI file (``sealbench[datasets]``)."""
    datasets = importlib.import_module("sklearn.datasets")
    bunch = datasets.load_breast_cancer()
    x: npt.NDArray[np.float64] = np.asarray(bunch.data, dtype=np.float64)
    target: npt.NDArray[np.int64] = np.asarray(bunch.target)
    names = tuple(str(n).replace(" error", " se").replace(" ", "_") for n in bunch.feature_names)
    # scikit-learn names "mean radius", "radius error", "worst radius": check the column order.
    reordered = tuple(
        f"{n.split('_', 1)[1]}_{n.split('_', 1)[0]}" if n.startswith(("mean_", "worst_")) else n
        for n in names
    )
    if reordered != FEATURES:
        raise RuntimeError("scikit-learn's breast-cancer columns are not in the UCI order")
    return tuple(
        WdbcCase(f"wdbc-{i + 1:04d}", tuple(float(v) for v in row), bool(target[i] == 0))
        for i, row in enumerate(x)
    )


@dataclass(frozen=True)
class Site:
    """A demo hospital: its name and how many malignant and benign cases it gets."""

    name: str
    malignant: int
    benign: int


#: Seed of the demo split (recorded with the shipped models' recipe).
SPLIT_SEED: Final = 20261203
#: Fraction of each class set aside to train the shipped models (never given to a site).
TRAINING_FRACTION: Final = 0.3
#: The demo sites, with different case mixes: a referral centre (malignant-rich), a screening
#: programme (mostly benign) and a general hospital (everything left).
SITES: Final[tuple[Site, ...]] = (
    Site("referral", malignant=60, benign=40),
    Site("screening", malignant=18, benign=102),
    Site("general", malignant=-1, benign=-1),  # -1: all the cases left
)


@dataclass(frozen=True)
class WdbcSplits:
    """A training split and the sites' disjoint case sets."""

    training: tuple[WdbcCase, ...]
    sites: dict[str, tuple[WdbcCase, ...]]


def split_cases(
    cases: Sequence[WdbcCase], sites: Sequence[Site] = SITES, seed: int = SPLIT_SEED
) -> WdbcSplits:
    """Deal ``cases`` into a stratified training split and the ``sites``, disjoint and seeded.

    A site asking for more cases of a class than are left is an error; a site with -1 takes
    every case of that class still left (only the last site may)."""
    rng = np.random.default_rng(seed)
    pools: dict[bool, list[WdbcCase]] = {}
    for label in (True, False):
        members = [c for c in cases if c.malignant is label]
        order = rng.permutation(len(members))
        pools[label] = [members[i] for i in order]
    training: list[WdbcCase] = []
    for label in (True, False):
        take = round(TRAINING_FRACTION * len(pools[label]))
        training += pools[label][:take]
        pools[label] = pools[label][take:]
    dealt: dict[str, tuple[WdbcCase, ...]] = {}
    for position, site in enumerate(sites):
        members = []
        for label, wanted in ((True, site.malignant), (False, site.benign)):
            if wanted == -1 and position != len(sites) - 1:
                raise ValueError(f"site {site.name!r}: only the last site may take the rest")
            count = len(pools[label]) if wanted == -1 else wanted
            if count > len(pools[label]):
                raise ValueError(f"site {site.name!r} wants {count} cases of a class, "
                                 f"{len(pools[label])} are left")
            members += pools[label][:count]
            pools[label] = pools[label][count:]
        dealt[site.name] = tuple(sorted(members, key=lambda c: c.case_id))
    return WdbcSplits(tuple(sorted(training, key=lambda c: c.case_id)), dealt)
