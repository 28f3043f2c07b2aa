"""The enclave streams ``weights.sealed``: a multi-segment model arrives intact in the runner,
and a truncated object, a byte flipped in its middle, or one larger than the cap fails closed
with the same errors as before (nothing reaches the runner)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from sealbench.benchmarks.interface import BenchmarkError
from sealbench.client.assets.store import seal_model
from sealbench.contract.errors import AssetIntegrityError, AssetRejected, StorageFailure
from sealbench.crypto.errors import IntegrityError
from sealbench.crypto.streaming import SEGMENT_SIZE
from sealbench.enclave.steps import MAX_WEIGHTS_CIPHERTEXT
from sealbench.platforms import LocalBlobStore, ObjectTooLarge


def _padded_model(size: int) -> bytes:
    """A self-contained ONNX model of about ``size`` bytes (random bytes in an initializer), so
    that it passes the enclave's structural check and reaches the runner."""
    payload = numpy_helper.from_array(np.frombuffer(os.urandom(size), np.uint8), "payload")
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "padded",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], [payload])
    return bytes(helper.make_model(graph).SerializeToString())


WEIGHTS = _padded_model(3 * SEGMENT_SIZE + 4321)  # four segments; never loaded by the plug-in


class _Capture:
    """A runner factory that records the weights it is given and stops the run there."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []

    def __call__(self, benchmark: object, weights: bytes) -> object:
        self.seen.append(weights)
        raise BenchmarkError("stopped by the test after step 3")


def _big_model(world: Any, tmp_path: Path) -> tuple[Any, Path]:
    model = tmp_path / "big.onnx"
    model.write_bytes(WEIGHTS)
    bucket = LocalBlobStore(tmp_path / "big-bucket")
    report = seal_model(
        model,
        asset_id=world.spec.model.asset_id,
        key_wrapper=world.access.wrappers[world.spec.model.kms_key],
        store=bucket,
        prefix="",
    )
    spec = world.with_spec(
        model={**world.spec.model.model_dump(), "uri": f"file://{bucket.root}"},
        model_digest=report.digest,
    )
    return spec, bucket.root / "weights.sealed"


def test_multi_segment_weights_reach_the_runner_intact(world: Any, tmp_path: Path) -> None:
    spec, _ = _big_model(world, tmp_path)
    capture = _Capture()
    with pytest.raises(AssetRejected):
        world.run(spec, make_runner=capture)
    assert capture.seen == [WEIGHTS]


@pytest.mark.parametrize("cut", [1, SEGMENT_SIZE])
def test_truncated_weights_fail_closed(world: Any, tmp_path: Path, cut: int) -> None:
    spec, sealed = _big_model(world, tmp_path)
    sealed.write_bytes(sealed.read_bytes()[:-cut])
    capture = _Capture()
    with pytest.raises(AssetIntegrityError, match="model weights failed verification") as info:
        world.run(spec, make_runner=capture)
    assert type(info.value.__cause__) is IntegrityError and "weights.sealed" in str(info.value)
    assert capture.seen == []


def test_byte_flipped_in_the_middle_of_large_weights_fails_closed(
    world: Any, tmp_path: Path
) -> None:
    spec, sealed = _big_model(world, tmp_path)
    data = bytearray(sealed.read_bytes())
    data[len(data) // 2] ^= 0x01
    sealed.write_bytes(bytes(data))
    capture = _Capture()
    with pytest.raises(AssetIntegrityError) as info:
        world.run(spec, make_runner=capture)
    assert type(info.value.__cause__) is IntegrityError  # the tag, not the digest check
    assert capture.seen == []


def test_weights_over_the_cap_refused_before_reading(world: Any, tmp_path: Path) -> None:
    spec, sealed = _big_model(world, tmp_path)
    with sealed.open("r+b") as f:  # sparse: costs no disk
        f.truncate(MAX_WEIGHTS_CIPHERTEXT + 1)
    capture = _Capture()
    with pytest.raises(StorageFailure) as info:
        world.run(spec, make_runner=capture)
    assert isinstance(info.value.__cause__, ObjectTooLarge)
    assert capture.seen == []
