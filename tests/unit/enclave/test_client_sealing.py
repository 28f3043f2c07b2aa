"""The sealing library the enclave reads from: one object per case, resumable with the same key
after an interruption, never reusing an object that does not hold the right content, and the
result opener refusing altered or swapped results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sealbench.client.assets.store import SealingError, seal_dataset
from sealbench.client.runs.result_open import ResultVerificationError, download_result, open_result
from sealbench.contract.result import SEALED_OBJECT
from sealbench.crypto.envelope import InsecureInMemoryKeyWrapper
from sealbench.crypto.sealing import generate_recipient_key
from sealbench.platforms import LocalBlobStore, StorageError

KEY = "projects/p/locations/global/keyRings/r/cryptoKeys/k"


class _DiesAfter(LocalBlobStore):
    """A bucket whose connection drops after ``n`` uploads."""

    def __init__(self, root: Path, n: int) -> None:
        super().__init__(root)
        self.left = n

    def put_bytes(self, name: str, data: bytes) -> None:
        if self.left == 0:
            raise StorageError("connection reset")
        self.left -= 1
        super().put_bytes(name, data)


def test_one_object_per_case_folder(shared_prepared: Path, tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "b")
    report = seal_dataset(
        shared_prepared,
        asset_id="ds",
        key_wrapper=InsecureInMemoryKeyWrapper(KEY),
        store=store,
        prefix="x",
    )
    names = list(store.list("x/"))
    assert len([n for n in names if n.startswith("x/cases/")]) == 3
    assert len([n for n in names if n.startswith("x/meta/")]) == 1
    assert report.objects == 5 and report.uploaded == 5 and not report.resumed_key


def test_interrupted_seal_resumes_with_the_same_key(shared_prepared: Path, tmp_path: Path) -> None:
    wrapper = InsecureInMemoryKeyWrapper(KEY)
    dying = _DiesAfter(tmp_path / "b", 3)  # dek.wrapped + two objects
    with pytest.raises(SealingError):
        seal_dataset(shared_prepared, asset_id="ds", key_wrapper=wrapper, store=dying, prefix="")
    before = {n: (dying.root / n).read_bytes() for n in dying.list()}
    store = LocalBlobStore(tmp_path / "b")
    report = seal_dataset(
        shared_prepared, asset_id="ds", key_wrapper=wrapper, store=store, prefix=""
    )
    assert report.resumed_key and report.reused == 2 and report.uploaded == 3
    for name, data in before.items():
        assert (store.root / name).read_bytes() == data  # kept, not re-encrypted


def test_resume_replaces_an_object_with_wrong_content(
    shared_prepared: Path, tmp_path: Path
) -> None:
    wrapper = InsecureInMemoryKeyWrapper(KEY)
    store = LocalBlobStore(tmp_path / "b")
    seal_dataset(shared_prepared, asset_id="ds", key_wrapper=wrapper, store=store, prefix="")
    victim = sorted((store.root / "cases").iterdir())[0]
    victim.write_bytes(b"garbage")
    report = seal_dataset(
        shared_prepared, asset_id="ds", key_wrapper=wrapper, store=store, prefix=""
    )
    assert report.uploaded == 1 and report.reused == 4
    assert victim.read_bytes() != b"garbage"


def test_prefix_holding_another_assets_key_refused(shared_prepared: Path, tmp_path: Path) -> None:
    wrapper = InsecureInMemoryKeyWrapper(KEY)
    store = LocalBlobStore(tmp_path / "b")
    seal_dataset(shared_prepared, asset_id="ds", key_wrapper=wrapper, store=store, prefix="")
    with pytest.raises(SealingError, match="another asset"):
        seal_dataset(
            shared_prepared, asset_id="other-ds", key_wrapper=wrapper, store=store, prefix=""
        )


def _result(world: Any) -> Any:
    world.run()
    return LocalBlobStore(world.results())


def test_altered_summary_refused_by_the_owner(world: Any) -> None:
    store = _result(world)
    objects = download_result(store, "")
    altered = objects.summary.replace(b'"n_cases":3', b'"n_cases":4')  # published or withheld
    assert altered != objects.summary
    with pytest.raises(ResultVerificationError, match="nonce"):
        open_result(type(objects)(altered, objects.sealed, objects.token), world.recipient)


def test_sealed_result_of_another_run_refused(
    world: Any, world_factory: Any, tmp_path: Path
) -> None:
    store = _result(world)
    other = world_factory(tmp_path / "other", prepared=world.prepared)
    other_store = _result(other)
    objects = download_result(store, "")
    swapped = type(objects)(
        objects.summary, other_store.get_bytes(SEALED_OBJECT, 1 << 20), objects.token
    )
    with pytest.raises(ResultVerificationError, match="nonce"):
        open_result(swapped, world.recipient)


def test_result_does_not_open_with_another_key(world: Any) -> None:
    objects = download_result(_result(world), "")
    with pytest.raises(ResultVerificationError, match="does not open"):
        open_result(objects, generate_recipient_key())
