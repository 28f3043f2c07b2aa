"""The WDBC data contract, the prepared dataset a hospital seals, and how the enclave reads it.

Preparation (:func:`prepare`) reads ``<raw_dir>/cases.csv`` (the raw CSV of :mod:`.data`),
rejects each invalid row with its reason, and writes::

    <out>/manifest.json             canonical manifest of data/; its digest is the dataset's id
    <out>/preparation_report.json   accepted and rejected case ids with reasons (stays with the
                                    owner, never sealed)
    <out>/data/dataset.json         {"format": "sealbench/wdbc-prepared", "version": 1,
                                     "contract": <WdbcContract>, "n_cases": N}
    <out>/data/statistics.json      version 2, what registration sends: counts of cases and
                                     rejected rows, the contract's id, version and feature
                                     count; nothing about a case (version 1's malignant count
                                     is refused by statistics_of)
    <out>/data/cases/b<k>/<id>.json canonical JSON {"case_id", "features": [30 floats],
                                     "malignant": bool}; the cases in case-id order, in folders
                                     (sealed objects) of CASES_PER_OBJECT: b0000, b0001, ...

All of it is written into a hidden sibling ``.<out>.partial-<random>`` and renamed to ``<out>``
only when complete. The same CSV always gives the same bytes, so the same dataset digest.

A case is about 700 bytes, so the cases travel in sealed objects of :data:`CASES_PER_OBJECT`
(569 cases: 9 objects instead of 569 requests of a few milliseconds each). In the enclave,
:class:`WdbcLayout` groups an object's paths into its cases and loads each: at most
:data:`MAX_CASE_BYTES`, JSON that parses into :class:`CaseFile`, its id equal to its file
name's, 30 finite features in range; anything else is a :class:`CaseError`.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from sealbench.benchmarks.interface import (
    CaseError,
    CaseRejection,
    JsonObject,
    PreparationError,
    Prepared,
    PreparedLayout,
    ProgressFn,
)
from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.manifest import build_manifest

from .data import CASE_ID_PATTERN, FEATURES, RawFormatError, WdbcCase, parse_raw_csv

__all__ = [
    "CASES_PER_OBJECT",
    "LAYOUT",
    "MAX_CASE_BYTES",
    "PREPARED_FORMAT",
    "RAW_FILE",
    "CaseFile",
    "WdbcContract",
    "WdbcLayout",
    "prepare",
]

_log = logging.getLogger(__name__)
_FROZEN = ConfigDict(frozen=True, extra="forbid")

LAYOUT: Final = PreparedLayout()
RAW_FILE: Final = "cases.csv"
PREPARED_FORMAT: Final = "sealbench/wdbc-prepared"
REPORT_FILE: Final = "preparation_report.json"
STATISTICS_FORMAT: Final = "sealbench/wdbc-statistics"
#: Version 2: counts of cases and rejections and the contract's identity, no class counts.
STATISTICS_VERSION: Final = 2
#: Largest case file read in the enclave (a case is about 700 bytes).
MAX_CASE_BYTES: Final = 16 * 1024
#: Cases per sealed object (folder of the prepared data).
CASES_PER_OBJECT: Final = 64
_BATCH: Final = re.compile(r"b[0-9]{4}")
_SUFFIX: Final = ".json"
_MAX_DATASET_JSON: Final = 1 << 20


class WdbcContract(BaseModel):
    """The data contract (version 1): the features in order and the positive class."""

    model_config = _FROZEN

    format: Literal["sealbench/wdbc-contract"] = "sealbench/wdbc-contract"
    version: Literal[1] = 1
    features: tuple[str, ...] = FEATURES
    positive_class: Literal["malignant"] = "malignant"
    case_layout: Literal["cases/bNNNN/<case id>.json"] = "cases/bNNNN/<case id>.json"


CONTRACT: Final = WdbcContract()


class CaseFile(BaseModel):
    """One prepared case (``cases/<id>/case.json``)."""

    model_config = _FROZEN

    case_id: str
    features: tuple[float, ...]
    malignant: bool

    def to_case(self) -> WdbcCase:
        return WdbcCase(self.case_id, self.features, self.malignant)


class _DatasetDoc(BaseModel):
    model_config = _FROZEN

    format: Literal["sealbench/wdbc-prepared"]
    version: Literal[1]
    contract: WdbcContract
    n_cases: int


def _case_path(position: int, case_id: str) -> str:
    return f"{LAYOUT.cases_dir}/b{position // CASES_PER_OBJECT:04d}/{case_id}{_SUFFIX}"


class WdbcLayout:
    """How the enclave groups and loads the cases of a prepared WDBC dataset."""

    def __init__(self, contract: WdbcContract = CONTRACT) -> None:
        self.contract = contract

    def group(self, paths: Iterable[str]) -> Mapping[str, tuple[str, ...]]:
        """Case id -> its one file; :class:`CaseError` for any other path."""
        grouped: dict[str, tuple[str, ...]] = {}
        for path in paths:
            parts = path.split("/")
            case_id = parts[-1].removesuffix(_SUFFIX)
            if (len(parts) != 3 or parts[0] != LAYOUT.cases_dir
                    or not _BATCH.fullmatch(parts[1]) or not parts[2].endswith(_SUFFIX)
                    or not CASE_ID_PATTERN.fullmatch(case_id)):
                raise CaseError(
                    f"a file is not {LAYOUT.cases_dir}/b<4 digits>/<case id>{_SUFFIX}")
            if case_id in grouped:
                raise CaseError("a case file is listed twice")
            grouped[case_id] = (path,)
        return grouped

    def load(self, files: Mapping[str, bytes]) -> WdbcCase:
        """The case of one object's files (exactly one ``case.json``)."""
        if len(files) != 1:
            raise CaseError(f"a case object holds {len(files)} files, expected 1")
        [(path, data)] = files.items()
        [case_id] = self.group([path])
        if len(data) > MAX_CASE_BYTES:
            raise CaseError(f"the case file has {len(data)} bytes, more than {MAX_CASE_BYTES}")
        try:
            parsed = CaseFile.model_validate_json(data)
            case = parsed.to_case()
        except (ValidationError, RawFormatError) as exc:
            raise CaseError("the case file is not a valid prepared WDBC case") from exc
        if case.case_id != case_id:
            raise CaseError("the case file's id differs from its file name's")
        return case


def open_dataset(dataset_json: bytes, contract: WdbcContract = CONTRACT) -> WdbcLayout:
    """The layout of a dataset whose ``dataset.json`` is ``dataset_json``; :class:`CaseError`
    unless it was prepared under exactly ``contract``."""
    if len(dataset_json) > _MAX_DATASET_JSON:
        raise CaseError("dataset.json is larger than 1 MiB")
    try:
        doc = _DatasetDoc.model_validate_json(dataset_json)
    except ValidationError as exc:
        raise CaseError("dataset.json is not a prepared WDBC dataset (format "
                        f"{PREPARED_FORMAT} version 1)") from exc
    if doc.contract != contract:
        raise CaseError("the dataset was prepared under another WDBC contract")
    return WdbcLayout(contract)


def _write(path: Path, doc: JsonObject) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(canonical_json(doc))


def prepare(raw_dir: Path, out_dir: Path, *, progress: ProgressFn | None = None,
            strict: bool = False, contract: WdbcContract = CONTRACT) -> Prepared:
    """Prepare ``raw_dir/cases.csv`` into ``out_dir`` (which must not exist), whole or not at
    all. :class:`PreparationError` when the file is missing or malformed, when no row is a
    valid case, or when ``strict`` and any row was rejected (``rejected`` says why)."""
    raw = raw_dir / RAW_FILE
    if not raw.is_file() or raw.is_symlink():
        raise PreparationError(
            f"no {RAW_FILE} in {raw_dir}: expected the cases as CSV with the header "
            f"case_id,diagnosis,{FEATURES[0]},...,{FEATURES[-1]} (docs/benchmarks.md)")
    if out_dir.exists() or out_dir.is_symlink():
        raise PreparationError(f"output {out_dir} already exists; choose a new path")
    try:
        cases, rows_rejected = parse_raw_csv(raw.read_bytes())
    except RawFormatError as exc:
        raise PreparationError(f"{RAW_FILE}: {exc}") from exc
    rejected = tuple(CaseRejection(r.case, r.reason) for r in rows_rejected)
    if not cases or (strict and rejected):
        error = PreparationError(
            f"no row of {RAW_FILE} is a valid case ({len(rejected)} rejected)" if not cases
            else f"{len(rejected)} of {len(rejected) + len(cases)} rows failed the contract")
        error.rejected = rejected
        raise error
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.partial-{secrets.token_hex(6)}"
    tmp.mkdir()
    try:
        data = tmp / LAYOUT.data_dir
        ordered = sorted(cases, key=lambda c: c.case_id)
        for done, case in enumerate(ordered, start=1):
            _write(data / _case_path(done - 1, case.case_id), CaseFile(
                case_id=case.case_id, features=case.features, malignant=case.malignant,
            ).model_dump(mode="json"))
            if progress is not None:
                progress(done, len(cases))
        _write(data / LAYOUT.dataset_file, {
            "format": PREPARED_FORMAT, "version": 1, "contract": contract.model_dump(mode="json"),
            "n_cases": len(cases)})
        statistics: JsonObject = {
            "format": STATISTICS_FORMAT, "version": STATISTICS_VERSION, "n_cases": len(cases),
            "n_rejected": len(rejected), "contract_id": contract.format,
            "contract_version": contract.version, "n_features": len(contract.features)}
        _write(data / LAYOUT.statistics_file, statistics)
        manifest = build_manifest(data)
        (tmp / LAYOUT.manifest_file).write_bytes(manifest.to_bytes())
        accepted = tuple(c.case_id for c in cases)
        _write(tmp / REPORT_FILE, {
            "accepted": list(accepted),
            "rejected": [{"case": r.case, "reason": r.reason} for r in rejected]})
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _log.info("prepared %d cases (%d rejected) into %s", len(cases), len(rejected), out_dir)
    return Prepared(accepted, rejected, manifest.digest, statistics)


def statistics_of(out_dir: Path) -> JsonObject:
    """The public statistics of a prepared dataset; :class:`PreparationError` for a document of
    another version (version 1 counted malignant cases: prepare the dataset again)."""
    doc: JsonObject = json.loads((out_dir / LAYOUT.data_dir / LAYOUT.statistics_file).read_bytes())
    if doc.get("format") != STATISTICS_FORMAT or doc.get("version") != STATISTICS_VERSION:
        raise PreparationError(
            f"{LAYOUT.statistics_file} is {doc.get('format')!r} version {doc.get('version')!r}, "
            f"expected {STATISTICS_FORMAT!r} version {STATISTICS_VERSION} (version 1 counted "
            "malignant cases): prepare the dataset again")
    return doc
