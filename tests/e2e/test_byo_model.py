"""Bring your own model, end to end: a MONAI SegResNet exported with ``model export``'s library,
sealed, and evaluated confidentially by the enclave child process on the mock TEE; the data
owner opens exactly the plain evaluation of the same ONNX model on the same cases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from monai.networks.nets import SegResNet

from sealbench.client.assets import model_export
from sealbench.client.assets import prepare as assets
from tests.e2e.conftest import ENCLAVE_PAIRS
from tests.e2e.test_enclave_mock_tee import _check_matches_plain

#: Small enough for the two shared cores (178k parameters), the same architecture as the
#: MONAI BraTS recipe (which uses init_filters=16, blocks_down=(1, 2, 2, 4)).
SEGRESNET_KWARGS = {"spatial_dims": 3, "in_channels": 4, "out_channels": 4, "init_filters": 8,
                    "blocks_down": (1, 2, 2), "blocks_up": (1, 1)}


def test_exported_segresnet_evaluated_confidentially(enclave_world: Any, tmp_path: Path) -> None:
    torch.manual_seed(18)
    network = SegResNet(**SEGRESNET_KWARGS)
    out = tmp_path / "segresnet.onnx"
    check = model_export.export_module(network, assets.definition_plugin("brats-small"), out)
    assert check.parity is not None and check.parity.max_abs_diff < 1e-3
    enclave_world.seal_model("segresnet", out.read_bytes())
    try:
        enclave_world.authorize([*ENCLAVE_PAIRS, ("small", "segresnet")])
        _check_matches_plain(enclave_world, "small", "segresnet")
    finally:
        enclave_world.authorize(ENCLAVE_PAIRS)
