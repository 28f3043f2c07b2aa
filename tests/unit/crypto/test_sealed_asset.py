"""The sealed-asset layout: round trips, and every substitution an attacker with write access to
the bucket could try fails closed."""

from __future__ import annotations

from pathlib import Path

import pytest

from sealbench.crypto.digest import sha256_digest
from sealbench.crypto.envelope import DataKey
from sealbench.crypto.errors import DigestMismatchError, IntegrityError, ManifestError
from sealbench.crypto.manifest import build_manifest
from sealbench.crypto.sealed_asset import (
    AssetIndex,
    build_index,
    group_of,
    object_name,
    open_bundle,
    open_index,
    open_weights,
    pack_bundle,
    seal_bundle,
    seal_index,
    seal_weights,
)

Sealed = tuple[DataKey, AssetIndex, dict[str, bytes], Path]


def _tree(root: Path) -> Path:
    for case in ("case-a", "case-b"):
        (root / case).mkdir(parents=True)
        for mod in ("t1n", "seg"):
            (root / case / f"{mod}.nii.gz").write_bytes(f"{case}-{mod}".encode() * 50)
    (root / "statistics.json").write_bytes(b'{"cases": 2}')
    return root


@pytest.fixture
def sealed(tmp_path: Path) -> tuple[DataKey, AssetIndex, dict[str, bytes], Path]:
    root = _tree(tmp_path / "ds")
    dek = DataKey.generate()
    index = build_index(dek, "ds-1", build_manifest(root))
    objects = {o.name: seal_bundle(dek, "ds-1", o, lambda p: (root / p).read_bytes())
               for o in index.objects}
    objects["manifest.sealed"] = seal_index(dek, index)
    return dek, index, objects, root


def test_round_trip_returns_every_file(sealed: Sealed) -> None:
    dek, index, objects, root = sealed
    opened = open_index(dek, "ds-1", objects["manifest.sealed"], index.manifest.digest)
    assert opened == index
    seen = {}
    for obj in opened.objects:
        seen.update(open_bundle(dek, opened, obj, objects[obj.name]))
    assert seen == {e.path: (root / e.path).read_bytes() for e in index.manifest.entries}


def test_object_names_reveal_no_case_id(sealed: Sealed) -> None:
    dek, index, _, _ = sealed
    names = [o.name for o in index.objects]
    assert all("case" not in n.removeprefix("cases/") for n in names)
    assert object_name(dek, "case-a") == object_name(dek, "case-a")
    assert object_name(dek, "case-a") != object_name(DataKey.generate(), "case-a")
    assert group_of("case-a/t1n.nii.gz") == "case-a" and group_of("statistics.json") == ""
    assert group_of("cases/BraTS-GLI-00001-000/t1n.nii.gz") == "cases/BraTS-GLI-00001-000"


def test_manifest_of_another_dataset_rejected(sealed: Sealed) -> None:
    dek, _, objects, _ = sealed
    with pytest.raises(DigestMismatchError):
        open_index(dek, "ds-1", objects["manifest.sealed"], sha256_digest(b"other dataset"))


def test_manifest_under_another_asset_id_rejected(sealed: Sealed) -> None:
    dek, index, objects, _ = sealed
    with pytest.raises(IntegrityError):
        open_index(dek, "ds-2", objects["manifest.sealed"], index.manifest.digest)


def test_swapped_cases_rejected(sealed: Sealed) -> None:
    dek, index, objects, _ = sealed
    a, b = (o for o in index.objects if o.name.startswith("cases/"))
    with pytest.raises(IntegrityError):
        open_bundle(dek, index, a, objects[b.name])


def test_case_from_another_dataset_rejected(tmp_path: Path) -> None:
    root = _tree(tmp_path / "ds")
    dek = DataKey.generate()
    index = build_index(dek, "ds-1", build_manifest(root))
    obj = index.objects[0]
    foreign = seal_bundle(dek, "ds-other", obj, lambda p: (root / p).read_bytes())
    with pytest.raises(IntegrityError):
        open_bundle(dek, index, obj, foreign)


def test_tampered_case_rejected(sealed: Sealed) -> None:
    dek, index, objects, _ = sealed
    obj = index.objects[0]
    damaged = bytearray(objects[obj.name])
    damaged[len(damaged) // 2] ^= 1
    with pytest.raises(IntegrityError):
        open_bundle(dek, index, obj, bytes(damaged))


def test_bundle_with_altered_file_rejected_by_manifest(tmp_path: Path) -> None:
    root = _tree(tmp_path / "ds")
    dek = DataKey.generate()
    index = build_index(dek, "ds-1", build_manifest(root))
    obj = index.objects[0]
    # The sealer encrypts content that differs from what the manifest promised.
    forged = seal_bundle(dek, "ds-1", obj, lambda p: b"forged " + (root / p).read_bytes())
    with pytest.raises(DigestMismatchError):
        open_bundle(dek, index, obj, forged)


def test_bundle_missing_a_file_rejected(tmp_path: Path) -> None:
    from sealbench.crypto.sealed_asset import object_aad
    from sealbench.crypto.streaming import encrypt_bytes

    root = _tree(tmp_path / "ds")
    dek = DataKey.generate()
    index = build_index(dek, "ds-1", build_manifest(root))
    obj = next(o for o in index.objects if len(o.files) == 2)
    partial = pack_bundle([(obj.files[0], (root / obj.files[0]).read_bytes())])
    ct = encrypt_bytes(dek.secret_bytes(), partial, object_aad("ds-1", obj.name))
    with pytest.raises(IntegrityError):
        open_bundle(dek, index, obj, ct)


def test_index_must_cover_every_file(sealed: Sealed) -> None:
    _, index, _, _ = sealed
    short = AssetIndex(asset_id=index.asset_id, manifest=index.manifest, objects=index.objects[1:])
    with pytest.raises(ManifestError):
        AssetIndex.from_bytes(short.to_bytes())


def test_weights_round_trip_and_substitution_rejected() -> None:
    dek = DataKey.generate()
    weights = b"onnx" * 1000
    ct = seal_weights(dek, "m-1", weights)
    assert open_weights(dek, "m-1", ct, sha256_digest(weights)) == weights
    with pytest.raises(DigestMismatchError):
        open_weights(dek, "m-1", seal_weights(dek, "m-1", b"other weights"), sha256_digest(weights))
    with pytest.raises(IntegrityError):
        open_weights(dek, "m-2", ct, sha256_digest(weights))
