"""Envelope encryption: data-encryption keys (DEKs) wrapped by a key-encryption key held elsewhere.

Each dataset or model is encrypted under its own random 32-byte :class:`DataKey`; the DEK is
wrapped by a :class:`KeyWrapper` (Cloud KMS in production, :class:`InsecureInMemoryKeyWrapper` in
tests) with additional authenticated data that names the asset (:func:`asset_aad`), so a wrapped
key released for one asset cannot be replayed for another. The result is a :class:`WrappedKey`
record stored next to the ciphertext.

``WrappedKey`` wire format, version 1: canonical JSON (:func:`sealbench.crypto.canonical_json`,
sorted keys, no whitespace, UTF-8) of exactly these members::

    {"aad_digest": "sha256:<64 hex>",   SHA-256 of the AAD the DEK was wrapped with
     "ciphertext": "<base64>",           the wrapper's output (RFC 4648 base64, padded)
     "key_name":   "<str>",              the wrapping key's name (e.g. a KMS key resource name)
     "version":    1}

Records larger than 64 KiB, with other members, or of another version are refused with
:class:`~sealbench.crypto.errors.KeyFormatError`.

``InsecureInMemoryKeyWrapper`` ciphertext: nonce (12 bytes, random) ‖ AES-256-GCM(KEK, nonce,
DEK, aad) (DEK length + 16-byte tag).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import logging
import os
from typing import Annotated, Any, Literal, Protocol, Self

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.digest import Sha256Digest, parse_digest, sha256_digest
from sealbench.crypto.errors import KeyFormatError, KeyUnwrapError

__all__ = [
    "DEK_SIZE",
    "WRAPPED_KEY_VERSION",
    "DataKey",
    "InsecureInMemoryKeyWrapper",
    "KeyWrapper",
    "WrappedKey",
    "asset_aad",
    "unwrap_key",
    "wrap_key",
]

logger = logging.getLogger("sealbench.crypto")

DEK_SIZE = 32
WRAPPED_KEY_VERSION = 1
_MAX_RECORD = 64 * 1024
_NONCE_SIZE = 12
_TAG_SIZE = 16
_AAD_PURPOSE = "sealbench-dek-v1"


class DataKey:
    """A 32-byte data-encryption key. Its repr never shows the key."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes | bytearray) or len(key) != DEK_SIZE:
            size = len(key) if isinstance(key, bytes | bytearray) else type(key).__name__
            raise KeyFormatError(f"expected a {DEK_SIZE}-byte data key, received {size}")
        self._key = bytes(key)

    @classmethod
    def generate(cls) -> DataKey:
        """A fresh random key from the operating system's CSPRNG."""
        return cls(os.urandom(DEK_SIZE))

    @classmethod
    def from_bytes(cls, key: bytes) -> DataKey:
        """Wrap existing key bytes (raises :class:`KeyFormatError` unless 32 bytes)."""
        return cls(key)

    def secret_bytes(self) -> bytes:
        """The key itself. Hand it only to a cipher; never log or persist it in the clear."""
        return self._key

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DataKey):
            return NotImplemented
        return hmac.compare_digest(self._key, other._key)

    def __repr__(self) -> str:
        return "DataKey(<redacted>)"

    __str__ = __repr__


class KeyWrapper(Protocol):
    """Wraps and unwraps DEKs under a key-encryption key that the caller never sees."""

    @property
    def key_name(self) -> str:
        """The name of the key-encryption key (recorded in :class:`WrappedKey`)."""
        ...

    def wrap(self, plaintext: bytes, aad: bytes) -> bytes:
        """Encrypt ``plaintext`` bound to ``aad``."""
        ...

    def unwrap(self, ciphertext: bytes, aad: bytes) -> bytes:
        """Decrypt what :meth:`wrap` produced; raises :class:`KeyUnwrapError`."""
        ...


def _digest(value: str) -> Sha256Digest:
    return parse_digest(value)


class WrappedKey(BaseModel):
    """A DEK wrapped by a named key, with the digest of the AAD it is bound to (version 1)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    version: Literal[1] = 1
    key_name: str = Field(min_length=1, max_length=1024)
    ciphertext: bytes = Field(min_length=1, max_length=16 * 1024)
    aad_digest: Annotated[Sha256Digest, AfterValidator(_digest)]

    def __repr__(self) -> str:
        return (
            f"WrappedKey(version={self.version}, key_name={self.key_name!r}, "
            f"ciphertext=<{len(self.ciphertext)} bytes>, aad_digest={self.aad_digest!r})"
        )

    def __str__(self) -> str:
        return repr(self)

    def to_bytes(self) -> bytes:
        """The canonical JSON record described in the module docstring."""
        return canonical_json(
            {
                "aad_digest": self.aad_digest,
                "ciphertext": base64.b64encode(self.ciphertext).decode("ascii"),
                "key_name": self.key_name,
                "version": self.version,
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> Self:
        """Parse a record; raises :class:`KeyFormatError` for anything malformed."""
        if len(data) > _MAX_RECORD:
            raise KeyFormatError(
                f"wrapped-key record of {len(data)} bytes exceeds the {_MAX_RECORD}-byte limit"
            )
        try:
            doc: Any = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise KeyFormatError("wrapped-key record is not valid JSON") from exc
        if not isinstance(doc, dict):
            raise KeyFormatError(
                f"wrapped-key record must be a JSON object, received {type(doc).__name__}"
            )
        version = doc.get("version")
        if version != WRAPPED_KEY_VERSION or isinstance(version, bool):
            raise KeyFormatError(
                f"unsupported wrapped-key version: expected {WRAPPED_KEY_VERSION}, "
                f"received {version!r}"
            )
        encoded = doc.get("ciphertext")
        if not isinstance(encoded, str):
            raise KeyFormatError("wrapped-key record: 'ciphertext' must be a base64 string")
        try:
            fields = dict(doc, ciphertext=base64.b64decode(encoded, validate=True))
        except (binascii.Error, ValueError) as exc:
            raise KeyFormatError("wrapped-key record: 'ciphertext' is not valid base64") from exc
        try:
            return cls.model_validate(fields)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            raise KeyFormatError(f"malformed wrapped-key record: {problems}") from exc

    @property
    def digest(self) -> Sha256Digest:
        """SHA-256 of :meth:`to_bytes`."""
        return sha256_digest(self.to_bytes())


def asset_aad(kind: Literal["dataset", "model"], asset_id: str, digest: Sha256Digest) -> bytes:
    """The AAD that binds a DEK to one asset: canonical JSON of kind, id, content digest and
    the purpose ``sealbench-dek-v1``."""
    if kind not in ("dataset", "model"):
        raise ValueError(f"asset kind must be 'dataset' or 'model', received {kind!r}")
    if not asset_id:
        raise ValueError("asset id must not be empty")
    return canonical_json(
        {
            "asset_id": asset_id,
            "digest": parse_digest(digest),
            "kind": kind,
            "purpose": _AAD_PURPOSE,
        }
    )


def wrap_key(wrapper: KeyWrapper, dek: DataKey, aad: bytes) -> WrappedKey:
    """Wrap ``dek`` with ``wrapper`` bound to ``aad``."""
    return WrappedKey(
        key_name=wrapper.key_name,
        ciphertext=wrapper.wrap(dek.secret_bytes(), aad),
        aad_digest=sha256_digest(aad),
    )


def unwrap_key(wrapper: KeyWrapper, wrapped: WrappedKey, aad: bytes) -> DataKey:
    """Unwrap ``wrapped``. Checks, in order, that ``aad`` is what the record was bound to, that
    ``wrapper`` holds the key the record names, then asks the wrapper (which authenticates the
    AAD again). Every failure raises :class:`KeyUnwrapError`."""
    received = sha256_digest(aad)
    if received != wrapped.aad_digest:
        raise KeyUnwrapError(
            f"AAD digest {received} does not match the record's {wrapped.aad_digest}"
        )
    if wrapper.key_name != wrapped.key_name:
        raise KeyUnwrapError(
            f"record was wrapped by key {wrapped.key_name!r}, not by {wrapper.key_name!r}"
        )
    plaintext = wrapper.unwrap(wrapped.ciphertext, aad)
    if len(plaintext) != DEK_SIZE:
        raise KeyUnwrapError(
            f"unwrapped key has {len(plaintext)} bytes, expected {DEK_SIZE}"
        )
    return DataKey(plaintext)


class InsecureInMemoryKeyWrapper:
    """A :class:`KeyWrapper` whose AES-256-GCM key-encryption key lives in this process's
    memory. For tests and the offline demo only: NOT FOR PRODUCTION (a KEK must live in a KMS).
    Constructing one logs a warning."""

    def __init__(self, key_name: str) -> None:
        if not key_name:
            raise ValueError("key name must not be empty")
        self._key_name = key_name
        self._aead = AESGCM(AESGCM.generate_key(bit_length=256))
        logger.warning(
            "InsecureInMemoryKeyWrapper %r keeps its key-encryption key in process memory; "
            "it is for tests only and must never protect production data",
            key_name,
        )

    @property
    def key_name(self) -> str:
        return self._key_name

    def wrap(self, plaintext: bytes, aad: bytes) -> bytes:
        nonce = os.urandom(_NONCE_SIZE)
        return nonce + self._aead.encrypt(nonce, plaintext, aad)

    def unwrap(self, ciphertext: bytes, aad: bytes) -> bytes:
        if len(ciphertext) < _NONCE_SIZE + _TAG_SIZE:
            raise KeyUnwrapError(
                f"wrapped key of {len(ciphertext)} bytes is shorter than the "
                f"{_NONCE_SIZE + _TAG_SIZE}-byte minimum"
            )
        try:
            return self._aead.decrypt(ciphertext[:_NONCE_SIZE], ciphertext[_NONCE_SIZE:], aad)
        except InvalidTag as exc:
            raise KeyUnwrapError(
                f"key {self._key_name!r} could not unwrap the DEK (wrong key or AAD, or tampered)"
            ) from exc

    def __repr__(self) -> str:
        return f"InsecureInMemoryKeyWrapper(key_name={self._key_name!r})"
