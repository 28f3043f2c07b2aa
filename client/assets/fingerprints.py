"""Keyed case fingerprints: how a data owner's client tells the registry which of its datasets
hold the same patients, so that they share one privacy budget (issue 40, "One budget per set
of patients"), without telling it anything about a patient.

**Content digest of a case.** The prepared dataset's manifest lists each file's SHA-256; the
plug-in's layout groups the files under ``cases/`` into cases. A case's content digest is the
SHA-256 of the sorted SHA-256s of its files (``sealbench/case-content`` version 1: the tag,
then one ``sha256:<hex>`` a line), so neither file names nor case ids enter it, nor the order
of the files. A prepared case document in JSON that names its own id (WDBC's ``case.json``:
``{"case_id", "features", "malignant"}``) is hashed without its ``case_id`` member, as
canonical JSON: an id is a label, not content. The same cases prepared again, under other ids
or file names, give the same digests; one byte of one value changed gives another.

**Fingerprint.** HMAC-SHA256 of the content digest under the owner's **fingerprint key**: 32
random bytes, ``case-fingerprint.key`` in the profile's secrets directory, mode 0600, made on
first use (:func:`fingerprint_key`). The registry cannot invert a fingerprint nor test a guess
of a case's content without the key; two owners' fingerprints of one patient are unrelated.
Registration sends the fingerprints sorted (their order says nothing), one per case.

**Back the key up** with the result key: with another key the same cases give other
fingerprints, and a dataset registered with it gets a budget of its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

from sealbench.client.errors import ConfigError
from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.digest import sha256_digest
from sealbench.crypto.errors import CryptoError
from sealbench.crypto.files import write_private
from sealbench.crypto.manifest import MAX_MANIFEST_BYTES, Manifest

if TYPE_CHECKING:
    from sealbench.benchmarks.interface import Benchmark, DatasetLayout, PreparedLayout

__all__ = [
    "CONTENT_TAG",
    "KEY_BYTES",
    "KEY_FILE",
    "case_content_digest",
    "case_fingerprints",
    "fingerprint",
    "fingerprint_key",
]

KEY_FILE: Final = "case-fingerprint.key"
KEY_BYTES: Final = 32
#: First line of the text a case's content digest hashes (its format and version).
CONTENT_TAG: Final = b"sealbench/case-content 1\n"
#: The member of a JSON case document that names the case (left out of its content).
_ID_MEMBER: Final = "case_id"
#: Largest JSON case document read to leave its id out (a bigger one is hashed as it is).
_MAX_JSON_CASE: Final = 4 << 20
_KEY_HINT = ("restore case-fingerprint.key from your backup (32 bytes, mode 0600); a new key "
             "would give the cases you registered before other fingerprints")


def fingerprint_key(directory: Path) -> bytes:
    """The owner's fingerprint key in ``directory`` (the profile's secrets directory), made on
    first use: 32 random bytes written atomically, mode 0600, never replacing one that exists
    (two registrations racing both end up with the one written first)."""
    path = directory / KEY_FILE
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(FileExistsError):
        write_private(path, secrets.token_bytes(KEY_BYTES), overwrite=False)
    return _read_key(path)


def _read_key(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ConfigError(f"cannot read the case fingerprint key {path}: {exc.strerror}",
                          hint=_KEY_HINT) from exc
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{path} is not a regular file", hint=_KEY_HINT)
        if st.st_mode & 0o077:
            raise ConfigError(f"the case fingerprint key {path} is readable by others "
                              f"(mode {stat.S_IMODE(st.st_mode):o})",
                              hint=f"chmod 600 {path}")
        data = handle.read(KEY_BYTES + 1)
    if len(data) != KEY_BYTES:
        raise ConfigError(f"{path} is not a case fingerprint key ({KEY_BYTES} bytes, it holds "
                          f"{len(data)})", hint=_KEY_HINT)
    return data


def case_content_digest(file_digests: Iterable[str]) -> bytes:
    """The content digest of a case whose files have the content digests ``file_digests``
    (``sha256:<hex>`` each), whatever their names and order."""
    lines = sorted(file_digests)
    return hashlib.sha256(CONTENT_TAG + "".join(f"{d}\n" for d in lines).encode()).digest()


def fingerprint(key: bytes, content_digest: bytes) -> str:
    """A case's fingerprint: HMAC-SHA256 of its content digest under ``key``, as 64 hex."""
    return hmac.new(key, content_digest, hashlib.sha256).hexdigest()


def _file_digest(data_dir: Path, manifest: Manifest, path: str) -> str:
    """The content digest of one file of a case: the manifest's SHA-256, or for a JSON case
    document that names its own id, the SHA-256 of its canonical JSON without the id (the
    file read is checked against the manifest first)."""
    entry = manifest.entry(path)
    if not path.endswith(".json") or entry.size > _MAX_JSON_CASE:
        return entry.sha256
    try:
        with (data_dir / path).open("rb") as handle:
            data = handle.read(entry.size + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {data_dir / path}: {exc.strerror}") from exc
    try:
        manifest.verify(path, data)
    except CryptoError as exc:
        raise ConfigError(f"{data_dir / path} is not what the dataset's manifest lists: {exc}",
                          hint="prepare the dataset again") from exc
    try:
        doc = json.loads(data)
    except ValueError:
        return entry.sha256
    if not isinstance(doc, dict) or _ID_MEMBER not in doc:
        return entry.sha256
    return sha256_digest(canonical_json({k: v for k, v in doc.items() if k != _ID_MEMBER}))


def _candidates(plugin: Benchmark | None) -> Iterator[Benchmark]:
    """The plug-ins that may read the dataset's layout: ``plugin``, or without one every
    installed plug-in on its own contract and on each definition it ships."""
    if plugin is not None:
        yield plugin
        return
    from sealbench.benchmarks.interface import BenchmarkError
    from sealbench.client.assets.prepare import definition_plugin
    from sealbench.client.plugins import installed, installed_pins, shipped_definitions

    for ref in installed_pins():
        try:
            yield installed(ref)
        except BenchmarkError:
            continue
    for name in sorted(shipped_definitions()):
        try:
            yield definition_plugin(name)
        except (ConfigError, BenchmarkError):
            continue


def _grouped(
    plugin: Benchmark | None, dataset_json: bytes, paths: list[str]
) -> Mapping[str, tuple[str, ...]]:
    from sealbench.benchmarks.interface import BenchmarkError

    reasons: list[str] = []
    for candidate in _candidates(plugin):
        try:
            layout: DatasetLayout = candidate.open_dataset(dataset_json)
            return layout.group(paths)
        except BenchmarkError as exc:
            reasons.append(f"{candidate.ref}: {exc}")
    if plugin is not None:
        raise ConfigError(f"the prepared dataset's cases cannot be told apart: {reasons[0]}",
                          hint="prepare the dataset again")
    raise ConfigError(
        "no installed benchmark plug-in reads this prepared dataset's cases, so they cannot "
        "be fingerprinted (the registry needs one fingerprint per case to keep one privacy "
        "budget per set of patients)",
        hint="register it with --benchmark, naming the benchmark it was prepared for")


def case_fingerprints(
    prepared: Path, key: bytes, plugin: Benchmark | None = None,
    layout: PreparedLayout | None = None, *, n_cases: int | None = None,
) -> list[str]:
    """The sorted fingerprints (see the module docstring) of every case of the prepared dataset
    in ``prepared``, grouped by ``plugin``'s layout (None: the installed plug-in that reads it);
    :class:`ConfigError` when its manifest, dataset document or cases cannot be read, or when
    they are not ``n_cases`` cases."""
    from sealbench.benchmarks.interface import PreparedLayout

    where = layout or (plugin.layout if plugin is not None else PreparedLayout())
    data_dir = prepared / where.data_dir
    try:
        with (prepared / where.manifest_file).open("rb") as handle:
            manifest = Manifest.from_bytes(handle.read(MAX_MANIFEST_BYTES + 1))
        dataset_json = (data_dir / where.dataset_file).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{prepared} is not a prepared dataset ({exc.strerror}: "
                          f"{exc.filename})",
                          hint="pass the directory written by 'sealbench dataset prepare'"
                          ) from exc
    except CryptoError as exc:
        raise ConfigError(f"{prepared / where.manifest_file} is not a valid manifest: {exc}"
                          ) from exc
    prefix = where.cases_dir + "/"
    paths = [e.path for e in manifest.entries if e.path.startswith(prefix)]
    grouped = _grouped(plugin, dataset_json, paths)
    if n_cases is not None and len(grouped) != n_cases:
        raise ConfigError(f"the prepared dataset states {n_cases} cases but its manifest holds "
                          f"{len(grouped)}", hint="prepare the dataset again")
    try:
        prints = [fingerprint(key, case_content_digest(
            _file_digest(data_dir, manifest, path) for path in files))
            for files in grouped.values()]
    except CryptoError as exc:
        raise ConfigError(f"{prepared}: {exc}", hint="prepare the dataset again") from exc
    return sorted(prints)
