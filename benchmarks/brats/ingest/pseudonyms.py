"""Case ids the hospital keeps the key to: study folder -> pseudonym, in a 0600 file on its side.

The file (``pseudonyms.json`` in the ingestion's work folder, ``sealbench/pseudonyms`` version 1)
maps each study folder's name and its Study Instance UID to the case id it was given
(``BraTS-GLI-00001-000``, ``-00002-``, ... in the order studies were first seen). It holds
identifiers (folder names are often the patient's name and date) and so is written 0600,
atomically, and never copied into a prepared case, a report, a log or a message: everything
past this module speaks pseudonyms only. A folder seen again gets the same id, so an interrupted
run resumes under the same names. The key is the folder's name: a folder renamed between runs
is a new case (its study UID is kept beside, for the hospital to trace it).
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from sealbench.crypto.files import write_private

from ..contract import BratsContract
from .errors import IngestError

__all__ = ["PSEUDONYM_FILE", "Pseudonyms"]

PSEUDONYM_FILE = "pseudonyms.json"
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class _Entry(BaseModel):
    model_config = _FROZEN

    folder: str
    study_uid: str
    case_id: str


class _File(BaseModel):
    model_config = _FROZEN

    format: Literal["sealbench/pseudonyms"] = "sealbench/pseudonyms"
    version: Literal[1] = 1
    entries: tuple[_Entry, ...] = ()


class Pseudonyms:
    """The hospital's pseudonym table in ``work_dir`` (read on open, written on each change)."""

    def __init__(self, work_dir: Path, contract: BratsContract) -> None:
        self._path = work_dir / PSEUDONYM_FILE
        self._contract = contract
        self._entries: list[_Entry] = []
        if self._path.exists():
            mode = stat.S_IMODE(self._path.stat().st_mode)
            if mode & 0o077:
                raise IngestError(f"{self._path} is readable by others (mode {mode:o}); it holds "
                                  "patient identifiers: chmod 600 it")
            try:
                self._entries = list(_File.model_validate_json(self._path.read_bytes()).entries)
            except ValidationError as exc:
                raise IngestError(f"{self._path} is not a pseudonym file") from exc

    def case_id(self, folder: str, study_uid: str) -> str:
        """The pseudonym of a study (a new one, saved at once, the first time)."""
        for entry in self._entries:
            if entry.folder == folder:
                return entry.case_id
        pattern = self._contract.case_id_pattern
        prefix = pattern.split(r"\d")[0]
        case_id = f"{prefix}{len(self._entries) + 1:05d}-000"
        if not self._contract.is_case_id(case_id):
            raise IngestError(f"the contract's case ids ({pattern}) are not numbered ones")
        self._entries.append(_Entry(folder=folder, study_uid=study_uid, case_id=case_id))
        self._save()
        return case_id

    def _save(self) -> None:
        body = _File(entries=tuple(self._entries)).model_dump(mode="json")
        write_private(self._path, (json.dumps(body, indent=1) + "\n").encode(), mode=0o600)
