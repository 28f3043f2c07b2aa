"""``python -m sealbench.mocktee`` keeps everything in its state directory: stop the process,
start it again, and what was wrapped, granted and stored before still works."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from google.oauth2.credentials import Credentials as OwnerCredentials

from sealbench.contract.workload import WorkloadIdentity
from sealbench.crypto.digest import sha256_digest
from sealbench.crypto.envelope import DataKey, WrappedKey, asset_aad, unwrap_key, wrap_key
from sealbench.gcp.credentials import workload_credentials
from sealbench.gcp.gcs import GcsBlobStore, make_storage_client
from sealbench.gcp.kms import KmsKeyWrapper, make_kms_client
from sealbench.gcp.policy import AssetPolicy, PoolProvider
from sealbench.gcp.policy_writer import PolicyWriter
from sealbench.mocktee.launcher import MockLauncher, RemoteTokenMinter
from sealbench.mocktee.provision import provision_owner
from sealbench.mocktee.server import MockEndpoints

IMAGE = sha256_digest(b"image")
WORKLOAD = WorkloadIdentity(
    IMAGE, sha256_digest(b"data"), sha256_digest(b"model"), sha256_digest(b"recipient"), "1",
    "brats-2023-gli/1",
)
AAD = asset_aad("dataset", "ds-1", sha256_digest(b"data"))


@contextmanager
def _mock_process(state_dir: Path) -> Iterator[MockEndpoints]:
    process = subprocess.Popen(
        [sys.executable, "-m", "sealbench.mocktee", "--state-dir", str(state_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        endpoints = MockEndpoints.from_json(json.loads(line))
        assert MockEndpoints.load(state_dir) == endpoints
        yield endpoints
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def _release(ep: MockEndpoints, key_name: str, wrapped: WrappedKey, socket_dir: Path) -> DataKey:
    launcher = MockLauncher(RemoteTokenMinter(ep.control))
    with launcher.start_workload(
        IMAGE,
        f"repo/eval@{IMAGE}",
        {
            **WORKLOAD.env_overrides(),
            "SEALBENCH_METRICS_VERSION": "brats-2023-gli/1",
            **ep.service_endpoints().env_names(),
        },
        socket_dir=socket_dir,
    ) as run:
        creds = workload_credentials(
            "projects/600000000006/locations/global/workloadIdentityPools/restart-pool/"
            "providers/attestation",
            token_file=run.token_file,
            sts_url=ep.sts_token_url,
        )
        return unwrap_key(KmsKeyWrapper(key_name, make_kms_client(creds, ep.kms)), wrapped, AAD)


def test_mock_state_survives_a_restart(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    dek = DataKey.generate()
    with _mock_process(state_dir) as ep:
        owner = provision_owner(
            ep,
            email="owner@example.org",
            project_id="restart",
            project_number="600000000006",
            bucket="restart-bucket",
        )
        creds = OwnerCredentials(owner.access_token)
        PolicyWriter.from_credentials(
            creds, iam_url=ep.iam, kms_url=ep.kms, storage_url=ep.storage
        ).sync(
            AssetPolicy(
                provider=PoolProvider("600000000006", "restart-pool", "attestation"),
                key_name=owner.key_name,
                bucket=owner.bucket,
                workloads=frozenset({WORKLOAD}),
                include_data=True,
                issuer_uri=ep.issuer + "/",
                endpoints=ep.service_endpoints(),
            )
        )
        wrapped = wrap_key(KmsKeyWrapper(owner.key_name, make_kms_client(creds, ep.kms)), dek, AAD)
        store = GcsBlobStore(make_storage_client("restart", creds, ep.storage), owner.bucket)
        store.put_bytes("dek.wrapped", wrapped.to_bytes())
        assert _release(ep, owner.key_name, wrapped, tmp_path / "run1") == dek
        first_ports = ep.ports

    with _mock_process(state_dir) as ep:
        # Same ports, so the issuer recorded in the provider still names this verifier.
        assert ep.ports == first_ports
        # The owner's token, the object, the wrapped key and the grant all survived.
        store = GcsBlobStore(
            make_storage_client("restart", OwnerCredentials(owner.access_token), ep.storage),
            owner.bucket,
        )
        again = WrappedKey.from_bytes(store.get_bytes("dek.wrapped", 65536))
        assert _release(ep, owner.key_name, again, tmp_path / "run2") == dek
