"""Fakes and a small sealed world for running the enclave in-process: a local bucket per owner
(real :class:`LocalBlobStore`), in-memory key wrappers standing in for KMS, an attester that
hands out unsigned tokens carrying the claims a launcher would, and a tiny ONNX model."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from onnx import TensorProto, helper, numpy_helper

from sealbench.benchmarks.brats import BRATS_2023_GLI, BratsContract
from sealbench.benchmarks.brats.prepare import prepare_dataset
from sealbench.benchmarks.brats.synthetic import case_id_for, generate_case, write_case
from sealbench.client.assets.store import seal_dataset, seal_model
from sealbench.contract.spec import AssetLocation, RunSpec
from sealbench.crypto.digest import sha256_digest
from sealbench.crypto.envelope import InsecureInMemoryKeyWrapper, KeyWrapper
from sealbench.crypto.sealing import generate_recipient_key, public_key_digest, public_key_to_raw
from sealbench.enclave.run import RunReport, run_enclave
from sealbench.gcp.confidential_space import CONFIDENTIAL_SPACE_ISSUER
from sealbench.mocktee.verifier import WorkloadLaunch, build_claims
from sealbench.platforms import BlobStore, LocalBlobStore, parse_storage_uri

SMALL_SHAPE = (32, 32, 24)
SMALL = BRATS_2023_GLI.with_shape(SMALL_SHAPE)
#: The plug-in pin of that grid (the grid is part of the pin the owners approve).
SMALL_PIN = "brats-2023-gli/1-32x32x24"
IMAGE = sha256_digest(b"unit-test evaluation image")
DATA_KEY = "projects/hospital/locations/global/keyRings/r/cryptoKeys/data"
MODEL_KEY = "projects/modelco/locations/global/keyRings/r/cryptoKeys/model"
DATA_POOL = (
    "projects/200000000002/locations/global/workloadIdentityPools/"
    "hospital-pool/providers/attestation"
)
MODEL_POOL = (
    "projects/300000000003/locations/global/workloadIdentityPools/"
    "modelco-pool/providers/attestation"
)


def tiny_model(seed: int = 0) -> bytes:
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


def make_prepared(root: Path, seeds: Sequence[int], contract: BratsContract = SMALL) -> Path:
    raw = root / "raw"
    for seed in seeds:
        write_case(generate_case(seed, contract.shape, contract), raw, case_id_for(seed), contract)
    out = root / "prepared"
    prepare_dataset(raw, out, contract)
    return out


class FakeAttester:
    """Unsigned tokens with the claims the mock launcher would sign for this launch."""

    def __init__(self, launch: WorkloadLaunch, token_file: Path) -> None:
        self.launch = launch
        self._token_file = token_file
        self.tokens: list[str] = []
        # Google's issuer (unsigned: the enclave reads its own tokens, it does not verify
        # them), so the run's token destinations are Google's: no endpoint overrides.
        self.issuer = CONFIDENTIAL_SPACE_ISSUER

    @property
    def token_file(self) -> Path:
        return self._token_file

    def token(self, audience: str | None = None, nonces: Sequence[str] = ()) -> str:
        claims = build_claims(
            self.launch,
            issuer=self.issuer,
            audience=audience or "https://sts.googleapis.com",
            nonces=tuple(nonces),
            now=int(time.time()),
        )

        def b64(doc: object) -> str:
            return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()

        token = f"{b64({'alg': 'RS256', 'kid': 'k'})}.{b64(claims)}.c2ln"
        self.tokens.append(token)
        return token


@dataclass
class FakeAccess:
    """Local buckets (``file://``) and in-memory key wrappers; records every key request."""

    wrappers: dict[str, KeyWrapper]
    key_requests: list[str] = field(default_factory=list)
    refuse_results: bool = False

    def store(self, uri: str, pool_provider: str) -> tuple[BlobStore, str]:
        store, prefix = parse_storage_uri(uri).open()
        if self.refuse_results and "results" in uri:
            return RefusingStore(store), prefix
        return store, prefix

    def key_wrapper(self, owner: AssetLocation) -> KeyWrapper:
        self.key_requests.append(owner.kms_key)
        return self.wrappers[owner.kms_key]


class RefusingStore:
    """A store whose writes are denied, as a bucket without a write grant."""

    def __init__(self, inner: BlobStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def put_bytes(self, name: str, data: bytes) -> None:
        from sealbench.platforms import StorageAccessDenied

        raise StorageAccessDenied(f"permission denied to upload {name}")


@dataclass
class World:
    """One data owner, one model owner, their sealed assets, and a run spec."""

    root: Path
    prepared: Path
    model_bytes: bytes
    recipient: X25519PrivateKey
    access: FakeAccess
    spec: RunSpec
    data_bucket: LocalBlobStore
    model_bucket: LocalBlobStore

    def results(self, name: str = "results") -> Path:
        return self.root / name

    def with_spec(self, **changes: object) -> RunSpec:
        return RunSpec.model_validate({**self.spec.model_dump(), **changes})

    def attester(self, spec: RunSpec | None = None, *, debug: bool = False) -> FakeAttester:
        environ = (spec or self.spec).to_environ()
        return FakeAttester(
            WorkloadLaunch(IMAGE, f"local/eval@{IMAGE}", environ, debug),
            self.root / "token",
        )

    def run(
        self,
        spec: RunSpec | None = None,
        *,
        environ: dict[str, str] | None = None,
        make_runner: Callable[..., object] | None = None,
    ) -> RunReport:
        spec = spec or self.spec
        return run_enclave(
            environ if environ is not None else spec.to_environ(),
            self.attester(spec),
            access=lambda _run: self.access,
            make_runner=make_runner,  # type: ignore[arg-type]
        )


def build_world(
    root: Path, seeds: Sequence[int] = (1, 2, 3), prepared: Path | None = None
) -> World:
    prepared = prepared or make_prepared(root, seeds)
    data_wrapper = InsecureInMemoryKeyWrapper(DATA_KEY)
    model_wrapper = InsecureInMemoryKeyWrapper(MODEL_KEY)
    data_bucket = LocalBlobStore(root / "hospital-bucket")
    model_bucket = LocalBlobStore(root / "modelco-bucket")
    data = seal_dataset(
        prepared, asset_id="ds-1", key_wrapper=data_wrapper, store=data_bucket, prefix=""
    )
    model_bytes = tiny_model()
    (root / "model.onnx").write_bytes(model_bytes)
    model = seal_model(
        root / "model.onnx",
        asset_id="model-1",
        key_wrapper=model_wrapper,
        store=model_bucket,
        prefix="",
    )
    recipient = generate_recipient_key()
    raw_key = public_key_to_raw(recipient.public_key())
    spec = RunSpec(
        run_id="run-1",
        benchmark_id="1",
        metrics_version=SMALL_PIN,
        dataset=AssetLocation(
            asset_id="ds-1",
            uri=f"file://{data_bucket.root}",
            kms_key=DATA_KEY,
            pool_provider=DATA_POOL,
        ),
        model=AssetLocation(
            asset_id="model-1",
            uri=f"file://{model_bucket.root}",
            kms_key=MODEL_KEY,
            pool_provider=MODEL_POOL,
        ),
        result_uri=f"file://{root / 'results'}",
        recipient_public_key=base64.b64encode(raw_key).decode(),
        data_digest=data.digest,
        model_digest=model.digest,
        recipient_digest=public_key_digest(recipient.public_key()),
    )
    access = FakeAccess({DATA_KEY: data_wrapper, MODEL_KEY: model_wrapper})
    return World(root, prepared, model_bytes, recipient, access, spec, data_bucket, model_bucket)


@pytest.fixture(scope="module")
def shared_prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_prepared(tmp_path_factory.mktemp("prep"), (1, 2, 3))


@pytest.fixture
def world(tmp_path: Path, shared_prepared: Path) -> World:
    """A freshly sealed world (new keys, new buckets) over a shared prepared dataset."""
    return build_world(tmp_path, prepared=shared_prepared)


@pytest.fixture
def world_factory() -> Callable[..., World]:
    """``build_world(root, seeds=..., prepared=...)`` for tests that need their own world."""
    return build_world


@pytest.fixture
def model_factory() -> Callable[[int], bytes]:
    return tiny_model


@pytest.fixture
def prepared_factory() -> Callable[..., Path]:
    return make_prepared


@pytest.fixture
def small_contract() -> BratsContract:
    return SMALL
