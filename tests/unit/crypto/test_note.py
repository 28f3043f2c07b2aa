"""Signed notes, checkpoints and cosignatures: Go's known answers
(``tests/vectors/go_signed_note.json``), the exact checkpoint and cosignature byte formats of
C2SP, and every forgery refused (another key, a mangled signature, a mangled note, a checkpoint
of another log)."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sealbench.crypto import note
from sealbench.crypto.errors import (
    InsecureKeyFileError,
    KeyFormatError,
    NoteFormatError,
    NoteSignatureError,
    UnknownKeyError,
)
from sealbench.crypto.tlog import leaf_hash

GO = json.loads((Path(__file__).parents[2] / "vectors" / "go_signed_note.json").read_text())
ROOT = leaf_hash(b"root")


def test_go_signer_and_verifier_keys_round_trip() -> None:
    signer = note.SignerKey.from_string(GO["signer_key"])
    assert signer.to_string() == GO["signer_key"]
    assert signer.verifier().to_string() == GO["verifier_key"]
    assert note.VerifierKey.from_string(GO["verifier_key"]).key_id == 0xC74F20A3
    assert "PRIVATE" not in repr(signer) and "AYEK" not in repr(signer)


def test_go_signed_note_known_answer() -> None:
    signer = note.SignerKey.from_string(GO["signer_key"])
    signed = note.sign_note(GO["text"], [signer]).to_bytes()
    assert signed == GO["signed"].encode("utf-8")
    parsed = note.Note.parse(signed)
    assert parsed.text == GO["text"]
    assert parsed.verify([note.VerifierKey.from_string(GO["verifier_key"])])[0].name == (
        "PeterNeumann"
    )


def test_signatures_by_unknown_keys_are_ignored_not_trusted() -> None:
    both = (GO["signed"] + GO["other_signature_line"] + "\n").encode("utf-8")
    parsed = note.Note.parse(both)
    peter = note.VerifierKey.from_string(GO["verifier_key"])
    enoch = note.VerifierKey.from_string(GO["other_verifier_key"])
    assert parsed.verify([peter]) == (peter,)
    assert parsed.verify([enoch]) == (enoch,)
    with pytest.raises(UnknownKeyError, match="none of which is a trusted key"):
        parsed.verify([note.SignerKey.generate("PeterNeumann").verifier()])


def test_mangled_verifier_keys_refused() -> None:
    key = GO["verifier_key"]
    for bad in (key[:-1], key + "A", key.replace("c74f20a3", "c74f20a4"), "PeterNeumann+c74f20a3",
                key.replace("ARpc", "ZRpc")):
        with pytest.raises(NoteFormatError):
            note.VerifierKey.from_string(bad)
    with pytest.raises(KeyFormatError):
        note.SignerKey.from_string(GO["signer_key"].replace("c74f20a3", "00000000"))


@pytest.mark.parametrize(
    "mangle",
    [
        lambda s: s.replace("\n\n", "\n"),  # no blank line
        lambda s: s[:-1],  # signature block without final newline
        lambda s: "\x01" + s,  # control character
        lambda s: s.replace("— PeterNeumann", "— Peter Neumann"),  # name with a space
        lambda s: s + "Unexpected line.\n",
        lambda s: s.replace("— ", "-- "),  # not an em dash
    ],
)
def test_malformed_notes_refused(mangle: object) -> None:
    with pytest.raises(NoteFormatError):
        note.Note.parse(mangle(GO["signed"]).encode("utf-8"))  # type: ignore[operator]


def test_altered_text_or_signature_fails_loudly() -> None:
    peter = note.VerifierKey.from_string(GO["verifier_key"])
    altered = GO["signed"].replace("cryptography", "cryptographY").encode("utf-8")
    with pytest.raises(NoteSignatureError, match="PeterNeumann\\+c74f20a3"):
        note.Note.parse(altered).verify([peter])
    parsed = note.Note.parse(GO["signed"].encode("utf-8"))
    sig = parsed.signatures[0]
    flipped = note.NoteSignature(sig.name, sig.key_id, bytes([sig.signature[0] ^ 1])
                                 + sig.signature[1:])
    with pytest.raises(NoteSignatureError):
        note.Note(parsed.text, (flipped,)).verify([peter])


def test_checkpoint_format_is_byte_exact() -> None:
    signer = note.SignerKey.generate("registry.example/sealbench")
    cp = note.Checkpoint("registry.example/sealbench", 20852163, ROOT)
    signed = note.sign_checkpoint(cp, signer)
    text, _, sigs = signed.decode("utf-8").partition("\n\n")
    assert text == (
        f"registry.example/sealbench\n20852163\n{base64.b64encode(ROOT).decode()}"
    )
    assert sigs.startswith("— registry.example/sealbench ") and sigs.endswith("=\n")
    blob = base64.b64decode(sigs.split(" ")[2])
    assert blob[:4] == signer.verifier().key_id.to_bytes(4, "big") and len(blob) == 68
    opened = note.open_checkpoint(signed, [signer.verifier()], origin=cp.origin)
    assert opened.checkpoint == cp and opened.to_bytes() == signed
    assert note.sign_checkpoint(cp, signer) == signed  # deterministic


@given(st.integers(0, 2**40), st.binary(min_size=32, max_size=32),
       st.lists(st.text(alphabet="abc xyz=/", min_size=1, max_size=10), max_size=3))
def test_checkpoint_text_round_trips(size: int, root: bytes, extensions: list[str]) -> None:
    cp = note.Checkpoint("o.example/log", size, root, tuple(extensions))
    assert note.Checkpoint.from_text(cp.to_text()) == cp


@pytest.mark.parametrize(
    "text",
    [
        "o\n007\nAAAA\n",  # leading zero
        "o\n-1\n" + base64.b64encode(ROOT).decode() + "\n",
        "o\n1\n" + base64.b64encode(ROOT[:31]).decode() + "\n",  # short root
        "o\n1\n",
        "\n1\n" + base64.b64encode(ROOT).decode() + "\n",  # empty origin
        "o\n1\n" + base64.b64encode(ROOT).decode() + "\n\n",  # empty extension line
    ],
)
def test_malformed_checkpoints_refused(text: str) -> None:
    with pytest.raises(NoteFormatError):
        note.Checkpoint.from_text(text)


def test_checkpoint_signed_by_another_key_refused() -> None:
    registry, other = note.SignerKey.generate("reg.example/log"), note.SignerKey.generate(
        "reg.example/log")
    signed = note.sign_checkpoint(note.Checkpoint("reg.example/log", 3, ROOT), other)
    with pytest.raises(UnknownKeyError, match=r"reg\.example/log\+[0-9a-f]{8}"):
        note.open_checkpoint(signed, [registry.verifier()])


def test_checkpoint_of_another_log_refused() -> None:
    signer = note.SignerKey.generate("reg.example/log")
    signed = note.sign_checkpoint(note.Checkpoint("other.example/log", 3, ROOT), signer)
    with pytest.raises(NoteFormatError, match=r"expected 'reg\.example/log'"):
        note.open_checkpoint(signed, [signer.verifier()], origin="reg.example/log")


def test_cosignature_format_and_verification() -> None:
    witness = note.SignerKey.generate("witness.example/w1", note.ALG_COSIGNATURE)
    cp = note.Checkpoint("reg.example/log", 11, ROOT)
    sig = note.cosign(cp, witness, 1679315147)
    raw = base64.b64decode(sig.line().split(" ")[2])
    assert len(raw) == 4 + 8 + 64 and raw[4:12] == (1679315147).to_bytes(8, "big")
    assert base64.b64decode(witness.verifier().to_string().split("+", 2)[2])[0] == 0x04
    assert note.verify_cosignature(cp, sig, witness.verifier()) == 1679315147
    # the signed message is "cosignature/v1\ntime T\n" + the checkpoint text
    message = f"cosignature/v1\ntime 1679315147\n{cp.to_text()}".encode()
    witness.verifier().verify(message, raw[12:])
    with pytest.raises(NoteSignatureError):
        note.verify_cosignature(note.Checkpoint("reg.example/log", 12, ROOT), sig,
                                witness.verifier())
    with pytest.raises(NoteFormatError, match="not a cosigner key"):
        note.cosign(cp, note.SignerKey.generate("w"), 1)
    # a cosignature is not a log signature: a note verifier ignores it
    signed = note.Note(cp.to_text(), (sig,))
    with pytest.raises(UnknownKeyError):
        signed.verify([witness.verifier()])


def test_key_endorsement_needs_both_keys() -> None:
    old, new = note.SignerKey.generate("reg.example/log"), note.SignerKey.generate(
        "reg.example/log")
    statement = note.KeyEndorsement("reg.example/log", new.verifier())
    signed = statement.sign(old, new)
    assert note.KeyEndorsement.open(signed, old.verifier()) == statement
    impostor = note.SignerKey.generate("reg.example/log")
    forged = note.KeyEndorsement("reg.example/log", impostor.verifier()).sign(impostor, impostor)
    with pytest.raises(UnknownKeyError):
        note.KeyEndorsement.open(forged, old.verifier())


def test_signer_key_file_is_private(tmp_path: Path) -> None:
    key = note.SignerKey.generate("reg.example/log")
    path = tmp_path / "log.key"
    note.write_signer_key(path, key)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert note.read_signer_key(path).verifier() == key.verifier()
    with pytest.raises(FileExistsError):
        note.write_signer_key(path, note.SignerKey.generate("x"))
    os.chmod(path, 0o644)
    with pytest.raises(InsecureKeyFileError, match="chmod 600"):
        note.read_signer_key(path)
