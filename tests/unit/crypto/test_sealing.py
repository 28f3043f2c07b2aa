"""Result sealing: envelope round trips on both paths, and every way of tampering with or
misaddressing a sealed result failing closed."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from sealbench.crypto import sealing
from sealbench.crypto.errors import InsecureKeyFileError, IntegrityError, KeyFormatError

IMAGE = "sha256:" + "ab" * 32
INFO = sealing.result_info("run-1", "brats-2024", IMAGE)


@pytest.fixture(scope="module")
def key() -> X25519PrivateKey:
    return sealing.generate_recipient_key()


@pytest.fixture(scope="module")
def large() -> bytes:
    return os.urandom(sealing.DIRECT_THRESHOLD + 3 * 1024 * 1024 + 17)


# -- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 1000, sealing.DIRECT_THRESHOLD])
def test_direct_round_trip(key: X25519PrivateKey, size: int) -> None:
    plaintext = os.urandom(size)
    sealed = sealing.seal(plaintext, key.public_key(), INFO)
    assert sealed[:6] == b"SBSE\x01\x01"
    assert len(sealed) == 6 + 32 + size + 16
    assert sealing.open_sealed(sealed, key, INFO) == plaintext


def test_large_payload_takes_hybrid_path(key: X25519PrivateKey, large: bytes) -> None:
    sealed = sealing.seal(large, key.public_key(), INFO)
    assert sealed[:6] == b"SBSE\x01\x02"
    assert sealing.open_sealed(sealed, key, INFO) == large


def test_threshold_plus_one_is_hybrid(key: X25519PrivateKey) -> None:
    plaintext = os.urandom(sealing.DIRECT_THRESHOLD + 1)
    sealed = sealing.seal(plaintext, key.public_key(), INFO)
    assert sealed[5] == sealing.MODE_HYBRID
    assert sealing.open_sealed(sealed, key, INFO) == plaintext


def test_sealing_is_randomised(key: X25519PrivateKey) -> None:
    a = sealing.seal(b"same", key.public_key(), INFO)
    b = sealing.seal(b"same", key.public_key(), INFO)
    assert a != b


# -- attacks on the direct path ----------------------------------------------------------------


def test_wrong_key_rejected(key: X25519PrivateKey) -> None:
    sealed = sealing.seal(b"per-case dice", key.public_key(), INFO)
    with pytest.raises(IntegrityError):
        sealing.open_sealed(sealed, sealing.generate_recipient_key(), INFO)


def test_wrong_info_rejected(key: X25519PrivateKey) -> None:
    sealed = sealing.seal(b"per-case dice", key.public_key(), INFO)
    other_run = sealing.result_info("run-2", "brats-2024", IMAGE)
    with pytest.raises(IntegrityError):
        sealing.open_sealed(sealed, key, other_run)


@pytest.mark.parametrize("offset", [6, 6 + 31, 6 + 32, -1])
def test_tampered_enc_or_ciphertext_rejected(key: X25519PrivateKey, offset: int) -> None:
    sealed = bytearray(sealing.seal(b"per-case dice", key.public_key(), INFO))
    sealed[offset] ^= 0x01
    with pytest.raises(IntegrityError):
        sealing.open_sealed(bytes(sealed), key, INFO)


@pytest.mark.parametrize("keep", [6, 7, 37, 38, 53, 54])
def test_truncated_envelope_rejected(key: X25519PrivateKey, keep: int) -> None:
    sealed = sealing.seal(b"per-case dice", key.public_key(), INFO)
    with pytest.raises(IntegrityError):
        sealing.open_sealed(sealed[:keep], key, INFO)


def test_trailing_garbage_rejected(key: X25519PrivateKey) -> None:
    sealed = sealing.seal(b"per-case dice", key.public_key(), INFO)
    with pytest.raises(IntegrityError):
        sealing.open_sealed(sealed + b"\x00", key, INFO)


@pytest.mark.parametrize("prefix", [b"", b"SBS", b"XXXX\x01\x01", b"SBSE"])
def test_not_an_envelope_rejected(key: X25519PrivateKey, prefix: bytes) -> None:
    with pytest.raises(KeyFormatError):
        sealing.open_sealed(prefix, key, INFO)


def test_unknown_version_rejected(key: X25519PrivateKey) -> None:
    sealed = bytearray(sealing.seal(b"x", key.public_key(), INFO))
    sealed[4] = 2
    with pytest.raises(KeyFormatError, match="version"):
        sealing.open_sealed(bytes(sealed), key, INFO)


def test_unknown_mode_rejected(key: X25519PrivateKey) -> None:
    sealed = bytearray(sealing.seal(b"x", key.public_key(), INFO))
    sealed[5] = 7
    with pytest.raises(KeyFormatError, match="mode"):
        sealing.open_sealed(bytes(sealed), key, INFO)


def test_mode_byte_swapped_rejected(key: X25519PrivateKey) -> None:
    """The header is bound into the HPKE info: relabelling direct as hybrid cannot open."""
    sealed = bytearray(sealing.seal(os.urandom(200), key.public_key(), INFO))
    sealed[5] = sealing.MODE_HYBRID
    with pytest.raises(IntegrityError):
        sealing.open_sealed(bytes(sealed), key, INFO)


# -- attacks on the hybrid path ----------------------------------------------------------------


@pytest.mark.parametrize("offset", [6, 6 + 40, 6 + 80, 6 + 80 + 40 + 5, -1])
def test_hybrid_tampering_rejected(key: X25519PrivateKey, large: bytes, offset: int) -> None:
    sealed = bytearray(sealing.seal(large, key.public_key(), INFO))
    sealed[offset] ^= 0x80
    with pytest.raises(IntegrityError):
        sealing.open_sealed(bytes(sealed), key, INFO)


def test_hybrid_truncated_rejected(key: X25519PrivateKey, large: bytes) -> None:
    sealed = sealing.seal(large, key.public_key(), INFO)
    for keep in (86, 100, 6 + 80 + 1024 * 1024, len(sealed) - 1):
        with pytest.raises(IntegrityError):
            sealing.open_sealed(sealed[:keep], key, INFO)


def test_hybrid_wrong_info_and_key_rejected(key: X25519PrivateKey, large: bytes) -> None:
    sealed = sealing.seal(large, key.public_key(), INFO)
    with pytest.raises(IntegrityError):
        other_image = sealing.result_info("run-1", "brats-2024", "sha256:" + "cd" * 32)
        sealing.open_sealed(sealed, key, other_image)
    with pytest.raises(IntegrityError):
        sealing.open_sealed(sealed, sealing.generate_recipient_key(), INFO)


def test_hybrid_payload_key_of_wrong_length_rejected(key: X25519PrivateKey) -> None:
    """A forger who HPKE-wraps a 16-byte payload key (valid HPKE!) gets no further."""
    header = b"SBSE\x01\x02"
    short_key = sealing.hpke_encrypt(b"k" * 16, key.public_key(), header + INFO)
    forged = header + short_key + b"\x00" * 200
    with pytest.raises(IntegrityError):
        sealing.open_sealed(forged, key, INFO)


# -- result_info ------------------------------------------------------------------------------


def test_result_info_is_canonical_and_binds_every_field() -> None:
    assert INFO == (
        b'{"benchmark_id":"brats-2024","image_digest":"sha256:' + b"ab" * 32 + b'",'
        b'"purpose":"sealbench-result-v1","run_id":"run-1"}'
    )
    assert sealing.result_info("run-1", "other", IMAGE) != INFO
    with pytest.raises(ValueError):
        sealing.result_info("run-1", "brats-2024", "latest")
    with pytest.raises(ValueError):
        sealing.result_info("", "brats-2024", IMAGE)


# -- keys ---------------------------------------------------------------------------------------


def test_public_key_serialisations_round_trip(key: X25519PrivateKey) -> None:
    public = key.public_key()
    raw = sealing.public_key_to_raw(public)
    assert len(raw) == 32
    assert sealing.public_key_to_raw(sealing.public_key_from_raw(raw)) == raw
    pem = sealing.public_key_to_pem(public)
    assert pem.startswith(b"-----BEGIN PUBLIC KEY-----")
    assert sealing.public_key_to_raw(sealing.public_key_from_pem(pem)) == raw
    assert sealing.public_key_digest(public) == "sha256:" + hashlib.sha256(raw).hexdigest()


def test_foreign_key_types_rejected() -> None:
    ed = ed25519.Ed25519PrivateKey.generate()
    pem = ed.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with pytest.raises(KeyFormatError):
        sealing.public_key_from_pem(pem)
    with pytest.raises(KeyFormatError):
        sealing.public_key_from_pem(b"not pem")
    with pytest.raises(KeyFormatError):
        sealing.public_key_from_raw(b"\x00" * 31)
    with pytest.raises(KeyFormatError):
        sealing.seal(b"x", ed.public_key(), INFO)  # type: ignore[arg-type]


def test_saved_private_key_is_owner_only(tmp_path: Path, key: X25519PrivateKey) -> None:
    old = os.umask(0)
    try:
        path = tmp_path / "result.key"
        sealing.save_private_key(path, key)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    loaded = sealing.load_private_key(path)
    assert sealing.public_key_to_raw(loaded.public_key()) == sealing.public_key_to_raw(
        key.public_key()
    )
    assert list(tmp_path.iterdir()) == [path], "no temporary file left behind"


def test_existing_key_never_silently_replaced(tmp_path: Path, key: X25519PrivateKey) -> None:
    path = tmp_path / "result.key"
    sealing.save_private_key(path, key)
    before = path.read_bytes()
    with pytest.raises(FileExistsError):
        sealing.save_private_key(path, sealing.generate_recipient_key())
    assert path.read_bytes() == before
    assert list(tmp_path.iterdir()) == [path]
    sealing.save_private_key(path, sealing.generate_recipient_key(), overwrite=True)
    assert path.read_bytes() != before
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660, 0o610, 0o601])
def test_group_or_world_readable_key_refused(
    tmp_path: Path, key: X25519PrivateKey, mode: int
) -> None:
    path = tmp_path / "result.key"
    sealing.save_private_key(path, key)
    path.chmod(mode)
    with pytest.raises(InsecureKeyFileError, match="chmod 600"):
        sealing.load_private_key(path)


def test_passphrase_protected_key(tmp_path: Path, key: X25519PrivateKey) -> None:
    path = tmp_path / "result.key"
    sealing.save_private_key(path, key, passphrase=b"correct horse")
    assert b"ENCRYPTED" in path.read_bytes()
    loaded = sealing.load_private_key(path, passphrase=b"correct horse")
    assert sealing.public_key_digest(loaded.public_key()) == sealing.public_key_digest(
        key.public_key()
    )
    with pytest.raises(KeyFormatError):
        sealing.load_private_key(path, passphrase=b"wrong")


def test_key_file_that_is_not_a_key_refused(tmp_path: Path) -> None:
    path = tmp_path / "result.key"
    path.write_bytes(b"garbage")
    path.chmod(0o600)
    with pytest.raises(KeyFormatError):
        sealing.load_private_key(path)
