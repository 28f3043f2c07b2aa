"""Known-answer tests for the HPKE primitive under sealbench.crypto.sealing.

The data file is RFC 9180 Appendix A.1.1 (X25519 / HKDF-SHA256 / AES-128-GCM, base mode), the
published vector closest to sealbench's suite: RFC 9180 prints none for AEAD 0x0002
(AES-256-GCM), and ``cryptography`` offers no way to inject the ephemeral key nor a public AAD
parameter. What is checked, in three layers:

1. A small reference implementation of the RFC 9180 key schedule written here on HMAC-SHA256
   reproduces every published intermediate (DeriveKeyPair, shared_secret, key_schedule_context,
   secret, key, base_nonce, exporter_secret) and decrypts every published ciphertext with its
   AAD and sequence number. This proves the reference matches the RFC.
2. ``cryptography``'s HPKE for the published suite decapsulates the published ``enc`` with the
   published ``skRm`` and opens a ciphertext made with the published key and base_nonce: its
   KEM and key schedule agree with the RFC (the decryption direction is the KAT).
3. For sealbench's exact suite the validated reference derives key and base_nonce from the same
   published keys; :func:`sealing.hpke_decrypt` must open a ciphertext built with them, and the
   reference must open one built by :func:`sealing.hpke_encrypt` (whose ephemeral key we then
   cannot know, so the reference re-derives from its ``enc`` with ``skRm``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hpke import AEAD, KDF, KEM, Suite

from sealbench.crypto import sealing
from sealbench.crypto.errors import IntegrityError

VECTOR_FILE = (
    Path(__file__).parents[2] / "vectors" / "hpke_rfc9180_a11_x25519_sha256_aes128gcm_base.json"
)


def _load() -> dict[str, object]:
    doc = json.loads(VECTOR_FILE.read_text())
    assert "rfc9180" in doc["source"].lower().replace(" ", "")
    vector: dict[str, object] = doc["vector"]
    return vector


V = _load()


def h(name: str) -> bytes:
    value = V[name]
    assert isinstance(value, str)
    return bytes.fromhex(value)


# -- a reference RFC 9180 key schedule (DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, base mode) -----


def _extract(salt: bytes, ikm: bytes) -> bytes:
    return hmac.new(salt or bytes(32), ikm, hashlib.sha256).digest()


def _expand(prk: bytes, info: bytes, length: int) -> bytes:
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        out += block
        counter += 1
    return out[:length]


def _labeled_extract(suite_id: bytes, salt: bytes, label: bytes, ikm: bytes) -> bytes:
    return _extract(salt, b"HPKE-v1" + suite_id + label + ikm)


def _labeled_expand(suite_id: bytes, prk: bytes, label: bytes, info: bytes, n: int) -> bytes:
    return _expand(prk, n.to_bytes(2, "big") + b"HPKE-v1" + suite_id + label + info, n)


KEM_SUITE_ID = b"KEM" + (0x0020).to_bytes(2, "big")


def _hpke_suite_id(aead_id: int) -> bytes:
    return (
        b"HPKE"
        + (0x0020).to_bytes(2, "big")
        + (0x0001).to_bytes(2, "big")
        + aead_id.to_bytes(2, "big")
    )


def _raw(key: X25519PublicKey) -> bytes:
    return sealing.public_key_to_raw(key)


def derive_secret_key(ikm: bytes) -> bytes:
    prk = _labeled_extract(KEM_SUITE_ID, b"", b"dkp_prk", ikm)
    return _labeled_expand(KEM_SUITE_ID, prk, b"sk", b"", 32)


def decap(enc: bytes, sk_r: X25519PrivateKey) -> bytes:
    dh = sk_r.exchange(X25519PublicKey.from_public_bytes(enc))
    kem_context = enc + _raw(sk_r.public_key())
    prk = _labeled_extract(KEM_SUITE_ID, b"", b"eae_prk", dh)
    return _labeled_expand(KEM_SUITE_ID, prk, b"shared_secret", kem_context, 32)


def key_schedule(shared_secret: bytes, info: bytes, aead_id: int, nk: int) -> dict[str, bytes]:
    sid = _hpke_suite_id(aead_id)
    context = (
        b"\x00"
        + _labeled_extract(sid, b"", b"psk_id_hash", b"")
        + _labeled_extract(sid, b"", b"info_hash", info)
    )
    secret = _labeled_extract(sid, shared_secret, b"secret", b"")
    return {
        "key_schedule_context": context,
        "secret": secret,
        "key": _labeled_expand(sid, secret, b"key", context, nk),
        "base_nonce": _labeled_expand(sid, secret, b"base_nonce", context, 12),
        "exporter_secret": _labeled_expand(sid, secret, b"exp", context, 32),
    }


# -- 1. the reference reproduces the published vector ------------------------------------------


def test_reference_derives_published_key_pairs() -> None:
    assert derive_secret_key(h("ikmE")) == h("skEm")
    assert derive_secret_key(h("ikmR")) == h("skRm")
    sk_e = X25519PrivateKey.from_private_bytes(h("skEm"))
    sk_r = sealing.private_key_from_raw(h("skRm"))
    assert _raw(sk_e.public_key()) == h("pkEm") == h("enc")
    assert _raw(sk_r.public_key()) == h("pkRm")


def test_reference_reproduces_published_key_schedule() -> None:
    sk_r = sealing.private_key_from_raw(h("skRm"))
    shared = decap(h("enc"), sk_r)
    assert shared == h("shared_secret")
    schedule = key_schedule(shared, h("info"), aead_id=0x0001, nk=16)
    for name, value in schedule.items():
        assert value == h(name), name


def test_reference_opens_every_published_ciphertext() -> None:
    encryptions = V["encryptions"]
    assert isinstance(encryptions, list) and len(encryptions) == 6
    aead = AESGCM(h("key"))
    base = int.from_bytes(h("base_nonce"), "big")
    for record in encryptions:
        nonce = (base ^ record["seq"]).to_bytes(12, "big")
        assert nonce.hex() == record["nonce"]
        pt = aead.decrypt(nonce, bytes.fromhex(record["ct"]), bytes.fromhex(record["aad"]))
        assert pt.hex() == record["pt"]


# -- 2. cryptography's HPKE agrees with the RFC on KEM and key schedule ------------------------


def test_library_decapsulates_published_enc_to_published_key_schedule() -> None:
    suite = Suite(KEM.X25519, KDF.HKDF_SHA256, AEAD.AES_128_GCM)
    sk_r = sealing.private_key_from_raw(h("skRm"))
    pt = bytes.fromhex(V["encryptions"][0]["pt"])  # type: ignore[index]
    ct = AESGCM(h("key")).encrypt(h("base_nonce"), pt, b"")
    assert suite.decrypt(h("enc") + ct, sk_r, info=h("info")) == pt
    with pytest.raises(InvalidTag):
        suite.decrypt(h("enc") + ct, sk_r, info=h("info") + b"!")


# -- 3. sealbench's exact suite (AEAD 0x0002, AES-256-GCM) -------------------------------------


def test_sealing_suite_is_x25519_sha256_aes256gcm() -> None:
    assert sealing.SUITE_IDS == (0x0020, 0x0001, 0x0002)


def test_hpke_decrypt_opens_ciphertext_from_reference_schedule() -> None:
    sk_r = sealing.private_key_from_raw(h("skRm"))
    schedule = key_schedule(h("shared_secret"), h("info"), aead_id=0x0002, nk=32)
    pt = b"sealed per-case results"
    ct = AESGCM(schedule["key"]).encrypt(schedule["base_nonce"], pt, b"")
    assert sealing.hpke_decrypt(h("enc") + ct, sk_r, h("info")) == pt
    # The same bytes under the AES-128 schedule must not open with the AES-256 suite.
    wrong = key_schedule(h("shared_secret"), h("info"), aead_id=0x0001, nk=16)
    ct16 = AESGCM(wrong["key"]).encrypt(wrong["base_nonce"], pt, b"")
    with pytest.raises(IntegrityError):
        sealing.hpke_decrypt(h("enc") + ct16, sk_r, h("info"))


def test_reference_opens_hpke_encrypt_output() -> None:
    sk_r = sealing.private_key_from_raw(h("skRm"))
    pt = b"x" * 1000
    sealed = sealing.hpke_encrypt(pt, sk_r.public_key(), h("info"))
    enc, ct = sealed[:32], sealed[32:]
    schedule = key_schedule(decap(enc, sk_r), h("info"), aead_id=0x0002, nk=32)
    assert AESGCM(schedule["key"]).decrypt(schedule["base_nonce"], ct, b"") == pt
