"""The enclave end to end against the mock TEE (fixtures prefixed ``enclave_``).

One mock confidential cloud per session (in-process :class:`MockCloud`); a hospital and a model
owner provisioned with the mock's helpers (project, KMS key, bucket, owner token); their assets
sealed with ``sealbench.client.assets.store`` through the real Cloud KMS and Cloud Storage clients;
their workload identity pools, providers and IAM bindings written by ``sealbench.platforms``'s
policy writer for exactly the workloads (image digest of the enclave code, data, model, recipient)
the tests run; the hospital additionally grants those workloads ``objectCreator`` on its bucket for
results. The enclave runs as a child process through ``MockProcessLauncher``, so every key is
released by the production path: token file → STS (CEL condition) → KMS IAM.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from google.auth.transport.requests import AuthorizedSession
from google.oauth2.credentials import Credentials as OwnerCredentials
from onnx import TensorProto, helper, numpy_helper

from sealbench.benchmarks.brats import BRATS_2023_GLI, BratsContract
from sealbench.benchmarks.brats.prepare import prepare_dataset
from sealbench.benchmarks.brats.synthetic import case_id_for, generate_case, write_case
from sealbench.client.assets.store import seal_dataset, seal_model
from sealbench.client.runs.result_open import OpenedResult, download_result, open_result
from sealbench.contract.spec import AssetLocation, RunSpec
from sealbench.contract.workload import WorkloadIdentity
from sealbench.crypto.digest import Sha256Digest
from sealbench.crypto.envelope import WrappedKey, asset_aad, unwrap_key
from sealbench.crypto.sealing import generate_recipient_key, public_key_digest, public_key_to_raw
from sealbench.gcp.confidential_space import principal_set
from sealbench.gcp.gcs import GcsBlobStore, make_storage_client
from sealbench.gcp.kms import KmsKeyWrapper, make_kms_client
from sealbench.gcp.policy import AssetPolicy, PoolProvider
from sealbench.gcp.policy_writer import PolicyWriter
from sealbench.mocktee.process_launcher import MockProcessLauncher
from sealbench.mocktee.provision import OwnerSetup, provision_owner
from sealbench.mocktee.server import MockCloud

SMALL = BRATS_2023_GLI.with_shape((32, 32, 24))
LARGER = BRATS_2023_GLI.with_shape((96, 96, 64))
HOSPITAL_POOL = PoolProvider("200000000002", "hospital-pool", "attestation")
MODELCO_POOL = PoolProvider("300000000003", "modelco-pool", "attestation")


def enclave_tiny_model(seed: int = 0) -> bytes:
    """A 1x1x1 convolution from 4 modalities to 4 classes (fast, deterministic)."""
    weight = np.random.default_rng(seed).standard_normal((4, 4, 1, 1, 1)).astype(np.float32)
    spatial = ["D", "H", "W"]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "w"], ["logits"], kernel_shape=[1, 1, 1])],
        "tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4, *spatial])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4, *spatial])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def _prepare(root: Path, seeds: range, contract: BratsContract) -> Path:
    raw = root / "raw"
    for seed in seeds:
        write_case(generate_case(seed, contract.shape, contract), raw, case_id_for(seed), contract)
    out = root / "prepared"
    prepare_dataset(raw, out, contract)
    return out


@dataclass(frozen=True)
class SealedDataset:
    asset_id: str
    prepared: Path
    contract: BratsContract
    digest: Sha256Digest
    prefix: str


@dataclass(frozen=True)
class SealedModel:
    asset_id: str
    weights: bytes
    digest: Sha256Digest
    prefix: str


@dataclass
class EnclaveWorld:
    cloud: MockCloud
    root: Path
    hospital: OwnerSetup
    modelco: OwnerSetup
    image_digest: str
    recipient: X25519PrivateKey
    datasets: dict[str, SealedDataset] = field(default_factory=dict)
    models: dict[str, SealedModel] = field(default_factory=dict)
    _runs: int = 0

    def owner_store(self, owner: OwnerSetup) -> GcsBlobStore:
        creds = OwnerCredentials(owner.access_token)
        client = make_storage_client(owner.project_id, creds, self.cloud.endpoints.storage)
        return GcsBlobStore(client, owner.bucket)

    def owner_wrapper(self, owner: OwnerSetup) -> KmsKeyWrapper:
        creds = OwnerCredentials(owner.access_token)
        return KmsKeyWrapper(owner.key_name, make_kms_client(creds, self.cloud.endpoints.kms))

    def spec(self, dataset: str, model: str, *, pin: str | None = None) -> RunSpec:
        """A run of ``model`` on ``dataset`` under the plug-in pin of the dataset's grid (or
        ``pin``: the owners approve each dataset's grid pin and the full-size one)."""
        from sealbench.benchmarks.brats.plugin import pin_of

        self._runs += 1
        ds, mo = self.datasets[dataset], self.models[model]
        ep = self.cloud.endpoints
        raw_key = public_key_to_raw(self.recipient.public_key())
        run_id = f"run-{self._runs}"
        return RunSpec(
            run_id=run_id,
            benchmark_id="1",
            metrics_version=pin or str(pin_of(ds.contract)),
            dataset=AssetLocation(
                asset_id=ds.asset_id,
                uri=f"gs://{self.hospital.bucket}/{ds.prefix}",
                kms_key=self.hospital.key_name,
                pool_provider=HOSPITAL_POOL.name,
            ),
            model=AssetLocation(
                asset_id=mo.asset_id,
                uri=f"gs://{self.modelco.bucket}/{mo.prefix}",
                kms_key=self.modelco.key_name,
                pool_provider=MODELCO_POOL.name,
            ),
            result_uri=f"gs://{self.hospital.bucket}/results/{run_id}",
            recipient_public_key=base64.b64encode(raw_key).decode(),
            data_digest=ds.digest,
            model_digest=mo.digest,
            recipient_digest=public_key_digest(self.recipient.public_key()),
            sts_url=ep.sts_token_url,
            kms_endpoint=ep.kms,
            storage_endpoint=ep.storage,
        )

    def launcher(self, *, debug: bool = False) -> MockProcessLauncher:
        return MockProcessLauncher(
            self.cloud.launcher(),
            image_digest=self.image_digest,
            workdir_root=self.root / "runs",
            keep_workdir=True,
            debug=debug,
        )

    def result_objects(self, spec: RunSpec) -> list[str]:
        prefix = f"results/{spec.run_id}/"
        return sorted(n.removeprefix(prefix) for n in self.owner_store(self.hospital).list(prefix))

    def seal_model(self, name: str, weights: bytes) -> SealedModel:
        path = self.root / f"{name}.onnx"
        path.write_bytes(weights)
        report = seal_model(
            path,
            asset_id=f"model-{name}",
            key_wrapper=self.owner_wrapper(self.modelco),
            store=self.owner_store(self.modelco),
            prefix=f"models/{name}/",
        )
        self.models[name] = SealedModel(f"model-{name}", weights, report.digest, f"models/{name}/")
        return self.models[name]

    def authorize(self, pairs: list[tuple[str, str]]) -> None:
        """Both owners approve exactly the workloads of these (dataset, model) pairs."""
        _authorize(self, pairs)

    def open_result(self, spec: RunSpec) -> OpenedResult:
        objects = download_result(self.owner_store(self.hospital), f"results/{spec.run_id}/")
        return open_result(objects, self.recipient)

    def dataset_dek(self, dataset: str) -> bytes:
        """The dataset's DEK, unwrapped as its owner (known plaintext to search for)."""
        ds = self.datasets[dataset]
        store = self.owner_store(self.hospital)
        wrapped = WrappedKey.from_bytes(store.get_bytes(ds.prefix + "dek.wrapped", 1 << 16))
        aad = asset_aad("dataset", ds.asset_id, ds.digest)
        return unwrap_key(self.owner_wrapper(self.hospital), wrapped, aad).secret_bytes()

    def plaintext_needles(self, dataset: str, model: str) -> dict[str, bytes]:
        """Known plaintext: every case file and metadata file, the weights, the dataset key."""
        needles: dict[str, bytes] = {}
        data = self.datasets[dataset].prepared / "data"
        for path in sorted(data.rglob("*")):
            if path.is_file():
                for i, window in enumerate(_windows(path.read_bytes())):
                    needles[f"{path.name}[{i}]"] = window
        weights = self.models[model].weights
        for i, window in enumerate(_windows(weights[len(weights) // 2 :])):
            needles[f"weights[{i}]"] = window
        needles["dataset DEK"] = self.dataset_dek(dataset)
        return needles

    @staticmethod
    def scan(roots: list[Path], needles: dict[str, bytes]) -> list[str]:
        """``what in path`` for every needle found in a file under ``roots``."""
        found = []
        for root in roots:
            for dirpath, _, filenames in os.walk(root):
                for filename in filenames:
                    path = Path(dirpath) / filename
                    if path.is_symlink() or not path.is_file():
                        continue
                    content = path.read_bytes()
                    found += [f"{what} in {path}" for what, n in needles.items() if n in content]
        return found


_WINDOW = 48


def _windows(data: bytes, count: int = 4) -> list[bytes]:
    """A few ``_WINDOW``-byte slices spread over ``data`` (known plaintext to search for)."""
    if len(data) <= _WINDOW:
        return [data]
    step = (len(data) - _WINDOW) // count
    return [data[i * step + 7 : i * step + 7 + _WINDOW] for i in range(count)]


def _grant_result_writes(world: EnclaveWorld, workloads: frozenset[WorkloadIdentity]) -> None:
    """The hospital lets its approved workloads create objects in its bucket (results)."""
    session = AuthorizedSession(OwnerCredentials(world.hospital.access_token))  # type: ignore[no-untyped-call]
    url = f"{world.cloud.endpoints.storage}/storage/v1/b/{world.hospital.bucket}/iam"
    policy = session.get(url, timeout=30).json()
    members = sorted(
        principal_set(HOSPITAL_POOL.project_number, HOSPITAL_POOL.pool_id, w.uid())
        for w in workloads
    )
    bindings = [b for b in policy.get("bindings", []) if b["role"] != "roles/storage.objectCreator"]
    bindings.append({"role": "roles/storage.objectCreator", "members": members})
    reply = session.put(url, json={**policy, "bindings": bindings}, timeout=30)
    assert reply.status_code == 200, reply.text


def _authorize(world: EnclaveWorld, pairs: list[tuple[str, str]]) -> None:
    recipient = public_key_digest(world.recipient.public_key())
    # one grant per approval: each pair under each pin the owners approve (benchmark 1)
    workloads = frozenset(
        WorkloadIdentity(
            world.image_digest, world.datasets[d].digest, world.models[m].digest, recipient,
            "1", pin,
        )
        for d, m in pairs for pin in ENCLAVE_PINS
    )
    ep = world.cloud.endpoints
    for owner, pool, include_data in (
        (world.hospital, HOSPITAL_POOL, True),
        (world.modelco, MODELCO_POOL, False),
    ):
        writer = PolicyWriter.from_credentials(
            OwnerCredentials(owner.access_token),
            iam_url=ep.iam,
            kms_url=ep.kms,
            storage_url=ep.storage,
        )
        writer.sync(
            AssetPolicy(
                provider=pool,
                key_name=owner.key_name,
                bucket=owner.bucket,
                workloads=workloads,
                include_data=include_data,
                issuer_uri=ep.issuer + "/",
                endpoints=ep.service_endpoints(),
            )
        )
    _grant_result_writes(world, workloads)


#: (dataset, model) pairs the owners approve; the datasets and models the tests use.
ENCLAVE_DATASETS = {
    "small": (range(1, 4), SMALL),
    "few": (range(20, 23), LARGER),
    "many": (range(30, 42), LARGER),
}
#: The plug-in pins the owners approve: each dataset's grid and the full-size benchmark's.
ENCLAVE_PINS = frozenset({"brats-2023-gli/1", *(
    f"brats-2023-gli/1-{'x'.join(map(str, c.shape))}" for _, c in ENCLAVE_DATASETS.values())})
ENCLAVE_PAIRS = [("small", "tiny"), ("few", "tiny"), ("many", "tiny")]


@pytest.fixture(scope="session")
def enclave_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnclaveWorld]:
    from sealbench.mocktee.image import enclave_image_digest

    root = tmp_path_factory.mktemp("enclave-e2e")
    with MockCloud(root / "state") as cloud:
        ep = cloud.endpoints
        hospital = provision_owner(
            ep,
            email="hospital@example.org",
            project_id="hospital",
            project_number=HOSPITAL_POOL.project_number,
            bucket="hospital-bucket",
        )
        modelco = provision_owner(
            ep,
            email="modelco@example.org",
            project_id="modelco",
            project_number=MODELCO_POOL.project_number,
            bucket="modelco-bucket",
        )
        world = EnclaveWorld(
            cloud, root, hospital, modelco, enclave_image_digest(), generate_recipient_key()
        )
        for name, (seeds, contract) in ENCLAVE_DATASETS.items():
            prepared = _prepare(root / name, seeds, contract)
            report = seal_dataset(
                prepared,
                asset_id=f"ds-{name}",
                key_wrapper=world.owner_wrapper(hospital),
                store=world.owner_store(hospital),
                prefix=f"datasets/{name}/",
            )
            world.datasets[name] = SealedDataset(
                f"ds-{name}", prepared, contract, report.digest, f"datasets/{name}/"
            )
        world.seal_model("tiny", enclave_tiny_model())
        _authorize(world, ENCLAVE_PAIRS)
        yield world
