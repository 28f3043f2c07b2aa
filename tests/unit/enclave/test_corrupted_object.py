"""A byte flipped on disk in a sealed object, in a bucket served over the Cloud Storage API, is an
integrity failure of that object (exit 14, the object named), never an "internal error".

The owners' sealed objects are copied into ``gcp-storage-emulator`` (in process, objects kept as
files under its data directory, the checksums Cloud Storage keeps in its metadata) and read by
the enclave through the production :class:`~sealbench.gcp.gcs.GcsBlobStore`. The emulator's
checksum is the one recorded at upload, so a byte flipped in the file afterwards is what a disk
or an insider with write access to the storage backend would do."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials

from sealbench.contract.errors import AssetIntegrityError
from sealbench.contract.result import (
    FAILURE_OBJECT,
    FAILURE_TOKEN_OBJECT,
    WRITE_CHECK_OBJECT,
    FailureRecord,
)
from sealbench.contract.spec import AssetLocation
from sealbench.crypto.envelope import KeyWrapper
from sealbench.crypto.errors import IntegrityError
from sealbench.enclave.run import RunReport, run_enclave
from sealbench.gcp.gcs import GcsBlobStore, make_storage_client
from sealbench.mocktee.storage import EmulatorProcess, free_port
from sealbench.platforms import BlobStore, LocalBlobStore, ObjectCorrupted, open_storage_uri

DATA_BUCKET = "hospital-sealed"
MODEL_BUCKET = "modelco-sealed"


@dataclass(frozen=True)
class Emulator:
    url: str
    data_dir: Path

    def store(self, bucket: str) -> GcsBlobStore:
        client = make_storage_client("emulated", AnonymousCredentials(), self.url)
        return GcsBlobStore(client, bucket)

    def on_disk(self, bucket: str, name: str) -> Path:
        """The file that holds object ``name`` of ``bucket``."""
        found = [
            p
            for p in self.data_dir.rglob(Path(name).name)
            if p.is_file() and p.as_posix().endswith(f"/{bucket}/{name}")
        ]
        assert len(found) == 1, found
        return found[0]


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    port = free_port()
    data_dir = tmp_path / "gcs"
    process = EmulatorProcess(str(data_dir), port)
    process.start()
    try:
        url = f"http://127.0.0.1:{port}"
        client = make_storage_client("emulated", AnonymousCredentials(), url)
        for bucket in (DATA_BUCKET, MODEL_BUCKET):
            client.create_bucket(bucket)
        yield Emulator(url, data_dir)
    finally:
        process.stop()


@dataclass
class GcsAccess:
    """``gs://`` locations through GcsBlobStore on the emulator; ``file://`` (the results) and
    the keys as in the unit world."""

    emulator: Emulator
    inner: Any

    def store(self, uri: str, pool_provider: str) -> tuple[BlobStore, str]:
        if uri.startswith("gs://"):
            return open_storage_uri(uri, self.emulator.store)
        return self.inner.store(uri, pool_provider)

    def key_wrapper(self, owner: AssetLocation) -> KeyWrapper:
        return self.inner.key_wrapper(owner)


def _upload(source: LocalBlobStore, target: GcsBlobStore, prefix: str) -> list[str]:
    names = sorted(source.list())
    for name in names:
        target.put_bytes(prefix + name, source.get_bytes(name, 1 << 30))
    return names


def _sealed_in_emulator(world: Any, emulator: Emulator) -> tuple[Any, list[str]]:
    """Copy both owners' sealed objects into the emulator; the run spec that points there, and
    the dataset's object names."""
    data_names = _upload(world.data_bucket, emulator.store(DATA_BUCKET), "sealed/ds-1/")
    _upload(world.model_bucket, emulator.store(MODEL_BUCKET), "sealed/model-1/")
    spec = world.with_spec(
        dataset={**world.spec.dataset.model_dump(), "uri": f"gs://{DATA_BUCKET}/sealed/ds-1"},
        model={**world.spec.model.model_dump(), "uri": f"gs://{MODEL_BUCKET}/sealed/model-1"},
    )
    return spec, data_names


def _run(world: Any, emulator: Emulator, spec: Any) -> RunReport:
    return run_enclave(
        spec.to_environ(),
        world.attester(spec),
        access=lambda _run: GcsAccess(emulator, world.access),
    )


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset % len(data)] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("bucket", "victim"),
    [
        (DATA_BUCKET, "dek.wrapped"),  # step 2: key release
        (MODEL_BUCKET, "weights.sealed"),  # step 3: the model
        (DATA_BUCKET, "manifest.sealed"),  # step 4: the dataset index
        (DATA_BUCKET, "case"),  # step 5: a case object, read by the prefetch thread
    ],
)
def test_byte_flipped_on_disk_reported_as_integrity_failure(
    world: Any, emulator: Emulator, bucket: str, victim: str
) -> None:
    spec, data_names = _sealed_in_emulator(world, emulator)
    prefix = "sealed/ds-1/" if bucket == DATA_BUCKET else "sealed/model-1/"
    if victim == "case":
        victim = sorted(n for n in data_names if n.startswith("cases/"))[1]
    name = prefix + victim
    _flip(emulator.on_disk(bucket, name), offset=len(name) * 7)

    with pytest.raises(AssetIntegrityError) as info:
        _run(world, emulator, spec)

    error = info.value
    assert error.exit_code == 14
    assert name in str(error)
    assert "internal error" not in str(error)
    if victim == "weights.sealed":
        # The model is streamed (ranged reads carry no whole-object CRC32C): the AEAD's tag is
        # what catches the flipped byte, with the same error and the object named.
        assert type(error.__cause__) is IntegrityError
    else:
        assert isinstance(error.__cause__, ObjectCorrupted)
    results = LocalBlobStore(world.results())
    assert set(results.list()) == {WRITE_CHECK_OBJECT, FAILURE_OBJECT,  # no result uploaded
                                   FAILURE_TOKEN_OBJECT}
    record = FailureRecord.from_bytes(results.get_bytes(FAILURE_OBJECT, 1 << 20))
    assert record.error == "AssetIntegrityError" and record.exit_code == 14
    assert name in record.reason and "internal error" not in record.reason
    for folder in (world.prepared / "data" / "cases").iterdir():
        assert folder.name not in record.reason  # the opaque object name, never a case id


def test_intact_objects_served_by_the_emulator_evaluate(world: Any, emulator: Emulator) -> None:
    """The same set-up without a flipped byte runs to the end (the failures above are the
    flipped byte's, not the emulator's)."""
    spec, _names = _sealed_in_emulator(world, emulator)
    report = _run(world, emulator, spec)
    assert report.published is not None
    assert FAILURE_OBJECT not in set(LocalBlobStore(world.results()).list())
