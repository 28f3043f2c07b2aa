"""Shared fixtures for the crypto tests: random keys and a bridge to Tink's streaming AEAD.

Tink is the reference implementation of the streaming format, used only as a cross-check. A raw
32-byte key is moved into and out of a Tink keyset through its protobuf form (Tink's own
serialisation, guarded by its secret-key access token).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable

import pytest
import tink
from tink import secret_key_access, streaming_aead
from tink.proto import aes_gcm_hkdf_streaming_pb2, common_pb2, tink_pb2

streaming_aead.register()

_TYPE_URL = "type.googleapis.com/google.crypto.tink.AesGcmHkdfStreamingKey"


class TinkStream:
    """Tink's AES256_GCM_HKDF streaming AEAD for a given raw key and segment size."""

    def __init__(self, key: bytes, segment_size: int = 1_048_576) -> None:
        params = aes_gcm_hkdf_streaming_pb2.AesGcmHkdfStreamingParams(
            ciphertext_segment_size=segment_size,
            derived_key_size=32,
            hkdf_hash_type=common_pb2.SHA256,
        )
        key_proto = aes_gcm_hkdf_streaming_pb2.AesGcmHkdfStreamingKey(
            version=0, params=params, key_value=key
        )
        keyset = tink_pb2.Keyset(
            primary_key_id=1,
            key=[
                tink_pb2.Keyset.Key(
                    key_data=tink_pb2.KeyData(
                        type_url=_TYPE_URL,
                        value=key_proto.SerializeToString(),
                        key_material_type=tink_pb2.KeyData.SYMMETRIC,
                    ),
                    status=tink_pb2.ENABLED,
                    key_id=1,
                    output_prefix_type=tink_pb2.RAW,
                )
            ],
        )
        handle = tink.proto_keyset_format.parse(
            keyset.SerializeToString(), secret_key_access.TOKEN
        )
        self._primitive = handle.primitive(streaming_aead.StreamingAead)

    def encrypt(self, plaintext: bytes, associated_data: bytes = b"") -> bytes:
        sink = _KeepValue()
        with self._primitive.new_encrypting_stream(sink, associated_data) as w:
            w.write(plaintext)
        return sink.value

    def decrypt(self, ciphertext: bytes, associated_data: bytes = b"") -> bytes:
        with self._primitive.new_decrypting_stream(io.BytesIO(ciphertext), associated_data) as r:
            data: bytes = r.read()
        return data


class _KeepValue(io.BytesIO):
    """Tink closes the destination of an encrypting stream; keep what was written."""

    value = b""

    def close(self) -> None:
        if not self.closed:
            self.value = self.getvalue()
        super().close()


def raw_key_of(handle: tink.KeysetHandle) -> bytes:
    """The 32-byte key inside a one-key AES-GCM-HKDF streaming keyset."""
    keyset = tink_pb2.Keyset.FromString(
        tink.proto_keyset_format.serialize(handle, secret_key_access.TOKEN)
    )
    key = aes_gcm_hkdf_streaming_pb2.AesGcmHkdfStreamingKey.FromString(
        keyset.key[0].key_data.value
    )
    value: bytes = key.key_value
    return value


@pytest.fixture
def key() -> bytes:
    return os.urandom(32)


@pytest.fixture
def other_key() -> bytes:
    return os.urandom(32)


@pytest.fixture
def tink_for() -> Callable[..., TinkStream]:
    return TinkStream


@pytest.fixture
def tink_raw_key() -> Callable[[tink.KeysetHandle], bytes]:
    return raw_key_of
