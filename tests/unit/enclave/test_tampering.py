"""Every substitution an attacker with write access to a bucket could try fails closed: the run
aborts with an integrity (or storage) error, and no result is uploaded (only the write check and
the failure record are at the destination)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sealbench.contract.errors import AssetIntegrityError, StorageFailure
from sealbench.contract.result import (
    FAILURE_OBJECT,
    FAILURE_TOKEN_OBJECT,
    WRITE_CHECK_OBJECT,
    FailureRecord,
)
from sealbench.crypto.envelope import WrappedKey
from sealbench.platforms import LocalBlobStore


def _case_objects(world: Any) -> list[Path]:
    return sorted((world.data_bucket.root / "cases").iterdir())


def _flip(path: Path, offset: int = -20) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def _fails_closed(world: Any, error: type[Exception] = AssetIntegrityError) -> FailureRecord:
    with pytest.raises(error):
        world.run()
    assert set(LocalBlobStore(world.results()).list()) == {
        WRITE_CHECK_OBJECT, FAILURE_OBJECT, FAILURE_TOKEN_OBJECT}  # attested: after the token
    record = FailureRecord.from_bytes((world.results() / FAILURE_OBJECT).read_bytes())
    for folder in (world.prepared / "data" / "cases").iterdir():
        assert folder.name not in record.reason  # no case id, even in the failure record
    return record


def test_tampered_manifest_fails_closed(world: Any) -> None:
    _flip(world.data_bucket.root / "manifest.sealed")
    _fails_closed(world)


def test_tampered_case_object_fails_closed(world: Any) -> None:
    _flip(_case_objects(world)[1], offset=100)
    record = _fails_closed(world)
    assert "case object" in record.reason


def test_truncated_case_object_fails_closed(world: Any) -> None:
    victim = _case_objects(world)[0]
    victim.write_bytes(victim.read_bytes()[:-1])
    _fails_closed(world)


def test_tampered_weights_fail_closed(world: Any) -> None:
    _flip(world.model_bucket.root / "weights.sealed", offset=60)
    _fails_closed(world)


def test_tampered_wrapped_dataset_key_fails_closed(world: Any) -> None:
    path = world.data_bucket.root / "dek.wrapped"
    record = WrappedKey.from_bytes(path.read_bytes())
    flipped = bytearray(record.ciphertext)
    flipped[-1] ^= 0x01
    path.write_bytes(record.model_copy(update={"ciphertext": bytes(flipped)}).to_bytes())
    _fails_closed(world)


def test_wrapped_key_of_another_asset_fails_closed(world: Any) -> None:
    (world.data_bucket.root / "dek.wrapped").write_bytes(
        (world.model_bucket.root / "dek.wrapped").read_bytes()
    )
    _fails_closed(world)


def test_swapped_case_objects_fail_closed(world: Any) -> None:
    first, second = _case_objects(world)[:2]
    a, b = first.read_bytes(), second.read_bytes()
    first.write_bytes(b)
    second.write_bytes(a)
    _fails_closed(world)


def test_case_object_from_another_dataset_fails_closed(
    world: Any, world_factory: Any, tmp_path: Path
) -> None:
    other = world_factory(tmp_path / "other", prepared=world.prepared)  # same cases, other key
    victim = _case_objects(world)[0]
    victim.write_bytes(sorted((other.data_bucket.root / "cases").iterdir())[0].read_bytes())
    _fails_closed(world)


def test_manifest_of_another_dataset_fails_closed(
    world: Any, world_factory: Any, tmp_path: Path
) -> None:
    other = world_factory(tmp_path / "other", seeds=(7, 8))
    (world.data_bucket.root / "manifest.sealed").write_bytes(
        (other.data_bucket.root / "manifest.sealed").read_bytes()
    )
    _fails_closed(world)


def test_weights_of_another_model_fail_closed(
    world: Any, world_factory: Any, tmp_path: Path
) -> None:
    other = world_factory(tmp_path / "other", prepared=world.prepared)
    (world.model_bucket.root / "weights.sealed").write_bytes(
        (other.model_bucket.root / "weights.sealed").read_bytes()
    )
    _fails_closed(world)


def test_deleted_case_object_fails_closed(world: Any) -> None:
    _case_objects(world)[2].unlink()
    _fails_closed(world, StorageFailure)


def test_expected_data_digest_of_another_dataset_denies_the_key(world: Any) -> None:
    from sealbench.crypto.digest import sha256_digest

    spec = world.with_spec(data_digest=sha256_digest(b"some other dataset"))
    with pytest.raises(AssetIntegrityError, match="dataset key could not be unwrapped"):
        world.run(spec)
