"""The authority's side of ``sealbench benchmark pool`` (issues 27 and 40) without a TEE: where
each pool's objects go (a 0700 folder of this machine, or ``gs://`` with the authority's pool
provider), what the aggregator is told (its spec names the registry's authorization by location
and inputs digest, the release's location and provider, the pool anchor), which authorization
runs (a new one, or the last one that never produced a release, run again), what is refused
before anything starts (another aggregator
image than the benchmark's, a backend that does not run it, a cloud VM told to write a local
folder), and what a run that left no release gives (a :class:`PoolError`, nothing submitted).
The aggregator itself, on the mock, Docker and Confidential Space, is tested end to end in
``tests/e2e/test_wdbc_cli_flow.py`` and ``tests/integration/``."""

from __future__ import annotations

import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sealbench.client.errors import ConfigError
from sealbench.client.runs.launchers.for_profile import (
    CsOptions,
    aggregator_reference,
    make_aggregator_launcher,
)
from sealbench.client.runs.pool import (
    PoolError,
    PoolFolder,
    PoolTarget,
    pool_benchmark,
    pool_on_tee,
    require_aggregator,
)
from sealbench.contract.pool import (
    AGGREGATE_ENV_NAMES,
    POOL_INPUTS_OBJECT,
    AggregateSpec,
    PoolInput,
    PoolInputs,
)
from sealbench.contract.pool_authorization import PoolAuthorization
from sealbench.contract.spec import AssetLocation
from sealbench.crypto.digest import sha256_digest
from sealbench.platforms.storage import LocalBlobStore
from tests.pool_ledger import Ledger
from tests.unit.contract.test_pool import (
    POOL_ANCHOR,
    POOL_LOG_SIGNER,
    POOL_RECIPIENT,
    POOL_RECIPIENT_KEY,
)

AGGREGATOR = sha256_digest(b"aggregator image")
TARGET = PoolTarget(AGGREGATOR, POOL_ANCHOR)
PROVIDER = "projects/9/locations/global/workloadIdentityPools/authority/providers/attestation"


def _inputs() -> PoolInputs:
    return PoolInputs(
        pool_id="pool-20261206T050000-0a1b2c3d", benchmark_id="4", metrics_version="wdbc/1",
        model_id="2", model_digest=sha256_digest(b"model"),
        inputs=(PoolInput(
            run_id="run-1",
            dataset=AssetLocation(asset_id="1", uri="gs://hospital/datasets/1",
                                  kms_key="projects/h/locations/global/keyRings/r/cryptoKeys/d",
                                  pool_provider=PROVIDER),
            data_digest=sha256_digest(b"data"),
            statistics_uri="gs://hospital/results/run-1",
            commitment=sha256_digest(b"statistics")),))


class _Registry:
    """The registry's pool endpoints: authorizations signed by an in-memory ledger."""

    def __init__(self, unreleased: bool = False) -> None:
        self.submitted: list[Any] = []
        self.authorized: list[str] = []
        self.ledger = Ledger(POOL_RECIPIENT_KEY, log=POOL_LOG_SIGNER)
        self.authorization = self.ledger.authorize(_inputs(), rho=0.01)
        self.reused = unreleased

    def authorize_pool(self, benchmark_id: int, model_id: int) -> Any:
        self.authorized.append(f"{benchmark_id}/{model_id}")
        return SimpleNamespace(
            pool_id=_inputs().pool_id, reused=self.reused,
            debits=[SimpleNamespace(ledger="dataset:1", datasets=[1], seq=1)],
            left_out=[SimpleNamespace(result_id=9, dataset_id=3, run_id="run-3",
                                      reason="budget spent")])

    def pool_authorization(self, benchmark_id: int, pool_id: str) -> Any:
        assert pool_id == _inputs().pool_id
        return self.authorization

    def submit_pooled_release(self, benchmark_id: int, **kw: Any) -> Any:
        self.submitted.append(kw)
        return SimpleNamespace(id=1)


class _SilentAggregator:
    """An aggregator that exits 0 and writes nothing (a tampered image, a lost bucket)."""

    aggregator_image_digest = AGGREGATOR

    def __init__(self) -> None:
        self.specs: list[AggregateSpec] = []

    def start_aggregator(self, spec: AggregateSpec, *, on_output: Any = None) -> Any:
        self.specs.append(spec)
        return SimpleNamespace(wait=lambda timeout: None, kill=lambda: None)


def test_each_pool_gets_its_own_private_folder_and_is_never_reused(tmp_path: Path) -> None:
    folder = PoolFolder((tmp_path / "pools").as_uri())
    uri, store, prefix = folder.create("pool-1")
    assert uri == (tmp_path / "pools" / "pool-1").as_uri()
    assert stat.S_IMODE((tmp_path / "pools" / "pool-1").stat().st_mode) == 0o700
    store.put_bytes(f"{prefix}/{POOL_INPUTS_OBJECT}".lstrip("/"), b"{}")
    with pytest.raises(PoolError, match="never reused"):
        folder.create("pool-1")


def test_a_cloud_pool_folder_needs_the_authority_s_provider() -> None:
    with pytest.raises(ConfigError, match="pool provider"):
        PoolFolder("gs://authority/pools")
    with pytest.raises(ConfigError, match="neither file:// nor gs://"):
        PoolFolder("s3://authority/pools", provider=PROVIDER)


def test_a_cloud_pool_folder_refuses_a_location_already_holding_inputs(tmp_path: Path) -> None:
    bucket = LocalBlobStore(tmp_path / "bucket")
    bucket.put_bytes(f"pools/pool-1/{POOL_INPUTS_OBJECT}", b"{}")
    folder = PoolFolder("gs://authority/pools", lambda uri: (bucket, uri.removeprefix(
        "gs://authority/")), PROVIDER)
    with pytest.raises(PoolError, match="never reused"):
        folder.create("pool-1")
    uri, store, prefix = folder.create("pool-2")
    assert (uri, store, prefix) == ("gs://authority/pools/pool-2", bucket, "pools/pool-2")


def test_the_aggregator_is_told_its_inputs_and_location_and_nothing_is_sent_without_a_release(
    tmp_path: Path,
) -> None:
    registry, aggregator = _Registry(), _SilentAggregator()
    bucket = LocalBlobStore(tmp_path / "bucket")
    folder = PoolFolder("gs://authority/pools",
                        lambda uri: (bucket, uri.removeprefix("gs://authority/")), PROVIDER)
    with pytest.raises(PoolError, match=r"left no sealed release \(pooled.sealed\)"):
        pool_benchmark(registry, 4, TARGET, [2], aggregator, folder=folder, endpoints=None)
    assert registry.submitted == []
    [spec] = aggregator.specs
    inputs = registry.authorization.inputs
    assert registry.authorized == ["4/2"]
    assert spec.inputs_uri == f"gs://authority/pools/{inputs.pool_id}/{POOL_INPUTS_OBJECT}"
    assert spec.inputs_digest == inputs.digest()
    assert spec.result_uri == f"gs://authority/pools/{inputs.pool_id}"
    assert spec.result_pool_provider == PROVIDER
    # sealed to the benchmark's pool recipient, the registry's key: the authority cannot read it
    assert (spec.recipient_public_key, spec.recipient_digest) == (POOL_RECIPIENT_KEY,
                                                                 POOL_RECIPIENT)
    assert spec.anchor() == POOL_ANCHOR
    assert set(spec.to_environ()) <= set(AGGREGATE_ENV_NAMES)
    written = bucket.get_bytes(f"pools/{inputs.pool_id}/{POOL_INPUTS_OBJECT}", 1 << 20)
    assert PoolAuthorization.from_bytes(written) == registry.authorization


def test_an_authorization_that_never_produced_a_release_is_run_again_unpaid(
    tmp_path: Path,
) -> None:
    """The registry answers the model's previous authorization again (it never produced a
    release: its aggregator failed): it runs again in a fresh folder, nothing more debited."""
    registry, aggregator = _Registry(unreleased=True), _SilentAggregator()
    folder = PoolFolder((tmp_path / "pools").as_uri())
    with pytest.raises(PoolError, match="left no sealed release"):
        pool_benchmark(registry, 4, TARGET, [2], aggregator, folder=folder, endpoints=None)
    assert registry.authorized == ["4/2"]
    [spec] = aggregator.specs
    assert spec.inputs_digest == registry.authorization.inputs.digest()
    assert spec.run_id.startswith(_inputs().pool_id[:50] + "-r")


def test_another_aggregator_image_than_the_benchmark_s_is_refused_before_anything_starts(
    tmp_path: Path,
) -> None:
    registry, aggregator = _Registry(), _SilentAggregator()
    with pytest.raises(ConfigError, match="no site would release its key"):
        pool_benchmark(registry, 4, PoolTarget(sha256_digest(b"another"), POOL_ANCHOR),
                       [2], aggregator,
                       folder=PoolFolder(tmp_path.as_uri()), endpoints=None)
    assert aggregator.specs == [] and not any(tmp_path.iterdir())


def test_a_benchmark_without_an_aggregator_does_not_pool_in_the_tee() -> None:
    with pytest.raises(ConfigError, match="does not pool in the TEE"):
        require_aggregator(SimpleNamespace(id=4, aggregator_image_digest=None,
                                           pool_recipient_key=None))
    assert require_aggregator(SimpleNamespace(
        id=4, aggregator_image_digest=AGGREGATOR, pool_recipient_key=POOL_RECIPIENT_KEY,
        pool_log_key=POOL_ANCHOR.log_key)) == TARGET
    with pytest.raises(ConfigError, match="does not pool in the TEE"):  # no log key: no anchor
        require_aggregator(SimpleNamespace(
            id=4, aggregator_image_digest=AGGREGATOR, pool_recipient_key=POOL_RECIPIENT_KEY))


def test_the_aggregator_image_is_found_beside_the_evaluation_image() -> None:
    repo = "europe-docker.pkg.dev/p/sealbench/eval"
    assert aggregator_reference(f"{repo}@{sha256_digest(b'eval')}", AGGREGATOR) == \
        f"{repo}@{AGGREGATOR}"
    with pytest.raises(ConfigError, match="names no repository"):
        aggregator_reference(AGGREGATOR, AGGREGATOR)


def test_a_backend_that_does_not_run_the_aggregator_is_refused() -> None:
    benchmark = SimpleNamespace(id=4, aggregator_image_digest=AGGREGATOR, image_reference="")
    with pytest.raises(ConfigError, match="does not run the aggregator image"):
        make_aggregator_launcher("nitro", profile=None, client=None,  # type: ignore[arg-type]
                                 benchmark=benchmark, endpoints=None, mock_tee=None, image=None,
                                 cs=CsOptions())


def test_a_confidential_space_pool_outside_the_mock_needs_a_cloud_folder(tmp_path: Path) -> None:
    profile = SimpleNamespace(name="authority", profile=SimpleNamespace(account=None))
    client = SimpleNamespace(get_benchmark=lambda _id: SimpleNamespace(
        id=4, aggregator_image_digest=AGGREGATOR, pool_recipient_key=POOL_RECIPIENT_KEY,
        pool_log_key=POOL_ANCHOR.log_key))
    with pytest.raises(ConfigError, match="cannot write this machine's folders"):
        pool_on_tee(profile, client, 4, tee="confidential-space",
                    pool_uri=(tmp_path / "pools").as_uri())
    with pytest.raises(ConfigError, match="pool provider"):
        pool_on_tee(profile, client, 4, tee="confidential-space", pool_uri="gs://a/pools")


def test_pool_in_tee_takes_the_backend_s_aggregator_image() -> None:
    """``benchmark create --pool-in-tee``: the mock's aggregator is derived from the enclave
    code; a real TEE's pushed image must be named; the flag and a digest together are refused
    before anything is sent."""
    from sealbench.client.images import pinned
    from sealbench.client.registry import governance
    from sealbench.mocktee.image import aggregator_image_digest

    assert pinned.aggregator_image("mock") == aggregator_image_digest()
    with pytest.raises(ConfigError, match="names its pushed aggregator image explicitly"):
        pinned.aggregator_image("confidential-space")
    sent: list[Any] = []
    client = SimpleNamespace(create_benchmark=sent.append)
    with pytest.raises(ConfigError, match="not both"):
        governance.create_benchmark(client, "wdbc", pool_in_tee=True,  # type: ignore[arg-type]
                                    aggregator_digest=AGGREGATOR)
    assert sent == []
    governance.create_benchmark(client, "wdbc", pool_in_tee=True)  # type: ignore[arg-type]
    assert sent[0].aggregator_image_digest == aggregator_image_digest()
