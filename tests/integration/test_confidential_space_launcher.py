"""The production Confidential Space launcher end to end against the mock: the real
``google-cloud-compute`` REST client creates a confidential VM on the mock's Compute stand-in,
whose claims come from the VM's metadata; the enclave's keys are released by the production path
(policy writer → STS CEL condition → KMS IAM); the result appears at the result URI and opens.

One mock per module: a hospital (data owner and operator) with a tiny sealed dataset, a model
owner with a tiny ONNX model sealed (the shipped reference model is not in the tree yet); both
pools written by the policy writer for the workload (image digest named by the VM's
``tee-image-reference``, data, model, recipient).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from google.api_core import exceptions as gexc
from google.auth.transport.requests import AuthorizedSession
from google.oauth2.credentials import Credentials as OwnerCredentials
from onnx import TensorProto, helper, numpy_helper

from sealbench.benchmarks.brats import BRATS_2023_GLI
from sealbench.benchmarks.brats.prepare import prepare_dataset
from sealbench.benchmarks.brats.synthetic import case_id_for, generate_case, write_case
from sealbench.client.assets.store import seal_dataset, seal_model
from sealbench.client.runs.launchers import EnclaveRunFailed
from sealbench.client.runs.result_open import download_result, open_result
from sealbench.contract.errors import KeyReleaseDenied
from sealbench.contract.result import FAILURE_OBJECT, FailureRecord
from sealbench.contract.spec import AssetLocation, RunSpec
from sealbench.contract.workload import WorkloadIdentity
from sealbench.crypto.attestation import Jwks, unverified_payload
from sealbench.crypto.digest import Sha256Digest
from sealbench.crypto.sealing import generate_recipient_key, public_key_digest, public_key_to_raw
from sealbench.gcp.confidential_space import claims_from_payload
from sealbench.gcp.gcs import GcsBlobStore, make_storage_client
from sealbench.gcp.kms import KmsKeyWrapper, make_kms_client
from sealbench.gcp.launcher import (
    ConfidentialSpaceLauncher,
    VmSettings,
    make_compute_clients,
)
from sealbench.gcp.policy import AssetPolicy, PoolProvider
from sealbench.gcp.policy_writer import PolicyWriter
from sealbench.mocktee.image import enclave_image_digest
from sealbench.mocktee.provision import OwnerSetup, provision_owner
from sealbench.mocktee.server import MockCloud
from sealbench.platforms.storage import parse_storage_uri

SMALL = BRATS_2023_GLI.with_shape((32, 32, 24))
HOSPITAL_POOL = PoolProvider("200000000002", "hospital-pool", "attestation")
MODELCO_POOL = PoolProvider("300000000003", "modelco-pool", "attestation")
ZONE = "us-central1-a"
RUNNER = "sealbench-runner@hospital.iam.gserviceaccount.com"
RESULT_OBJECTS = ["pool.sealed", "result.sealed", "result.token", "summary.json",
                  "write-check.json"]


@dataclass
class World:
    cloud: MockCloud
    root: Path
    hospital: OwnerSetup
    modelco: OwnerSetup
    image_reference: str
    recipient: X25519PrivateKey
    data_digest: Sha256Digest
    model_digest: Sha256Digest
    runs: int = 0

    def store(self, owner: OwnerSetup) -> GcsBlobStore:
        creds = OwnerCredentials(owner.access_token)
        client = make_storage_client(owner.project_id, creds, self.cloud.endpoints.storage)
        return GcsBlobStore(client, owner.bucket)

    def spec(self) -> RunSpec:
        self.runs += 1
        ep = self.cloud.endpoints
        run_id = f"cs-run-{self.runs}"
        return RunSpec(
            run_id=run_id,
            benchmark_id="1",
            metrics_version="brats-2023-gli/1-32x32x24",
            dataset=AssetLocation(
                asset_id="ds-small",
                uri=f"gs://{self.hospital.bucket}/datasets/small/",
                kms_key=self.hospital.key_name,
                pool_provider=HOSPITAL_POOL.name,
            ),
            model=AssetLocation(
                asset_id="model-tiny",
                uri=f"gs://{self.modelco.bucket}/models/tiny/",
                kms_key=self.modelco.key_name,
                pool_provider=MODELCO_POOL.name,
            ),
            result_uri=f"gs://{self.hospital.bucket}/results/{run_id}",
            recipient_public_key=base64.b64encode(
                public_key_to_raw(self.recipient.public_key())
            ).decode(),
            data_digest=self.data_digest,
            model_digest=self.model_digest,
            recipient_digest=public_key_digest(self.recipient.public_key()),
            sts_url=ep.sts_token_url,
            kms_endpoint=ep.kms,
            storage_endpoint=ep.storage,
        )

    def launcher(self, **settings: Any) -> ConfidentialSpaceLauncher:
        assert self.cloud.endpoints.compute is not None
        return ConfidentialSpaceLauncher(
            VmSettings(
                **{
                    "project": self.hospital.project_id,
                    "zone": ZONE,
                    "service_account": RUNNER,
                    "image_reference": self.image_reference,
                    **settings,
                }
            ),
            credentials=OwnerCredentials(self.hospital.access_token),
            api_endpoint=self.cloud.endpoints.compute,
            poll_interval=0.05,
            result_store=self.open_result_uri,
        )

    def open_result_uri(self, uri: str) -> tuple[GcsBlobStore, str]:
        """The hospital's view of a result URI (what ``sealbench run`` passes the launcher)."""
        location = parse_storage_uri(uri)
        assert location.bucket == self.hospital.bucket
        return self.store(self.hospital), location.prefix

    def result_objects(self, spec: RunSpec) -> list[str]:
        prefix = f"results/{spec.run_id}/"
        return sorted(n.removeprefix(prefix) for n in self.store(self.hospital).list(prefix))


def tiny_model() -> bytes:
    """A 1x1x1 convolution from 4 modalities to 4 classes (fast, deterministic)."""
    weight = np.random.default_rng(0).standard_normal((4, 4, 1, 1, 1)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "w"], ["logits"], kernel_shape=[1, 1, 1])],
        "tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4, "D", "H", "W"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4, "D", "H", "W"])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def _prepare(root: Path) -> Path:
    raw = root / "raw"
    for seed in (1, 2):
        write_case(generate_case(seed, SMALL.shape, SMALL), raw, case_id_for(seed), SMALL)
    prepare_dataset(raw, root / "prepared", SMALL)
    return root / "prepared"


def _authorize(world: World, image_digest: str) -> None:
    """Both owners approve exactly this workload; the hospital lets its pool's workloads write
    results (the pool-wide ``gcloud storage buckets add-iam-policy-binding …/* --role=
    roles/storage.objectCreator`` of docs/gcp-setup.md: only tokens that pass the provider's
    condition are federated, and the key grant is what names the exact workload)."""
    recipient = public_key_digest(world.recipient.public_key())
    workload = WorkloadIdentity(image_digest, world.data_digest, world.model_digest, recipient,
                                "1", "brats-2023-gli/1-32x32x24")
    ep = world.cloud.endpoints
    for owner, pool, include_data in (
        (world.hospital, HOSPITAL_POOL, True),
        (world.modelco, MODELCO_POOL, False),
    ):
        PolicyWriter.from_credentials(
            OwnerCredentials(owner.access_token),
            iam_url=ep.iam,
            kms_url=ep.kms,
            storage_url=ep.storage,
        ).sync(
            AssetPolicy(
                provider=pool,
                key_name=owner.key_name,
                bucket=owner.bucket,
                workloads=frozenset({workload}),
                include_data=include_data,
                issuer_uri=ep.issuer + "/",
                endpoints=ep.service_endpoints(),
            )
        )
    session = AuthorizedSession(OwnerCredentials(world.hospital.access_token))  # type: ignore[no-untyped-call]
    url = f"{ep.storage}/storage/v1/b/{world.hospital.bucket}/iam"
    policy = session.get(url, timeout=30).json()
    member = f"principalSet://iam.googleapis.com/{HOSPITAL_POOL.pool_name}/*"
    bindings = [
        *policy.get("bindings", []),
        {"role": "roles/storage.objectCreator", "members": [member]},
    ]
    assert session.put(url, json={**policy, "bindings": bindings}, timeout=30).status_code == 200


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("cs")
    with MockCloud(root / "state") as cloud:
        owners = [
            provision_owner(
                cloud.endpoints,
                email=f"{name}@example.org",
                project_id=name,
                project_number=pool.project_number,
                bucket=f"{name}-bucket",
            )
            for name, pool in (("hospital", HOSPITAL_POOL), ("modelco", MODELCO_POOL))
        ]
        hospital, modelco = owners

        def wrapper(owner: OwnerSetup) -> KmsKeyWrapper:
            creds = OwnerCredentials(owner.access_token)
            return KmsKeyWrapper(owner.key_name, make_kms_client(creds, cloud.endpoints.kms))

        world = World(
            cloud,
            root,
            hospital,
            modelco,
            f"us-docker.pkg.dev/authority/sealbench/evaluation@{enclave_image_digest()}",
            generate_recipient_key(),
            Sha256Digest("sha256:" + "0" * 64),
            Sha256Digest("sha256:" + "0" * 64),
        )
        # the authority lets the hospital's runner pull its image (the launcher's pull needs it)
        cloud.artifacts.grant(world.image_reference, f"serviceAccount:{RUNNER}")
        data = seal_dataset(
            _prepare(root),
            asset_id="ds-small",
            key_wrapper=wrapper(hospital),
            store=world.store(hospital),
            prefix="datasets/small/",
        )
        weights = root / "tiny.onnx"
        weights.write_bytes(tiny_model())
        model = seal_model(
            weights,
            asset_id="model-tiny",
            key_wrapper=wrapper(modelco),
            store=world.store(modelco),
            prefix="models/tiny/",
        )
        world.data_digest, world.model_digest = data.digest, model.digest
        _authorize(world, enclave_image_digest())
        yield world


def _instance_gone(world: World, name: str) -> bool:
    instances, _ = make_compute_clients(
        OwnerCredentials(world.hospital.access_token), world.cloud.endpoints.compute
    )
    try:
        instances.get(project="hospital", zone=ZONE, instance=name, timeout=30)
    except gexc.NotFound:
        return True
    return False


def test_confidential_space_run_yields_a_result_the_owner_opens(world: World) -> None:
    spec = world.spec()
    lines: list[str] = []
    launcher = world.launcher()
    vm = launcher.start(spec, on_output=lines.append)
    result = vm.wait(timeout=600)
    assert result.image_digest == enclave_image_digest()
    assert any("step 7/7" in line for line in lines)  # the enclave's progress, via serial port
    # the launcher's exit line is on the serial port only while the VM runs (as on Google
    # Cloud): the outcome came from the result location, the stream may stop before it
    assert not any("exit code: " in line for line in lines)  # never the old format
    assert _instance_gone(world, vm.instance_name)  # deleted after the run
    assert world.result_objects(spec) == RESULT_OBJECTS
    objects = download_result(world.store(world.hospital), f"results/{spec.run_id}/")
    opened = open_result(
        objects,
        world.recipient,
        jwks=Jwks.from_json(world.cloud.verifier.jwks()),
        issuer=world.cloud.endpoints.issuer,
        now=time.time(),
    )
    assert len(opened.cases) == 2
    assert opened.claims.image_digest == enclave_image_digest()
    # The Confidential Space claims of the token open_result verified (schema of the platform).
    claims = claims_from_payload(unverified_payload(opened.token))
    assert claims.submods.container.image_reference == world.image_reference
    assert claims.submods.container.image_digest == enclave_image_digest()
    assert (claims.submods.container.env_override or {})["SEALBENCH_RUN_ID"] == spec.run_id
    assert RUNNER in claims.google_service_accounts
    assert claims.submods.gce.instance_name == vm.instance_name


def test_debug_image_run_is_denied_its_keys(world: World) -> None:
    spec = world.spec()
    launcher = world.launcher(debug=True)
    vm = launcher.start(spec)
    with pytest.raises(EnclaveRunFailed) as info:
        vm.wait(timeout=600)
    assert "dbgstat" in info.value.reason  # the pool's condition said why
    assert _instance_gone(world, vm.instance_name)  # a debug VM keeps running: we delete it
    # Even the result destination is written through the hospital's pool, which refuses it.
    assert world.result_objects(spec) == []


def test_keep_vm_leaves_the_terminated_vm_for_inspection(world: World) -> None:
    spec = world.spec()
    vm = world.launcher(keep_vm=True).start(spec)
    vm.wait(timeout=600)
    instances, _ = make_compute_clients(
        OwnerCredentials(world.hospital.access_token), world.cloud.endpoints.compute
    )
    kept = instances.get(project="hospital", zone=ZONE, instance=vm.instance_name, timeout=30)
    assert kept.status == "TERMINATED"
    assert kept.confidential_instance_config.confidential_instance_type == "SEV"
    vm.kill()
    assert _instance_gone(world, vm.instance_name)


@pytest.mark.parametrize("attack", ["unapproved_image_digest", "swapped_model_digest_in_tee_env"])
def test_vm_launched_with_other_attested_facts_is_denied_its_keys(
    world: World, attack: str
) -> None:
    spec = world.spec()
    options: dict[str, Any] = {}
    if attack == "unapproved_image_digest":
        options["image_reference"] = "us-docker.pkg.dev/authority/sealbench/evaluation@sha256:" + (
            "7" * 64
        )
    else:
        spec = spec.model_copy(update={"model_digest": "sha256:" + "8" * 64})
    with pytest.raises(EnclaveRunFailed) as info:
        world.launcher(**options).launch(spec, timeout=600)
    assert "result.token" not in world.result_objects(spec)
    if attack == "unapproved_image_digest":  # no federated token at all
        assert "rejected by the attribute condition" in info.value.reason
        assert world.result_objects(spec) == []
    else:  # federated, may write its failure, but the KMS key is not granted to its uid
        record = FailureRecord.from_bytes(
            world.store(world.hospital).get_bytes(
                f"results/{spec.run_id}/{FAILURE_OBJECT}", 1 << 20
            )
        )
        assert record.exit_code == KeyReleaseDenied.exit_code


def test_a_runner_the_image_repository_does_not_let_pull_is_refused_with_the_grant(
    world: World,
) -> None:
    """The launcher pulls the image as the VM's service account: a repository that does not
    grant it roles/artifactregistry.reader refuses the pull, the workload never starts, and
    the client names the repository, the account and the command that grants it (issue 29)."""
    from sealbench.gcp.launcher import ImagePullDenied

    private = f"us-docker.pkg.dev/authority/private/evaluation@{enclave_image_digest()}"
    spec = world.spec()
    lines: list[str] = []
    launcher = world.launcher(image_reference=private)
    with pytest.raises(ImagePullDenied) as info:
        launcher.launch(spec, on_output=lines.append, timeout=600)
    assert any('denied: Permission "artifactregistry.repositories.downloadArtifacts" denied on '
               'resource "projects/authority/locations/us/repositories/private"' in x
               for x in lines), lines
    assert not any("workload started" in x for x in lines)
    assert RUNNER in str(info.value)
    assert ("gcloud artifacts repositories add-iam-policy-binding private --location=us "
            f"--project=authority --member=serviceAccount:{RUNNER} "
            "--role=roles/artifactregistry.reader") in info.value.hint
    assert world.result_objects(spec) == []
