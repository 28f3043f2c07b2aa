"""Result sealing: encrypt bytes to a data owner's X25519 public key so only its holder can read
them, bound to the context they were produced in (run, benchmark, image).

Primitive: HPKE (RFC 9180) base mode, single shot, suite DHKEM(X25519, HKDF-SHA256) (KEM
0x0020) / HKDF-SHA256 (KDF 0x0001) / AES-256-GCM (AEAD 0x0002), from
``cryptography.hazmat.primitives.hpke`` (:func:`hpke_encrypt` / :func:`hpke_decrypt` expose it
raw, ``enc ‖ ct``, for interoperability and known-answer tests).

Sealed envelope, version 1, byte by byte::

    offset 0   4 bytes  magic b"SBSE"
    offset 4   1 byte   version 0x01
    offset 5   1 byte   mode: 0x01 direct, 0x02 hybrid
    header = bytes 0..5 (6 bytes); every HPKE call below uses
             hpke_info = header ‖ info           (info: the caller's context, result_info())

    mode 0x01, direct (plaintexts of at most DIRECT_THRESHOLD = 1 MiB)
    offset 6   32 bytes enc, the sender's ephemeral X25519 public key
    offset 38  n + 16   AES-256-GCM ciphertext of the n-byte plaintext and its tag
               (bytes 6.. are exactly RFC 9180 SealBase(pkR, hpke_info, aad="", pt))

    mode 0x02, hybrid (larger plaintexts)
    offset 6   32 bytes enc
    offset 38  48 bytes HPKE ciphertext of a fresh random 32-byte payload key (32 + 16 tag)
    offset 86  …        the plaintext under that key in sealbench.crypto.streaming's format
                        (Tink AES256_GCM_HKDF_1MB: 40-byte header, 1 MiB segments), with
                        associated data = header ‖ info

Binding the header into the HPKE info (and the stream's associated data) means a version or
mode byte cannot be changed without the open failing. Unknown magic, version or mode raise
:class:`KeyFormatError` (the header is public, so naming it leaks nothing); everything after the
header either authenticates or raises the one opaque :class:`IntegrityError`: wrong key, wrong
info, tampering and truncation are indistinguishable.

Keys: the recipient key is a raw 32-byte X25519 key; its identity in policies is
:func:`public_key_digest` (SHA-256 of those 32 bytes). Public keys travel as PEM
SubjectPublicKeyInfo or raw; private keys as PKCS#8 PEM (optionally passphrase-encrypted),
written by :func:`save_private_key` with mode 0600 through an exclusive temporary file, and
refused by :func:`load_private_key` when group or others have any permission on the file.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.hpke import AEAD, KDF, KEM, Suite

from sealbench.crypto import streaming
from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.digest import Sha256Digest, parse_digest, sha256_digest
from sealbench.crypto.errors import InsecureKeyFileError, IntegrityError, KeyFormatError
from sealbench.crypto.files import write_private

__all__ = [
    "DIRECT_THRESHOLD",
    "MAGIC",
    "MODE_DIRECT",
    "MODE_HYBRID",
    "SUITE_IDS",
    "VERSION",
    "generate_recipient_key",
    "hpke_decrypt",
    "hpke_encrypt",
    "load_private_key",
    "open_sealed",
    "pooled_release_info",
    "private_key_from_pem",
    "private_key_from_raw",
    "private_key_to_pem",
    "public_key_digest",
    "public_key_from_pem",
    "public_key_from_raw",
    "public_key_to_pem",
    "public_key_to_raw",
    "result_info",
    "save_private_key",
    "seal",
]

MAGIC: Final = b"SBSE"
VERSION: Final = 1
MODE_DIRECT: Final = 0x01
MODE_HYBRID: Final = 0x02
#: Plaintexts up to this size are sealed directly; larger ones take the hybrid path.
DIRECT_THRESHOLD: Final = 1 << 20
#: (kem_id, kdf_id, aead_id) of the HPKE suite, as registered by RFC 9180.
SUITE_IDS: Final = (0x0020, 0x0001, 0x0002)

_SUITE: Final = Suite(KEM.X25519, KDF.HKDF_SHA256, AEAD.AES_256_GCM)
_HEADER_SIZE: Final = 6
_ENC_SIZE: Final = 32
_TAG_SIZE: Final = 16
_PAYLOAD_KEY_SIZE: Final = streaming.KEY_SIZE
_WRAPPED_KEY_SIZE: Final = _ENC_SIZE + _PAYLOAD_KEY_SIZE + _TAG_SIZE
_MAX_KEY_FILE: Final = 64 * 1024
_RESULT_PURPOSE: Final = "sealbench-result-v1"
_POOLED_RELEASE_PURPOSE: Final = "sealbench-pooled-release-v1"


# -- keys --------------------------------------------------------------------------------------


def generate_recipient_key() -> X25519PrivateKey:
    return X25519PrivateKey.generate()


def public_key_to_raw(public_key: X25519PublicKey) -> bytes:
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def public_key_from_raw(data: bytes) -> X25519PublicKey:
    if len(data) != 32:
        raise KeyFormatError(f"X25519 public key: expected 32 bytes, received {len(data)}")
    return X25519PublicKey.from_public_bytes(data)


def public_key_digest(public_key: X25519PublicKey) -> Sha256Digest:
    """The recipient's identity in workload policies: SHA-256 of the 32 raw key bytes."""
    return sha256_digest(public_key_to_raw(public_key))


def public_key_to_pem(public_key: X25519PublicKey) -> bytes:
    return public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def public_key_from_pem(data: bytes) -> X25519PublicKey:
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError):
        raise KeyFormatError("not a PEM SubjectPublicKeyInfo public key") from None
    if not isinstance(key, X25519PublicKey):
        raise KeyFormatError(f"expected an X25519 public key, received {type(key).__name__}")
    return key


def private_key_from_raw(data: bytes) -> X25519PrivateKey:
    if len(data) != 32:
        raise KeyFormatError(f"X25519 private key: expected 32 bytes, received {len(data)}")
    return X25519PrivateKey.from_private_bytes(data)


def private_key_to_pem(key: X25519PrivateKey, passphrase: bytes | None = None) -> bytes:
    """PKCS#8 PEM, encrypted with the best available scheme when ``passphrase`` is given."""
    encryption: serialization.KeySerializationEncryption = (
        serialization.NoEncryption()
        if passphrase is None
        else serialization.BestAvailableEncryption(passphrase)
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


def private_key_from_pem(data: bytes, passphrase: bytes | None = None) -> X25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(data, password=passphrase)
    except (ValueError, TypeError):
        raise KeyFormatError("not a PKCS#8 PEM private key (or wrong passphrase)") from None
    if not isinstance(key, X25519PrivateKey):
        raise KeyFormatError(f"expected an X25519 private key, received {type(key).__name__}")
    return key


def save_private_key(
    path: Path,
    key: X25519PrivateKey,
    *,
    passphrase: bytes | None = None,
    overwrite: bool = False,
) -> None:
    """Write ``key`` as PKCS#8 PEM readable by its owner only (mode 0600).

    The bytes go to a temporary name created exclusively with mode 0600 in the same directory,
    are fsynced, and only then appear under ``path`` (hard link when ``overwrite`` is false, so
    an existing key is never replaced: ``FileExistsError``; atomic rename otherwise). No moment
    exists where ``path`` holds a partial key or looser permissions.
    """
    write_private(path, private_key_to_pem(key, passphrase), overwrite=overwrite)


def load_private_key(path: Path, *, passphrase: bytes | None = None) -> X25519PrivateKey:
    """Read a key written by :func:`save_private_key`. Raises :class:`InsecureKeyFileError` if
    group or others have any permission bit on the file (check made on the opened file)."""
    path = Path(path)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise KeyFormatError(f"private key {str(path)!r} is not a regular file")
        loose = stat.S_IMODE(st.st_mode) & 0o077
        if loose:
            raise InsecureKeyFileError(
                f"private key {str(path)!r} has mode {stat.S_IMODE(st.st_mode):04o}; expected "
                f"0600 (group/others must have no access: chmod 600)"
            )
        data = f.read(_MAX_KEY_FILE + 1)
    if len(data) > _MAX_KEY_FILE:
        raise KeyFormatError(f"private key {str(path)!r} is larger than {_MAX_KEY_FILE} bytes")
    return private_key_from_pem(data, passphrase)


# -- HPKE and the sealed envelope --------------------------------------------------------------


def hpke_encrypt(plaintext: bytes, recipient: X25519PublicKey, info: bytes) -> bytes:
    """RFC 9180 single-shot SealBase with this module's suite and empty AAD: ``enc ‖ ct``."""
    if not isinstance(recipient, X25519PublicKey):
        raise KeyFormatError(f"expected an X25519 public key, received {type(recipient).__name__}")
    return _SUITE.encrypt(plaintext, recipient, info=info)


def hpke_decrypt(ciphertext: bytes, private_key: X25519PrivateKey, info: bytes) -> bytes:
    """RFC 9180 single-shot OpenBase (``enc ‖ ct``); any failure is :class:`IntegrityError`."""
    if not isinstance(private_key, X25519PrivateKey):
        raise KeyFormatError(
            f"expected an X25519 private key, received {type(private_key).__name__}"
        )
    try:
        return _SUITE.decrypt(ciphertext, private_key, info=info)
    except InvalidTag:
        raise IntegrityError("sealed payload failed authentication") from None


def result_info(run_id: str, benchmark_id: str, image_digest: str) -> bytes:
    """The ``info`` that binds a sealed result to its run: canonical JSON of
    ``{"benchmark_id", "image_digest", "purpose": "sealbench-result-v1", "run_id"}``."""
    return _bound_info(_RESULT_PURPOSE, run_id, benchmark_id, image_digest)


def pooled_release_info(pool_id: str, benchmark_id: str, image_digest: str) -> bytes:
    """The ``info`` that binds an aggregator's sealed release to its pool (issue 27): as
    :func:`result_info`, with ``"purpose": "sealbench-pooled-release-v1"`` and the pool id as
    ``run_id``, so that neither envelope opens as the other."""
    return _bound_info(_POOLED_RELEASE_PURPOSE, pool_id, benchmark_id, image_digest)


def _bound_info(purpose: str, run_id: str, benchmark_id: str, image_digest: str) -> bytes:
    if not isinstance(run_id, str) or not run_id:
        raise ValueError("run_id must be a non-empty string")
    if not isinstance(benchmark_id, str) or not benchmark_id:
        raise ValueError("benchmark_id must be a non-empty string")
    return canonical_json(
        {
            "benchmark_id": benchmark_id,
            "image_digest": parse_digest(image_digest),
            "purpose": purpose,
            "run_id": run_id,
        }
    )


def _header(mode: int) -> bytes:
    return MAGIC + bytes((VERSION, mode))


def seal(plaintext: bytes, recipient: X25519PublicKey, info: bytes) -> bytes:
    """Seal ``plaintext`` to ``recipient`` in a version-1 envelope (direct up to
    :data:`DIRECT_THRESHOLD` bytes, hybrid above)."""
    if len(plaintext) <= DIRECT_THRESHOLD:
        header = _header(MODE_DIRECT)
        return header + hpke_encrypt(plaintext, recipient, header + info)
    header = _header(MODE_HYBRID)
    payload_key = secrets.token_bytes(_PAYLOAD_KEY_SIZE)
    wrapped = hpke_encrypt(payload_key, recipient, header + info)
    return header + wrapped + streaming.encrypt_bytes(payload_key, plaintext, header + info)


def open_sealed(sealed: bytes, private_key: X25519PrivateKey, info: bytes) -> bytes:
    """Open an envelope made by :func:`seal` with the same ``info``.

    :class:`KeyFormatError` for something that is not a version-1 sealbench envelope;
    :class:`IntegrityError` (opaque) for wrong key, wrong info, tampering or truncation.
    """
    if len(sealed) < _HEADER_SIZE or sealed[:4] != MAGIC:
        raise KeyFormatError("not a sealbench sealed envelope (magic 'SBSE' missing)")
    header = sealed[:_HEADER_SIZE]
    version, mode = header[4], header[5]
    if version != VERSION:
        raise KeyFormatError(f"sealed envelope version: expected {VERSION}, received {version}")
    body = sealed[_HEADER_SIZE:]
    if mode == MODE_DIRECT:
        if len(body) < _ENC_SIZE + _TAG_SIZE:
            raise IntegrityError("sealed payload failed authentication")
        return hpke_decrypt(body, private_key, header + info)
    if mode == MODE_HYBRID:
        if len(body) < _WRAPPED_KEY_SIZE + streaming.HEADER_SIZE + _TAG_SIZE:
            raise IntegrityError("sealed payload failed authentication")
        payload_key = hpke_decrypt(body[:_WRAPPED_KEY_SIZE], private_key, header + info)
        if len(payload_key) != _PAYLOAD_KEY_SIZE:
            raise IntegrityError("sealed payload failed authentication")
        return streaming.decrypt_bytes(payload_key, body[_WRAPPED_KEY_SIZE:], header + info)
    raise KeyFormatError(f"sealed envelope mode: expected 1 or 2, received {mode}")
