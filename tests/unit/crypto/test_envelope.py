"""Envelope encryption: DEKs wrapped under a key-encryption key, bound to the asset they protect."""

from __future__ import annotations

import base64
import json
import logging

import pytest

from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.digest import sha256_digest
from sealbench.crypto.envelope import (
    DataKey,
    InsecureInMemoryKeyWrapper,
    KeyWrapper,
    WrappedKey,
    asset_aad,
    unwrap_key,
    wrap_key,
)
from sealbench.crypto.errors import KeyFormatError, KeyUnwrapError

DIGEST = sha256_digest(b"dataset contents")
AAD = asset_aad("dataset", "ds-1", DIGEST)


@pytest.fixture
def wrapper() -> InsecureInMemoryKeyWrapper:
    return InsecureInMemoryKeyWrapper("projects/p/locations/l/keyRings/r/cryptoKeys/data-owner")


def test_round_trip_through_record_bytes(wrapper: InsecureInMemoryKeyWrapper) -> None:
    dek = DataKey.generate()
    record = WrappedKey.from_bytes(wrap_key(wrapper, dek, AAD).to_bytes())
    assert record.key_name == wrapper.key_name
    assert record.aad_digest == sha256_digest(AAD)
    assert unwrap_key(wrapper, record, AAD).secret_bytes() == dek.secret_bytes()


def test_record_is_canonical_versioned_json(wrapper: InsecureInMemoryKeyWrapper) -> None:
    record = wrap_key(wrapper, DataKey.generate(), AAD)
    raw = record.to_bytes()
    doc = json.loads(raw)
    assert doc == {
        "aad_digest": sha256_digest(AAD),
        "ciphertext": base64.b64encode(record.ciphertext).decode(),
        "key_name": wrapper.key_name,
        "version": 1,
    }
    assert raw == canonical_json(doc)


def test_asset_aad_is_canonical_and_names_purpose() -> None:
    assert json.loads(AAD) == {
        "asset_id": "ds-1",
        "digest": DIGEST,
        "kind": "dataset",
        "purpose": "sealbench-dek-v1",
    }
    assert canonical_json(json.loads(AAD)) == AAD
    assert asset_aad("model", "ds-1", DIGEST) != AAD
    with pytest.raises(ValueError, match="sha256"):
        asset_aad("dataset", "ds-1", "md5:abc")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kind"):
        asset_aad("weights", "ds-1", DIGEST)  # type: ignore[arg-type]


def test_wrong_aad_rejected(wrapper: InsecureInMemoryKeyWrapper) -> None:
    record = wrap_key(wrapper, DataKey.generate(), AAD)
    other = asset_aad("dataset", "ds-2", DIGEST)
    with pytest.raises(KeyUnwrapError, match="AAD digest"):
        unwrap_key(wrapper, record, other)


def test_dek_replayed_for_another_asset_rejected_by_wrapper(
    wrapper: InsecureInMemoryKeyWrapper,
) -> None:
    """A record whose AAD digest was rewritten to match another asset still fails: the wrapper
    authenticates the AAD itself."""
    record = wrap_key(wrapper, DataKey.generate(), AAD)
    other = asset_aad("model", "m-1", DIGEST)
    forged = record.model_copy(update={"aad_digest": sha256_digest(other)})
    with pytest.raises(KeyUnwrapError):
        unwrap_key(wrapper, forged, other)


def test_another_wrappers_key_rejected(wrapper: InsecureInMemoryKeyWrapper) -> None:
    record = wrap_key(wrapper, DataKey.generate(), AAD)
    with pytest.raises(KeyUnwrapError, match="wrapped by key"):
        unwrap_key(InsecureInMemoryKeyWrapper("another-key"), record, AAD)


def test_another_key_under_the_same_name_rejected(wrapper: InsecureInMemoryKeyWrapper) -> None:
    record = wrap_key(wrapper, DataKey.generate(), AAD)
    impostor = InsecureInMemoryKeyWrapper(wrapper.key_name)
    with pytest.raises(KeyUnwrapError):
        unwrap_key(impostor, record, AAD)


@pytest.mark.parametrize("position", [0, 11, 12, 30, -1])
def test_tampered_ciphertext_rejected(wrapper: InsecureInMemoryKeyWrapper, position: int) -> None:
    record = wrap_key(wrapper, DataKey.generate(), AAD)
    flipped = bytearray(record.ciphertext)
    flipped[position] ^= 0x01
    tampered = WrappedKey.from_bytes(
        record.model_copy(update={"ciphertext": bytes(flipped)}).to_bytes()
    )
    with pytest.raises(KeyUnwrapError):
        unwrap_key(wrapper, tampered, AAD)


def test_truncated_wrapped_key_rejected(wrapper: InsecureInMemoryKeyWrapper) -> None:
    record = wrap_key(wrapper, DataKey.generate(), AAD)
    with pytest.raises(KeyUnwrapError):
        unwrap_key(wrapper, record.model_copy(update={"ciphertext": record.ciphertext[:20]}), AAD)


def test_wrapper_output_of_wrong_length_rejected(wrapper: InsecureInMemoryKeyWrapper) -> None:
    short = WrappedKey(
        key_name=wrapper.key_name,
        ciphertext=wrapper.wrap(b"only sixteen byt", AAD),
        aad_digest=sha256_digest(AAD),
    )
    with pytest.raises(KeyUnwrapError, match="expected 32"):
        unwrap_key(wrapper, short, AAD)


@pytest.mark.parametrize("version", [0, 2, "1", None, True])
def test_unknown_version_refused(wrapper: InsecureInMemoryKeyWrapper, version: object) -> None:
    doc = json.loads(wrap_key(wrapper, DataKey.generate(), AAD).to_bytes())
    doc["version"] = version
    with pytest.raises(KeyFormatError, match="version"):
        WrappedKey.from_bytes(json.dumps(doc).encode())


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(extra="x"), "extra"),
        (lambda d: d.pop("key_name"), "key_name"),
        (lambda d: d.update(key_name=""), "key_name"),
        (lambda d: d.update(aad_digest="sha256:XYZ"), "aad_digest"),
        (lambda d: d.update(ciphertext="not base64!"), "base64"),
        (lambda d: d.update(ciphertext=5), "base64"),
    ],
    ids=["extra-member", "missing-name", "empty-name", "bad-digest", "bad-base64", "not-string"],
)
def test_malformed_record_refused(
    wrapper: InsecureInMemoryKeyWrapper, mutate: object, message: str
) -> None:
    doc = json.loads(wrap_key(wrapper, DataKey.generate(), AAD).to_bytes())
    mutate(doc)  # type: ignore[operator]
    with pytest.raises(KeyFormatError, match=message):
        WrappedKey.from_bytes(json.dumps(doc).encode())


@pytest.mark.parametrize("raw", [b"", b"[1]", b"\xff\xfe", b"{" * 10, b" " * 70_000])
def test_garbage_record_refused(raw: bytes) -> None:
    with pytest.raises(KeyFormatError):
        WrappedKey.from_bytes(raw)


def test_repr_does_not_leak_the_key(wrapper: InsecureInMemoryKeyWrapper) -> None:
    dek = DataKey.generate()
    secret = dek.secret_bytes()
    for text in (repr(dek), str(dek), f"{dek}", repr([dek])):
        assert "redacted" in text
        assert secret.hex() not in text and repr(secret) not in text
    record = wrap_key(wrapper, dek, AAD)
    assert repr(record.ciphertext) not in repr(record)
    assert repr(record.ciphertext) not in str(record)
    assert "AESGCM" not in repr(wrapper)


def test_data_key_requires_32_bytes() -> None:
    for bad in (b"", b"x" * 31, b"x" * 33):
        with pytest.raises(KeyFormatError, match="32-byte"):
            DataKey.from_bytes(bad)
    assert DataKey.from_bytes(b"k" * 32) == DataKey.from_bytes(b"k" * 32)
    assert DataKey.generate() != DataKey.generate()


def test_insecure_wrapper_warns_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="sealbench.crypto"):
        InsecureInMemoryKeyWrapper("test-key")
    [record] = [r for r in caplog.records if r.name == "sealbench.crypto"]
    assert record.levelno == logging.WARNING
    assert "tests only" in record.getMessage()


def test_insecure_wrapper_satisfies_protocol(wrapper: InsecureInMemoryKeyWrapper) -> None:
    as_protocol: KeyWrapper = wrapper
    assert as_protocol.key_name == wrapper.key_name
