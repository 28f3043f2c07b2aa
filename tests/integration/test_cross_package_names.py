"""Names that two packages must agree on without importing each other (DESIGN: the server
depends only on sealbench.crypto), checked where both are importable."""

from __future__ import annotations

import base64

from sealbench.contract.spec import ENV_OVERRIDE_NAMES, AssetLocation, RunSpec
from sealbench.crypto.digest import sha256_digest
from sealbench.server.verification import ENV_BENCHMARK_ID, ENV_METRICS_VERSION


def _spec() -> RunSpec:
    key = base64.b64encode(bytes(32)).decode()
    asset = {
        "uri": "gs://bucket-a/prefix",
        "kms_key": "projects/p/locations/global/keyRings/r/cryptoKeys/k",
        "pool_provider": "projects/1/locations/global/workloadIdentityPools/pool/providers/prov",
    }
    return RunSpec(
        run_id="r1",
        benchmark_id="7",
        metrics_version="brats-2023-gli/1",
        dataset=AssetLocation(asset_id="3", **asset),
        model=AssetLocation(asset_id="4", **asset),
        result_uri="gs://bucket-r/out",
        recipient_public_key=key,
        data_digest=sha256_digest(b"d"),
        model_digest=sha256_digest(b"m"),
        recipient_digest=sha256_digest(bytes(32)),
    )


def test_server_checks_the_variables_the_enclave_is_given() -> None:
    env = _spec().to_environ()
    assert env[ENV_BENCHMARK_ID] == "7"
    assert env[ENV_METRICS_VERSION] == "brats-2023-gli/1"
    assert {ENV_BENCHMARK_ID, ENV_METRICS_VERSION} <= set(ENV_OVERRIDE_NAMES)
