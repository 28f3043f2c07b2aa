"""``pool.sealed`` (issue 27): a site's statistics encrypted under a key derived from its
dataset's DEK, the AAD binding run id and commitment. Whoever holds the DEK for that run and
commitment opens it; any other key, run, commitment or byte is refused, opaquely, before
anything is parsed."""

from __future__ import annotations

import hashlib

import pytest

from sealbench.crypto import streaming
from sealbench.crypto.envelope import DataKey
from sealbench.crypto.errors import IntegrityError
from sealbench.crypto.pool_statistics import (
    decrypt_statistics,
    encrypt_statistics,
    statistics_aad,
)

DOCUMENT = b'{"cases":[{"case_id":"c-1","label":1,"score":0.8125}],"format":"x"}'
COMMITMENT = "sha256:" + hashlib.sha256(DOCUMENT).hexdigest()
OTHER_COMMITMENT = "sha256:" + hashlib.sha256(b"another document").hexdigest()


@pytest.fixture
def dek() -> DataKey:
    return DataKey.generate()


def test_round_trip_under_the_dataset_dek(dek: DataKey) -> None:
    blob = encrypt_statistics(dek, "run-1", COMMITMENT, DOCUMENT)
    assert DOCUMENT not in blob and b"0.8125" not in blob
    assert decrypt_statistics(dek, "run-1", COMMITMENT, blob) == DOCUMENT
    # a copy of the same key (the aggregator's own unwrap of dek.wrapped) opens it too
    copy = DataKey.from_bytes(dek.secret_bytes())
    assert decrypt_statistics(copy, "run-1", COMMITMENT, blob) == DOCUMENT


def test_each_encryption_is_fresh(dek: DataKey) -> None:
    one = encrypt_statistics(dek, "run-1", COMMITMENT, DOCUMENT)
    two = encrypt_statistics(dek, "run-1", COMMITMENT, DOCUMENT)
    assert one != two
    assert decrypt_statistics(dek, "run-1", COMMITMENT, two) == DOCUMENT


def test_another_key_is_refused(dek: DataKey) -> None:
    blob = encrypt_statistics(dek, "run-1", COMMITMENT, DOCUMENT)
    with pytest.raises(IntegrityError):
        decrypt_statistics(DataKey.generate(), "run-1", COMMITMENT, blob)


def test_another_run_is_refused(dek: DataKey) -> None:
    """An object moved to (or named as) another run's statistics does not open."""
    blob = encrypt_statistics(dek, "run-1", COMMITMENT, DOCUMENT)
    with pytest.raises(IntegrityError):
        decrypt_statistics(dek, "run-2", COMMITMENT, blob)


def test_another_commitment_is_refused(dek: DataKey) -> None:
    """A stale object (sealed under an earlier commitment) does not open for the current one."""
    blob = encrypt_statistics(dek, "run-1", COMMITMENT, DOCUMENT)
    with pytest.raises(IntegrityError):
        decrypt_statistics(dek, "run-1", OTHER_COMMITMENT, blob)


@pytest.mark.parametrize("where", [0, 40, -17, -1])
def test_any_altered_byte_is_refused(dek: DataKey, where: int) -> None:
    blob = bytearray(encrypt_statistics(dek, "run-1", COMMITMENT, DOCUMENT))
    blob[where] ^= 0x01
    with pytest.raises(IntegrityError):
        decrypt_statistics(dek, "run-1", COMMITMENT, bytes(blob))


def test_truncated_object_is_refused(dek: DataKey) -> None:
    blob = encrypt_statistics(dek, "run-1", COMMITMENT, DOCUMENT)
    with pytest.raises(IntegrityError):
        decrypt_statistics(dek, "run-1", COMMITMENT, blob[:-1])


def test_the_derived_key_is_not_the_dek(dek: DataKey) -> None:
    """The DEK itself (what opens the dataset's own objects) does not open the statistics: the
    key is derived, so the two never share a key."""
    blob = encrypt_statistics(dek, "run-1", COMMITMENT, DOCUMENT)
    with pytest.raises(IntegrityError):
        streaming.decrypt_bytes(dek.secret_bytes(), blob, statistics_aad("run-1", COMMITMENT))


def test_refusal_names_nothing_secret(dek: DataKey) -> None:
    blob = encrypt_statistics(dek, "run-1", COMMITMENT, DOCUMENT)
    with pytest.raises(IntegrityError) as caught:
        decrypt_statistics(DataKey.generate(), "run-1", COMMITMENT, blob)
    text = str(caught.value)
    assert dek.secret_bytes().hex() not in text and "0.8125" not in text


def test_aad_binds_run_and_commitment() -> None:
    aad = statistics_aad("run-1", COMMITMENT)
    assert aad == (b'{"commitment":"' + COMMITMENT.encode()
                   + b'","purpose":"sealbench-pool-statistics-v1","run_id":"run-1"}')
    assert aad != statistics_aad("run-2", COMMITMENT)
    assert aad != statistics_aad("run-1", OTHER_COMMITMENT)
