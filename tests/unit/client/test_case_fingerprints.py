"""Keyed case fingerprints (issue 40, "One budget per set of patients"), on real prepared
datasets of the shipped plug-ins: the same cases prepared again under other case ids and file
names give the same fingerprints; one value changed changes that case's; another key gives
unrelated ones; the key is made once, 0600, and a key anyone else can read, or of the wrong
size, is refused."""

from __future__ import annotations

import csv
import os
import shutil
import stat
from pathlib import Path

import pytest

from sealbench.benchmarks.interface import Benchmark
from sealbench.benchmarks.registry import PluginRegistry
from sealbench.client.assets.fingerprints import (
    KEY_FILE,
    case_fingerprints,
    fingerprint_key,
)
from sealbench.client.assets.prepare import dataset_registration, definition_plugin, prepared_digest
from sealbench.client.errors import ConfigError
from sealbench.crypto.digest import sha256_digest

KEY = bytes(range(32))


@pytest.fixture(scope="module")
def wdbc() -> Benchmark:
    return PluginRegistry().get("wdbc")


def _wdbc_raw(plugin: Benchmark, folder: Path, cases: int = 12) -> Path:
    list(plugin.write_demo_dataset(folder, cases, seed=5))
    return folder / "cases.csv"


def _rewrite(source: Path, target: Path, *, ids: dict[str, str] | None = None,
             value: tuple[int, str] | None = None) -> None:
    """``source``'s CSV under ``target``, with case ids renamed (``ids``) or one row's radius
    set (``value``: row index, new text)."""
    with source.open(newline="") as handle:
        rows = list(csv.reader(handle))
    for i, row in enumerate(rows[1:]):
        if ids is not None:
            row[0] = ids[row[0]]
        if value is not None and i == value[0]:
            row[2] = value[1]
    target.mkdir(parents=True)
    with (target / "cases.csv").open("w", newline="") as handle:
        csv.writer(handle).writerows(rows)


def _prepared(plugin: Benchmark, raw: Path, out: Path) -> Path:
    plugin.prepare(raw, out)
    return out


def test_wdbc_case_ids_do_not_matter_content_does(wdbc: Benchmark, tmp_path: Path) -> None:
    csv_file = _wdbc_raw(wdbc, tmp_path / "raw")
    first = _prepared(wdbc, tmp_path / "raw", tmp_path / "p1")
    with csv_file.open(newline="") as handle:
        old_ids = [row[0] for row in list(csv.reader(handle))[1:]]
    renamed = {old: f"renamed-{i:03d}" for i, old in enumerate(reversed(old_ids))}
    _rewrite(csv_file, tmp_path / "raw-renamed", ids=renamed)
    again = _prepared(wdbc, tmp_path / "raw-renamed", tmp_path / "p2")
    _rewrite(csv_file, tmp_path / "raw-changed", value=(3, "17.01"))
    changed = _prepared(wdbc, tmp_path / "raw-changed", tmp_path / "p3")

    prints = case_fingerprints(first, KEY, wdbc, n_cases=12)
    assert len(prints) == 12 == len(set(prints)) and prints == sorted(prints)
    # other ids and file names: another dataset digest, the same cases
    assert prepared_digest(again) != prepared_digest(first)
    assert case_fingerprints(again, KEY, wdbc) == prints
    # one value of one case changed: that case's fingerprint only
    assert len(set(case_fingerprints(changed, KEY, wdbc)) & set(prints)) == 11
    # another owner's key: nothing in common
    assert not set(case_fingerprints(first, bytes(32), wdbc)) & set(prints)


def test_brats_case_ids_and_file_names_do_not_matter(tmp_path: Path) -> None:
    plugin = definition_plugin("brats-small")
    raw = tmp_path / "raw"
    ids = list(plugin.write_demo_dataset(raw, 2, seed=9))
    first = _prepared(plugin, raw, tmp_path / "p1")
    renamed_raw = tmp_path / "raw-renamed"
    for i, case_id in enumerate(ids):
        new_id = f"BraTS-GLI-{90000 + i:05d}-001"
        (renamed_raw / new_id).mkdir(parents=True)
        for part in (raw / case_id).iterdir():
            shutil.copyfile(part, renamed_raw / new_id / part.name.replace(case_id, new_id))
    again = _prepared(plugin, renamed_raw, tmp_path / "p2")
    assert prepared_digest(again) != prepared_digest(first)
    prints = case_fingerprints(first, KEY, plugin, n_cases=2)
    assert len(set(prints)) == 2 and case_fingerprints(again, KEY, plugin) == prints


def test_registration_finds_the_plugin_and_sends_one_fingerprint_per_case(
    wdbc: Benchmark, tmp_path: Path
) -> None:
    """Without --benchmark the installed plug-in that reads the dataset groups its cases (here
    WDBC, and BraTS on its small demo definition)."""
    _wdbc_raw(wdbc, tmp_path / "raw")
    prepared = _prepared(wdbc, tmp_path / "raw", tmp_path / "prepared")
    body = dataset_registration(prepared, "site", sha256_digest(b"r"), None,
                                fingerprint_key=KEY)
    assert body.case_fingerprints == case_fingerprints(prepared, KEY, wdbc)
    assert len(body.case_fingerprints) == body.case_count == 12
    brats = definition_plugin("brats-small")
    list(brats.write_demo_dataset(tmp_path / "braw", 1, seed=3))
    small = _prepared(brats, tmp_path / "braw", tmp_path / "bprepared")
    body = dataset_registration(small, "mri", sha256_digest(b"r"), None, fingerprint_key=KEY)
    assert body.case_fingerprints is not None and len(body.case_fingerprints) == 1
    # no key: no fingerprints (the field stays out of the request)
    assert dataset_registration(small, "mri", sha256_digest(b"r"), None).case_fingerprints is None


def test_a_file_that_is_not_what_the_manifest_lists_refused(
    wdbc: Benchmark, tmp_path: Path
) -> None:
    _wdbc_raw(wdbc, tmp_path / "raw")
    prepared = _prepared(wdbc, tmp_path / "raw", tmp_path / "prepared")
    case = next((prepared / "data" / "cases").rglob("*.json"))
    case.write_bytes(case.read_bytes() + b" ")
    with pytest.raises(ConfigError, match="not what the dataset's manifest lists"):
        case_fingerprints(prepared, KEY, wdbc)


def test_case_count_must_match(wdbc: Benchmark, tmp_path: Path) -> None:
    _wdbc_raw(wdbc, tmp_path / "raw")
    prepared = _prepared(wdbc, tmp_path / "raw", tmp_path / "prepared")
    with pytest.raises(ConfigError, match="states 13 cases but its manifest holds 12"):
        case_fingerprints(prepared, KEY, wdbc, n_cases=13)


def test_fingerprint_key_made_once_private(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    key = fingerprint_key(secrets)
    path = secrets / KEY_FILE
    assert len(key) == 32 and path.read_bytes() == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert fingerprint_key(secrets) == key  # never replaced
    assert fingerprint_key(tmp_path / "other") != key


def test_fingerprint_key_others_can_read_refused(tmp_path: Path) -> None:
    key = fingerprint_key(tmp_path)
    os.chmod(tmp_path / KEY_FILE, 0o644)
    with pytest.raises(ConfigError, match="readable by others") as info:
        fingerprint_key(tmp_path)
    assert "chmod 600" in (info.value.hint or "")
    assert key.hex() not in str(info.value)


def test_truncated_fingerprint_key_refused_not_replaced(tmp_path: Path) -> None:
    path = tmp_path / KEY_FILE
    path.write_bytes(b"short")
    path.chmod(0o600)
    with pytest.raises(ConfigError, match="not a case fingerprint key") as info:
        fingerprint_key(tmp_path)
    assert "backup" in (info.value.hint or "") and path.read_bytes() == b"short"
