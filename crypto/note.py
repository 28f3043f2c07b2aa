"""Signed notes (C2SP ``signed-note``), transparency-log checkpoints (C2SP ``tlog-checkpoint``)
and witness cosignatures (C2SP ``tlog-cosignature``, Ed25519 ``cosignature/v1``): the formats
Go's checksum database and Rekor v2 use, so any tool that speaks them can check sealbench's log.

Keys (Ed25519; ``type`` 0x01 signs notes, 0x04 cosigns checkpoints)::

    key ID        = SHA-256(name || 0x0A || type || 32-byte public key)[:4], big-endian uint32
    verifier key  = name "+" 8 hex digits of the key ID "+" base64(type || public key)
    signer key    = "PRIVATE+KEY+" name "+" key ID hex "+" base64(type || 32-byte seed)

Names are non-empty UTF-8 with no white space and no ``+``. A signed note is UTF-8 text with
no control character but newline, ending in a newline, then a blank line, then one line per
signature::

    — <name> base64(key ID || signature)\\n        (em dash U+2014, one space each side)

The Ed25519 signature (type 0x01) covers the note text, final newline included. A checkpoint
is a note whose text is::

    <origin>\\n<tree size, decimal, no leading zero>\\n<base64 of the 32-byte root hash>\\n
    [<extension line>\\n ...]

A cosignature is a signature line whose bytes are ``key ID || u64 timestamp (big-endian) ||
Ed25519 signature`` over ``"cosignature/v1\\ntime <timestamp>\\n" || checkpoint text``; it says
that the cosigner had verified this checkpoint as consistent with every earlier one it saw.

A key endorsement (sealbench's, for rotating a log key) is a note whose text is
``"sealbench/log-key-endorsement/v1\\n" <origin> "\\n" <new verifier key> "\\n"``, signed by the
previous key and by the new one.

Verification raises (:class:`~sealbench.crypto.errors.NoteFormatError`,
:class:`~sealbench.crypto.errors.UnknownKeyError`,
:class:`~sealbench.crypto.errors.NoteSignatureError`); it never returns a bool.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import stat
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from sealbench.crypto.errors import (
    InsecureKeyFileError,
    KeyFormatError,
    NoteFormatError,
    NoteSignatureError,
    UnknownKeyError,
)
from sealbench.crypto.files import write_private
from sealbench.crypto.tlog import HASH_SIZE, MAX_TREE_SIZE

__all__ = [
    "ALG_COSIGNATURE",
    "ALG_ED25519",
    "MAX_NOTE_BYTES",
    "Checkpoint",
    "KeyEndorsement",
    "Note",
    "NoteSignature",
    "SignerKey",
    "VerifiedCheckpoint",
    "VerifierKey",
    "cosign",
    "key_id",
    "open_checkpoint",
    "read_signer_key",
    "sign_checkpoint",
    "sign_note",
    "verify_cosignature",
    "write_signer_key",
]

ALG_ED25519: Final = 0x01
ALG_COSIGNATURE: Final = 0x04
MAX_NOTE_BYTES: Final = 1 << 16
MAX_SIGNATURES: Final = 100
_SIG_PREFIX: Final = "— "
_COSIGN_HEADER: Final = "cosignature/v1\n"
_ENDORSEMENT_HEADER: Final = "sealbench/log-key-endorsement/v1"
_MAX_KEY_FILE: Final = 4096
_SIZE = re.compile(r"^(0|[1-9][0-9]{0,15})$")


def _valid_name(name: str) -> bool:
    return bool(name) and "+" not in name and not any(ch.isspace() for ch in name)


def _b64decode(text: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
        raise NoteFormatError(f"{what} is not standard base64") from exc
    if base64.b64encode(raw).decode("ascii") != text:
        raise NoteFormatError(f"{what} is not canonical base64")
    return raw


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def key_id(name: str, alg: int, public: bytes) -> int:
    """``SHA-256(name || 0x0A || alg || public)[:4]`` as a big-endian integer."""
    digest = hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([alg]) + public).digest()
    return int.from_bytes(digest[:4], "big")


@dataclass(frozen=True)
class VerifierKey:
    """A public key that verifies note signatures (type 0x01) or cosignatures (type 0x04)."""

    name: str
    alg: int
    public: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not _valid_name(self.name):
            raise NoteFormatError(f"key name {self.name[:80]!r} is empty or has a space or '+'")
        if self.alg not in (ALG_ED25519, ALG_COSIGNATURE):
            raise NoteFormatError(f"key type 0x{self.alg:02x} is not Ed25519 (0x01 or 0x04)")
        if len(self.public) != 32:
            raise NoteFormatError(f"an Ed25519 public key is 32 bytes, received {len(self.public)}")

    @property
    def key_id(self) -> int:
        return key_id(self.name, self.alg, self.public)

    @property
    def label(self) -> str:
        """``name+keyid`` (what error messages and listings show)."""
        return f"{self.name}+{self.key_id:08x}"

    @classmethod
    def from_string(cls, text: str) -> VerifierKey:
        """Parse ``name+keyid+base64(type||key)``; the key ID must match the key."""
        parts = text.strip().split("+", 2)
        if len(parts) != 3 or not re.fullmatch(r"[0-9a-f]{8}", parts[1]):
            raise NoteFormatError(f"{text[:120]!r} is not a verifier key (name+keyid+key)")
        raw = _b64decode(parts[2], "the verifier key")
        if not raw:
            raise NoteFormatError("the verifier key is empty")
        key = cls(parts[0], raw[0], raw[1:])
        if key.key_id != int(parts[1], 16):
            raise NoteFormatError(
                f"verifier key {parts[0]}+{parts[1]}: the key ID does not match the key "
                f"(expected {key.key_id:08x})"
            )
        return key

    def to_string(self) -> str:
        return f"{self.name}+{self.key_id:08x}+{_b64(bytes([self.alg]) + self.public)}"

    def verify(self, message: bytes, signature: bytes) -> None:
        try:
            Ed25519PublicKey.from_public_bytes(self.public).verify(signature, message)
        except (InvalidSignature, ValueError) as exc:
            raise NoteSignatureError(f"the signature by {self.label} does not verify") from exc


class SignerKey:
    """An Ed25519 private key with its note name; ``repr`` never shows the key."""

    __slots__ = ("_private", "alg", "name")

    def __init__(self, name: str, private: Ed25519PrivateKey, alg: int = ALG_ED25519) -> None:
        self.name = name
        self.alg = alg
        self._private = private
        self.verifier()  # validates name and type

    def __repr__(self) -> str:
        return f"SignerKey({self.verifier().label})"

    @classmethod
    def generate(cls, name: str, alg: int = ALG_ED25519) -> SignerKey:
        return cls(name, Ed25519PrivateKey.generate(), alg)

    @classmethod
    def from_string(cls, text: str) -> SignerKey:
        """Parse ``PRIVATE+KEY+name+keyid+base64(type||seed)``."""
        parts = text.strip().split("+", 4)
        if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
            raise KeyFormatError("not a signer key (PRIVATE+KEY+name+keyid+key)")
        if not re.fullmatch(r"[0-9a-f]{8}", parts[3]):
            raise KeyFormatError("the signer key's key ID is not 8 hex digits")
        try:
            raw = _b64decode(parts[4], "the signer key")
        except NoteFormatError as exc:
            raise KeyFormatError(str(exc)) from exc
        if len(raw) != 33:
            raise KeyFormatError(f"an Ed25519 signer key is 33 bytes, received {len(raw)}")
        try:
            key = cls(parts[2], Ed25519PrivateKey.from_private_bytes(raw[1:]), raw[0])
        except NoteFormatError as exc:
            raise KeyFormatError(str(exc)) from exc
        if key.verifier().key_id != int(parts[3], 16):
            raise KeyFormatError("the signer key's key ID does not match its public key")
        return key

    def to_string(self) -> str:
        seed = self._private.private_bytes(
            serialization.Encoding.Raw,
            serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )
        ident = self.verifier().key_id
        return f"PRIVATE+KEY+{self.name}+{ident:08x}+{_b64(bytes([self.alg]) + seed)}"

    def verifier(self) -> VerifierKey:
        public = self._private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return VerifierKey(self.name, self.alg, public)

    def sign(self, message: bytes) -> bytes:
        return self._private.sign(message)


@dataclass(frozen=True)
class NoteSignature:
    """One signature line: the signer's name, key ID and the signature bytes after the ID."""

    name: str
    key_id: int
    signature: bytes = field(repr=False)

    def line(self) -> str:
        blob = struct.pack(">I", self.key_id) + self.signature
        return f"{_SIG_PREFIX}{self.name} {_b64(blob)}\n"

    @classmethod
    def from_line(cls, line: str) -> NoteSignature:
        """Parse ``— name base64`` (without the newline)."""
        if not line.startswith(_SIG_PREFIX):
            raise NoteFormatError("a signature line does not start with an em dash and a space")
        name, sep, blob = line[len(_SIG_PREFIX) :].partition(" ")
        if not sep or not _valid_name(name) or not blob:
            raise NoteFormatError("a signature line has no valid key name and signature")
        raw = _b64decode(blob, "a signature")
        if len(raw) < 5:
            raise NoteFormatError("a signature is shorter than its key ID and one byte")
        return cls(name, struct.unpack(">I", raw[:4])[0], raw[4:])


@dataclass(frozen=True)
class Note:
    """A note's text (final newline included) and its signature lines, in order."""

    text: str
    signatures: tuple[NoteSignature, ...]

    @classmethod
    def parse(cls, msg: bytes) -> Note:
        """Split a signed note into text and signatures (format only: nothing is verified)."""
        if len(msg) > MAX_NOTE_BYTES:
            raise NoteFormatError(f"a note of {len(msg)} bytes exceeds {MAX_NOTE_BYTES}")
        try:
            decoded = msg.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise NoteFormatError("a note is not valid UTF-8") from exc
        if any(ch < " " and ch != "\n" for ch in decoded):
            raise NoteFormatError("a note contains a control character other than newline")
        split = decoded.rfind("\n\n")
        if split < 0:
            raise NoteFormatError("a note has no blank line before its signatures")
        text, block = decoded[: split + 1], decoded[split + 2 :]
        if not block or not block.endswith("\n"):
            raise NoteFormatError("a note has no signature lines, or they do not end in newline")
        lines = block[:-1].split("\n")
        if len(lines) > MAX_SIGNATURES:
            raise NoteFormatError(f"a note has more than {MAX_SIGNATURES} signatures")
        return cls(text, tuple(NoteSignature.from_line(line) for line in lines))

    def to_bytes(self) -> bytes:
        return (self.text + "\n" + "".join(s.line() for s in self.signatures)).encode("utf-8")

    def verify(self, verifiers: Iterable[VerifierKey]) -> tuple[VerifierKey, ...]:
        """The trusted keys (type 0x01) whose signatures verify over the text. Signatures by
        unknown keys are ignored; a trusted key's failing signature raises
        :class:`NoteSignatureError`; no trusted signature at all raises
        :class:`UnknownKeyError`."""
        known = {(v.name, v.key_id): v for v in verifiers if v.alg == ALG_ED25519}
        message = self.text.encode("utf-8")
        verified: dict[tuple[str, int], VerifierKey] = {}
        for sig in self.signatures:
            key = known.get((sig.name, sig.key_id))
            if key is None or (sig.name, sig.key_id) in verified:
                continue
            key.verify(message, sig.signature)
            verified[(sig.name, sig.key_id)] = key
        if not verified:
            seen = ", ".join(f"{s.name}+{s.key_id:08x}" for s in self.signatures[:5])
            trusted = ", ".join(v.label for v in known.values()) or "none"
            raise UnknownKeyError(
                f"the note is signed by {seen}, none of which is a trusted key ({trusted})"
            )
        return tuple(verified.values())

    def with_signature(self, signature: NoteSignature) -> Note:
        """This note with ``signature`` added (replacing one by the same key)."""
        kept = tuple(
            s for s in self.signatures
            if (s.name, s.key_id) != (signature.name, signature.key_id)
        )
        return Note(self.text, (*kept, signature))


def _check_text(text: str) -> None:
    if not text.endswith("\n"):
        raise NoteFormatError("a note's text must end in a newline")
    if any(ch < " " and ch != "\n" for ch in text):
        raise NoteFormatError("a note's text contains a control character other than newline")


def sign_note(text: str, signers: Sequence[SignerKey]) -> Note:
    """``text`` signed by each of ``signers`` (type 0x01 keys)."""
    _check_text(text)
    if not signers:
        raise ValueError("a note needs at least one signer")
    message = text.encode("utf-8")
    sigs = []
    for signer in signers:
        if signer.alg != ALG_ED25519:
            raise NoteFormatError(f"{signer.name} is a cosigner key, not a note signer")
        sigs.append(NoteSignature(signer.name, signer.verifier().key_id, signer.sign(message)))
    return Note(text, tuple(sigs))


@dataclass(frozen=True)
class Checkpoint:
    """A log's tree head: origin, tree size, root hash and optional extension lines."""

    origin: str
    size: int
    root_hash: bytes = field(repr=False)
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.origin or "\n" in self.origin or any(ch < " " for ch in self.origin):
            raise NoteFormatError(f"checkpoint origin {self.origin[:80]!r} is not one line")
        if not 0 <= self.size <= MAX_TREE_SIZE:
            raise NoteFormatError(f"checkpoint tree size {self.size} is out of range")
        if len(self.root_hash) != HASH_SIZE:
            raise NoteFormatError(f"a root hash is {HASH_SIZE} bytes, received "
                                  f"{len(self.root_hash)}")
        for line in self.extensions:
            if not line or "\n" in line:
                raise NoteFormatError("checkpoint extension lines must be non-empty single lines")

    def to_text(self) -> str:
        lines = [self.origin, str(self.size), _b64(self.root_hash), *self.extensions]
        return "".join(f"{line}\n" for line in lines)

    @classmethod
    def from_text(cls, text: str) -> Checkpoint:
        if not text.endswith("\n"):
            raise NoteFormatError("a checkpoint's text must end in a newline")
        lines = text[:-1].split("\n")
        if len(lines) < 3:
            raise NoteFormatError(f"a checkpoint has at least 3 lines, received {len(lines)}")
        origin, size, root, *extensions = lines
        if not _SIZE.match(size):
            raise NoteFormatError(f"checkpoint tree size {size[:30]!r} is not a decimal number")
        return cls(origin, int(size), _b64decode(root, "the checkpoint root hash"),
                   tuple(extensions))

    def label(self) -> str:
        return f"size {self.size}, root {self.root_hash.hex()[:16]}…"


@dataclass(frozen=True)
class VerifiedCheckpoint:
    """A checkpoint whose signature by one of the trusted keys verified, and the note it came
    in (kept whole: it is the evidence)."""

    checkpoint: Checkpoint
    note: Note
    signed_by: tuple[VerifierKey, ...]

    def to_bytes(self) -> bytes:
        return self.note.to_bytes()


def sign_checkpoint(checkpoint: Checkpoint, signer: SignerKey) -> bytes:
    """The signed note of ``checkpoint``: deterministic (Ed25519), so every server process
    produces the same bytes for the same tree and key."""
    return sign_note(checkpoint.to_text(), [signer]).to_bytes()


def open_checkpoint(
    msg: bytes, verifiers: Iterable[VerifierKey], *, origin: str | None = None
) -> VerifiedCheckpoint:
    """Parse a signed checkpoint and verify it is signed by one of ``verifiers`` (and, when
    given, that its origin is ``origin``)."""
    note = Note.parse(msg)
    checkpoint = Checkpoint.from_text(note.text)
    if origin is not None and checkpoint.origin != origin:
        raise NoteFormatError(
            f"the checkpoint is for log {checkpoint.origin[:80]!r}, expected {origin!r}"
        )
    signed_by = note.verify(verifiers)
    return VerifiedCheckpoint(checkpoint, note, signed_by)


def _cosigned_message(checkpoint: Checkpoint, timestamp: int) -> bytes:
    return f"{_COSIGN_HEADER}time {timestamp}\n{checkpoint.to_text()}".encode()


def cosign(checkpoint: Checkpoint, signer: SignerKey, timestamp: int) -> NoteSignature:
    """A ``cosignature/v1`` line by ``signer`` (a type 0x04 key) over ``checkpoint``."""
    if signer.alg != ALG_COSIGNATURE:
        raise NoteFormatError(f"{signer.name} is not a cosigner key (type 0x04)")
    if not 0 <= timestamp < 1 << 63:
        raise NoteFormatError(f"cosignature timestamp {timestamp} is out of range")
    sig = signer.sign(_cosigned_message(checkpoint, timestamp))
    return NoteSignature(
        signer.name, signer.verifier().key_id, struct.pack(">Q", timestamp) + sig
    )


def verify_cosignature(
    checkpoint: Checkpoint, signature: NoteSignature, cosigner: VerifierKey
) -> int:
    """Verify a ``cosignature/v1`` by ``cosigner`` over ``checkpoint``; return its timestamp."""
    if cosigner.alg != ALG_COSIGNATURE:
        raise NoteFormatError(f"{cosigner.label} is not a cosigner key (type 0x04)")
    if (signature.name, signature.key_id) != (cosigner.name, cosigner.key_id):
        raise UnknownKeyError(
            f"the cosignature is by {signature.name}+{signature.key_id:08x}, "
            f"not {cosigner.label}"
        )
    if len(signature.signature) != 8 + 64:
        raise NoteFormatError(
            f"a cosignature is 72 bytes after its key ID, received {len(signature.signature)}"
        )
    (timestamp,) = struct.unpack(">Q", signature.signature[:8])
    if timestamp >= 1 << 63:
        raise NoteFormatError("the cosignature's timestamp is out of range")
    cosigner.verify(_cosigned_message(checkpoint, timestamp), signature.signature[8:])
    return int(timestamp)


@dataclass(frozen=True)
class KeyEndorsement:
    """The statement, signed by a log's previous key and its new key, that the new key signs
    the log ``origin`` from now on."""

    origin: str
    new_key: VerifierKey

    def to_text(self) -> str:
        return f"{_ENDORSEMENT_HEADER}\n{self.origin}\n{self.new_key.to_string()}\n"

    def sign(self, previous: SignerKey, new: SignerKey) -> bytes:
        if new.verifier() != self.new_key:
            raise NoteFormatError("the new signer is not the endorsed key")
        return sign_note(self.to_text(), [previous, new]).to_bytes()

    @classmethod
    def open(cls, msg: bytes, previous: VerifierKey) -> KeyEndorsement:
        """Parse an endorsement and verify the previous key's and the new key's signatures."""
        note = Note.parse(msg)
        lines = note.text[:-1].split("\n")
        if len(lines) != 3 or lines[0] != _ENDORSEMENT_HEADER:
            raise NoteFormatError("the note is not a sealbench log key endorsement")
        endorsement = cls(lines[1], VerifierKey.from_string(lines[2]))
        signed = note.verify([previous, endorsement.new_key])
        if {k.key_id for k in signed} != {previous.key_id, endorsement.new_key.key_id}:
            raise UnknownKeyError(
                f"the endorsement of {endorsement.new_key.label} is not signed by both "
                f"{previous.label} and the new key"
            )
        return endorsement


def write_signer_key(path: Path, key: SignerKey, *, overwrite: bool = False) -> None:
    """Write ``key`` to ``path`` with mode 0600 through an exclusive temporary file; without
    ``overwrite`` an existing file is never replaced (``FileExistsError``)."""
    write_private(path, (key.to_string() + "\n").encode("ascii"), overwrite=overwrite)


def read_signer_key(path: Path) -> SignerKey:
    """Read a key written by :func:`write_signer_key`; refuses a file that group or others
    can access (:class:`InsecureKeyFileError`)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise KeyFormatError(f"signer key {str(path)!r} is not a regular file")
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise InsecureKeyFileError(
                f"signer key {str(path)!r} has mode {stat.S_IMODE(st.st_mode):04o}; expected "
                "0600 (group/others must have no access: chmod 600)"
            )
        data = f.read(_MAX_KEY_FILE + 1)
    if len(data) > _MAX_KEY_FILE:
        raise KeyFormatError(f"signer key {str(path)!r} is larger than {_MAX_KEY_FILE} bytes")
    try:
        return SignerKey.from_string(data.decode("ascii"))
    except UnicodeDecodeError as exc:
        raise KeyFormatError(f"signer key {str(path)!r} is not ASCII") from exc
