"""Errors raised by :mod:`sealbench.crypto`.

Every failure in this package is a :class:`CryptoError`. Messages say what was received and what
was expected; they never contain key material, tokens or plaintext. Decryption fails closed with
one opaque error (:class:`IntegrityError`) so that callers learn nothing about *where* a
ciphertext was damaged (no oracle).

::

    CryptoError
    ├── IntegrityError            ciphertext or sealed payload failed authentication (opaque)
    │   └── DigestMismatchError   content hashes to something other than what was expected
    ├── KeyFormatError            a key, wrapped-key record or sealed envelope is malformed
    │   └── InsecureKeyFileError  a private-key file is readable by group or others
    ├── KeyUnwrapError            a key wrapper refused or failed to unwrap a DEK
    ├── ManifestError             a tree cannot be described by a canonical manifest
    ├── AttestationError          an attestation token is not acceptable
    │   ├── TokenInvalidError     malformed, bad signature, unknown key id, wrong algorithm
    │   ├── TokenExpiredError     ``exp`` is in the past (beyond leeway)
    │   ├── TokenNotYetValidError ``nbf``/``iat`` is in the future (beyond leeway)
    │   ├── IssuerMismatchError   ``iss`` is not the trusted issuer
    │   ├── AudienceMismatchError ``aud`` is not the expected audience
    │   └── PolicyViolationError  a claim violates the sealbench attestation policy
    └── LogError                  a transparency-log proof, checkpoint or signed note is refused
        ├── TreeError             a tree size, leaf range or hash length is impossible
        ├── InclusionProofError   a leaf is not proven to be in the tree
        ├── ConsistencyProofError a tree is not proven to extend an earlier one
        ├── NoteFormatError       a signed note, checkpoint or key string is malformed
        ├── UnknownKeyError       no signature by a trusted key
        └── NoteSignatureError    a trusted key's signature does not verify
"""

from __future__ import annotations

__all__ = [
    "AttestationError",
    "AudienceMismatchError",
    "ConsistencyProofError",
    "CryptoError",
    "DigestMismatchError",
    "InclusionProofError",
    "InsecureKeyFileError",
    "IntegrityError",
    "IssuerMismatchError",
    "KeyFormatError",
    "KeyUnwrapError",
    "LogError",
    "ManifestError",
    "NoteFormatError",
    "NoteSignatureError",
    "PolicyViolationError",
    "TokenExpiredError",
    "TokenInvalidError",
    "TokenNotYetValidError",
    "TreeError",
    "UnknownKeyError",
]


class CryptoError(Exception):
    """Base class of every error raised by :mod:`sealbench.crypto`."""


class IntegrityError(CryptoError):
    """A ciphertext failed authentication: tampered, truncated, reordered, wrong key or wrong
    associated data. Deliberately says nothing about which."""

    def __init__(self, message: str = "ciphertext failed authentication") -> None:
        super().__init__(message)


class DigestMismatchError(IntegrityError):
    """Content hashes to something other than the expected digest."""

    def __init__(self, what: str, expected: str, received: str) -> None:
        self.what = what
        self.expected = expected
        self.received = received
        super().__init__(f"{what}: digest {received} does not match the expected {expected}")


class KeyFormatError(CryptoError):
    """A key, a wrapped-key record or a sealed envelope is malformed or of an unknown version."""


class InsecureKeyFileError(KeyFormatError):
    """A private-key file can be read by users other than its owner."""


class KeyUnwrapError(CryptoError):
    """A key wrapper refused or failed to unwrap a data-encryption key."""


class ManifestError(CryptoError):
    """A directory tree cannot be described by a canonical manifest (symlink, special file,
    unsafe path) or a manifest document is malformed."""


class AttestationError(CryptoError):
    """An attestation token is not acceptable."""


class TokenInvalidError(AttestationError):
    """The token is malformed, its signature does not verify, its key id is unknown or it uses
    an algorithm other than RS256."""


class TokenExpiredError(AttestationError):
    """The token's ``exp`` lies in the past, beyond the allowed leeway."""


class TokenNotYetValidError(AttestationError):
    """The token's ``nbf`` or ``iat`` lies in the future, beyond the allowed leeway."""


class IssuerMismatchError(AttestationError):
    """The token was issued by someone other than the trusted issuer."""


class AudienceMismatchError(AttestationError):
    """The token was issued for another audience."""


class PolicyViolationError(AttestationError):
    """A claim violates the attestation policy. ``claim`` names it; ``expected`` and
    ``received`` describe the mismatch (never secrets)."""

    def __init__(self, claim: str, expected: str, received: str) -> None:
        self.claim = claim
        self.expected = expected
        self.received = received
        super().__init__(f"claim {claim!r}: expected {expected}, received {received}")


class LogError(CryptoError):
    """A transparency-log proof, checkpoint or signed note is not acceptable."""


class TreeError(LogError):
    """A tree size, leaf range or hash length that no valid tree or proof can have."""


class InclusionProofError(LogError):
    """An inclusion proof does not lead from the leaf to the tree's root."""


class ConsistencyProofError(LogError):
    """A consistency proof does not show that the later tree extends the earlier one (the log
    was rewritten, truncated or forked)."""


class NoteFormatError(LogError):
    """A signed note, checkpoint, cosignature or key string is malformed."""


class UnknownKeyError(LogError):
    """A signed note carries no signature by any trusted key."""


class NoteSignatureError(LogError):
    """A signature by a trusted key does not verify over the note."""
