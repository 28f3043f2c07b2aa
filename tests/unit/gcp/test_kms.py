"""The Cloud KMS key wrapper: CRC32C integrity checks as Google documents them, and errors that
name the key and the identity. A fake ``KeyManagementServiceClient`` stands in for the wire."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import google_crc32c
import pytest
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc

from sealbench.crypto.errors import KeyUnwrapError
from sealbench.gcp.kms import TRANSIT_ATTEMPTS, KmsKeyWrapper
from sealbench.platforms.errors import KeyAccessDenied, KeyNotFound, KmsIntegrityError

KEY = "projects/p/locations/global/keyRings/r/cryptoKeys/k"


def _crc(data: bytes) -> int:
    return int(google_crc32c.value(data))


@dataclass
class _EncryptResponse:
    name: str
    ciphertext: bytes
    ciphertext_crc32c: int
    verified_plaintext_crc32c: bool = True
    verified_additional_authenticated_data_crc32c: bool = True


@dataclass
class _DecryptResponse:
    plaintext: bytes
    plaintext_crc32c: int


@dataclass
class FakeKms:
    """Reverses the bytes as 'encryption'; knobs corrupt one field or raise."""

    corrupt: str = ""
    error: Exception | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    #: corrupt only the first N answers (0: every one)
    corrupt_times: int = 0

    def _corrupting(self) -> bool:
        return not self.corrupt_times or len(self.requests) <= self.corrupt_times

    def encrypt(self, request: dict[str, Any], timeout: float) -> _EncryptResponse:
        self.requests.append(request)
        if self.error:
            raise self.error
        assert request["plaintext_crc32c"] == _crc(request["plaintext"])
        assert request["additional_authenticated_data_crc32c"] == _crc(
            request["additional_authenticated_data"]
        )
        ciphertext = request["plaintext"][::-1]
        response = _EncryptResponse(f"{KEY}/cryptoKeyVersions/1", ciphertext, _crc(ciphertext))
        if not self._corrupting():
            return response
        if self.corrupt == "ciphertext":
            response.ciphertext = b"X" + ciphertext[1:]
        if self.corrupt == "verified":
            response.verified_plaintext_crc32c = False
        if self.corrupt == "verified_aad":
            response.verified_additional_authenticated_data_crc32c = False
        if self.corrupt == "name":
            response.name = (
                "projects/p/locations/global/keyRings/r/cryptoKeys/other/cryptoKeyVersions/1"
            )
        return response

    def decrypt(self, request: dict[str, Any], timeout: float) -> _DecryptResponse:
        self.requests.append(request)
        if self.error:
            raise self.error
        assert request["ciphertext_crc32c"] == _crc(request["ciphertext"])
        plaintext = request["ciphertext"][::-1]
        response = _DecryptResponse(plaintext, _crc(plaintext))
        if self.corrupt == "plaintext" and self._corrupting():
            response.plaintext = b"Y" + plaintext[1:]
        return response


def _wrapper(fake: FakeKms, identity: str | None = "principal://x/subject/s") -> KmsKeyWrapper:
    return KmsKeyWrapper(KEY, fake, identity=identity)  # type: ignore[arg-type]


def test_wrap_unwrap_round_trip_sends_crc32c_fields() -> None:
    fake = FakeKms()
    wrapper = _wrapper(fake)
    ciphertext = wrapper.wrap(b"k" * 32 + b"!", b"aad")
    assert wrapper.unwrap(ciphertext, b"aad") == b"k" * 32 + b"!"
    assert {"plaintext_crc32c", "additional_authenticated_data_crc32c"} <= set(fake.requests[0])
    assert {"ciphertext_crc32c", "additional_authenticated_data_crc32c"} <= set(fake.requests[1])


@pytest.mark.parametrize("corruption", ["ciphertext", "verified", "verified_aad", "name"])
def test_encrypt_response_corrupted_in_transit_rejected(corruption: str) -> None:
    with pytest.raises(KmsIntegrityError):
        _wrapper(FakeKms(corrupt=corruption)).wrap(b"k" * 32, b"aad")


def test_decrypt_response_corrupted_in_transit_rejected() -> None:
    fake = FakeKms(corrupt="plaintext")
    with pytest.raises(KmsIntegrityError) as info:
        _wrapper(fake).unwrap(b"x" * 32, b"aad")
    assert isinstance(info.value, KeyUnwrapError)
    assert len(fake.requests) == TRANSIT_ATTEMPTS and "3 attempts" in str(info.value)


@pytest.mark.parametrize(("corruption", "call"), [
    ("ciphertext", "wrap"), ("verified", "wrap"), ("verified_aad", "wrap"),
    ("plaintext", "unwrap")])
def test_a_checksum_mismatch_in_transit_is_retried(corruption: str, call: str) -> None:
    """Google's guidance: discard an answer whose checksums disagree and retry a few times."""
    fake = FakeKms(corrupt=corruption, corrupt_times=TRANSIT_ATTEMPTS - 1)
    wrapper = _wrapper(fake)
    if call == "wrap":
        assert wrapper.wrap(b"k" * 32, b"aad") == (b"k" * 32)[::-1]
    else:
        assert wrapper.unwrap(b"x" * 31 + b"y", b"aad") == (b"x" * 31 + b"y")[::-1]
    assert len(fake.requests) == TRANSIT_ATTEMPTS


def test_an_answer_for_another_key_is_not_retried() -> None:
    fake = FakeKms(corrupt="name")
    with pytest.raises(KmsIntegrityError):
        _wrapper(fake).wrap(b"k" * 32, b"aad")
    assert len(fake.requests) == 1


def test_permission_denied_names_key_and_identity() -> None:
    fake = FakeKms(error=gexc.PermissionDenied("Permission denied on resource"))
    with pytest.raises(KeyAccessDenied) as info:
        _wrapper(fake, identity="principalSet://pool/attribute.workload_uid/u").unwrap(b"c", b"a")
    message = str(info.value)
    assert KEY in message and "principalSet://pool/attribute.workload_uid/u" in message
    assert isinstance(info.value, KeyUnwrapError)


def test_unknown_identity_still_named_as_unknown() -> None:
    fake = FakeKms(error=gexc.Forbidden("no"))
    with pytest.raises(KeyAccessDenied, match="unknown principal"):
        _wrapper(fake, identity=None).unwrap(b"c", b"a")


def test_missing_key_reported_as_not_found() -> None:
    with pytest.raises(KeyNotFound, match=KEY):
        _wrapper(FakeKms(error=gexc.NotFound("gone"))).unwrap(b"c", b"a")


def test_sts_refusal_reported_without_the_token() -> None:
    from sealbench.platforms.errors import CredentialError

    error = auth_exc.OAuthError(
        "Error code unauthorized_client: The given credential is rejected by the attribute "
        "condition.",
        '{"subject_token": "eyJ.secret.sig"}',
    )
    with pytest.raises(CredentialError) as info:
        _wrapper(FakeKms(error=error)).unwrap(b"c", b"a")
    assert "unauthorized_client" in str(info.value) and "eyJ" not in str(info.value)


def test_malformed_key_name_rejected() -> None:
    with pytest.raises(ValueError, match="cryptoKeys"):
        KmsKeyWrapper("projects/p/keyRings/r", FakeKms())  # type: ignore[arg-type]


def test_oversized_plaintext_rejected_before_sending() -> None:
    fake = FakeKms()
    with pytest.raises(KeyUnwrapError):
        _wrapper(fake).wrap(b"x" * (64 * 1024 + 1), b"")
    assert fake.requests == []
