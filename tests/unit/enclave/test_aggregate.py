"""The aggregator workload (issue 27, :mod:`sealbench.enclave.aggregate`), run in-process as the
evaluation's unit tests run it: local buckets (``file://``) for three WDBC sites and the
authority, in-memory KMS stand-ins, and the unsigned tokens the mock launcher would sign for an
aggregator launch.

Each site is what a site enclave leaves: its dataset's ``dek.wrapped`` (the DEK wrapped by the
hospital's key, AAD binding dataset id and data digest) and, at its run's result location,
``pool.sealed`` (:func:`~sealbench.benchmarks.pooling.seal_statistics` encrypted with
:func:`~sealbench.crypto.pool_statistics.encrypt_statistics` under that DEK). The hospital's key
releases the DEK only to the workload uids its grant names, as its key-release condition
would: each grant here names the aggregator's uid (image digest, no dataset, the model, the
public-release marker, benchmark, pin), the way the existing tests grant an evaluation
identity. The noise is switched off (``LocalExact``) through the Python parameter, so the
pooled figures are checkable against all the cases taken together, except where a test checks
the real, keyed noise. The authorization the aggregator verifies first is made by
:class:`tests.pool_ledger.Ledger` (a registry's log key, debits and proofs, in memory)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from sealbench.benchmarks.brats import (
    BRATS_2023_GLI_METRICS,
    CaseFailure,
    CaseScores,
    RegionScores,
)
from sealbench.benchmarks.brats.plugin import PLUGIN as BRATS
from sealbench.benchmarks.brats.published import PublishedSummary
from sealbench.benchmarks.pooling import pooled_release_spec, seal_statistics
from sealbench.benchmarks.release import LocalExact, NoiseSource
from sealbench.benchmarks.wdbc import summary as s
from sealbench.benchmarks.wdbc.plugin import PLUGIN as WDBC
from sealbench.contract.errors import (
    AssetIntegrityError,
    AuthorizationRefused,
    EnclaveError,
    KeyReleaseDenied,
    SpecError,
)
from sealbench.contract.events import StepStarted, parse_event
from sealbench.contract.pool import (
    POOL_AUDIENCE,
    POOL_INPUTS_OBJECT,
    POOL_STATISTICS_OBJECT,
    POOLED_RELEASE_OBJECT,
    POOLED_TOKEN_OBJECT,
    AggregateSpec,
    PooledRelease,
    PoolInput,
    PoolInputs,
    pooled_nonce,
)
from sealbench.contract.pool_authorization import PoolAuthorization
from sealbench.contract.result import FAILURE_OBJECT, FailureRecord
from sealbench.contract.spec import AssetLocation
from sealbench.contract.workload import WorkloadIdentity
from sealbench.crypto.digest import Sha256Digest, sha256_digest
from sealbench.crypto.envelope import (
    DataKey,
    InsecureInMemoryKeyWrapper,
    KeyWrapper,
    asset_aad,
    wrap_key,
)
from sealbench.crypto.errors import IntegrityError
from sealbench.crypto.note import SignerKey
from sealbench.crypto.pool_statistics import encrypt_statistics
from sealbench.crypto.sealing import generate_recipient_key, open_sealed, pooled_release_info
from sealbench.enclave.aggregate import AggregateReport, AttestedAggregate, run_aggregator
from sealbench.enclave.steps import claims_of
from sealbench.mocktee.verifier import WorkloadLaunch
from sealbench.platforms import (
    BlobStore,
    KeyAccessDenied,
    StorageAccessDenied,
    parse_storage_uri,
)
from tests.pool_ledger import Ledger
from tests.unit.contract.test_pool import (
    POOL_KEY,
    POOL_LOG_SIGNER,
    POOL_RECIPIENT,
    POOL_RECIPIENT_KEY,
)

from .conftest import IMAGE as EVALUATION_IMAGE
from .conftest import FakeAttester

AGGREGATOR_IMAGE = sha256_digest(b"unit-test aggregator image")
PIN = str(WDBC.ref)
MODEL_DIGEST = sha256_digest(b"the pooled model's weights")
AUTHORITY_POOL = (
    "projects/100000000001/locations/global/workloadIdentityPools/authority-pool/providers/attestation")


@pytest.fixture(autouse=True)
def _quiet_insecure_noise(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="sealbench.benchmarks")


def _wdbc_results(rng: np.random.Generator, n: int, tag: str) -> list[s.WdbcCaseResult]:
    """Binormal scores with ties (two decimals) and one failed case."""
    y = rng.random(n) < 0.4
    p = 1 / (1 + np.exp(-rng.normal(np.where(y, 1.2, -1.2), 1.3)))
    out = [s.WdbcCaseResult(case_id=f"{tag}{i}", malignant=bool(y[i]),
                            score=round(float(p[i]), 2)) for i in range(n - 1)]
    out.append(s.WdbcCaseResult(case_id=f"{tag}x", malignant=True, score=None, reason="failed"))
    return out


def _identity(image: Sha256Digest, model_digest: str = MODEL_DIGEST, pin: str = PIN) -> str:
    return WorkloadIdentity(Sha256Digest(image), None, Sha256Digest(model_digest),
                            POOL_RECIPIENT, "1", pin).uid()


@dataclass
class GrantedKey:
    """A hospital's key as its key-release condition serves it: the DEK is unwrapped only for
    a workload uid its grant names (KMS's 403 otherwise)."""

    inner: InsecureInMemoryKeyWrapper
    grants: set[str]
    caller: str = ""
    calls: int = 0

    @property
    def key_name(self) -> str:
        return self.inner.key_name

    def wrap(self, plaintext: bytes, aad: bytes) -> bytes:
        return self.inner.wrap(plaintext, aad)

    def unwrap(self, ciphertext: bytes, aad: bytes) -> bytes:
        self.calls += 1
        if self.caller not in self.grants:
            raise KeyAccessDenied(key_name=self.key_name, operation="decrypt", identity=None)
        return self.inner.unwrap(ciphertext, aad)


@dataclass
class SiteAccess:
    """The attested aggregator's access: local buckets, each site's key through its grant."""

    keys: dict[str, GrantedKey]
    caller: str
    pools: list[str] = field(default_factory=list)
    #: Locations whose reads are denied (a bucket that grants this workload no read).
    unreadable: frozenset[str] = frozenset()

    def store(self, uri: str, pool_provider: str) -> tuple[BlobStore, str]:
        self.pools.append(pool_provider)
        store, prefix = parse_storage_uri(uri).open()
        return (_Unreadable(store) if uri in self.unreadable else store), prefix

    def key_wrapper(self, owner: AssetLocation) -> KeyWrapper:
        key = self.keys[owner.kms_key]
        key.caller = self.caller
        return key


class _Unreadable:
    def __init__(self, inner: BlobStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def get_bytes(self, name: str, max_size: int) -> bytes:
        raise StorageAccessDenied(f"permission denied to read {name}")


@dataclass
class Site:
    run_id: str
    results: list[Any]  # the plug-in's per-case results
    item: PoolInput
    dek: DataKey
    document: bytes


#: The noise off, so pooled figures are checkable (``noise=None``: the aggregator's own).
_EXACT = LocalExact()


@dataclass
class Pool:
    root: Path
    sites: list[Site]
    keys: dict[str, GrantedKey]
    authorization: PoolAuthorization
    ledger: Ledger
    pin: str = PIN

    @property
    def inputs(self) -> PoolInputs:
        return self.authorization.inputs

    @property
    def out(self) -> Path:
        return self.root / "pooled"

    def spec(self, **changes: object) -> AggregateSpec:
        base = AggregateSpec.for_anchor(
            self.ledger.anchor,
            run_id="agg-1", benchmark_id="1", metrics_version=self.pin, model_digest=MODEL_DIGEST,
            inputs_uri=f"file://{self.root / 'authority' / POOL_INPUTS_OBJECT}",
            inputs_digest=self.inputs.digest(), result_uri=f"file://{self.out}",
            result_pool_provider=AUTHORITY_POOL)
        return AggregateSpec.model_validate({**base.model_dump(), **changes})

    def write_inputs(self, authorization: PoolAuthorization) -> None:
        folder = self.root / "authority"
        folder.mkdir(exist_ok=True)
        (folder / POOL_INPUTS_OBJECT).write_bytes(authorization.to_bytes())

    def run(self, spec: AggregateSpec | None = None, *, environ: dict[str, str] | None = None,
            image: Sha256Digest = AGGREGATOR_IMAGE, unreadable: frozenset[str] = frozenset(),
            noise: NoiseSource | None = _EXACT,
            ) -> tuple[AggregateReport, FakeAttester]:
        spec = spec or self.spec()
        env = spec.to_environ()
        attester = FakeAttester(
            WorkloadLaunch(image, f"local/aggregator@{image}", env), self.root / "token")

        def access(run: AttestedAggregate) -> SiteAccess:
            uid = WorkloadIdentity(run.image_digest, None, Sha256Digest(run.spec.model_digest),
                                   Sha256Digest(run.spec.recipient_digest),
                                   run.spec.benchmark_id, str(run.spec.metrics_version)).uid()
            return SiteAccess(self.keys, uid, unreadable=unreadable)

        report = run_aggregator(environ if environ is not None else env, attester,
                                access=access, noise=noise)
        return report, attester


def _site(root: Path, k: int, results: list[Any], plugin: Any = WDBC
          ) -> tuple[Site, GrantedKey]:
    """One site of ``plugin``'s benchmark as its enclave leaves it: dek.wrapped at the dataset,
    pool.sealed at the run's result location."""
    dataset = root / f"hospital-{k}"
    dataset.mkdir()
    key = InsecureInMemoryKeyWrapper(f"projects/h{k}/locations/global/keyRings/r/cryptoKeys/d")
    data_digest = sha256_digest(f"dataset manifest {k}".encode())
    dek = DataKey.generate()
    wrapped = wrap_key(key, dek, asset_aad("dataset", f"ds-{k}", data_digest))
    (dataset / "dek.wrapped").write_bytes(wrapped.to_bytes())
    run_id = f"run-{k}"
    document, commitment = seal_statistics(plugin.ref, run_id, results)
    result_dir = root / f"results-{k}"
    result_dir.mkdir()
    (result_dir / POOL_STATISTICS_OBJECT).write_bytes(
        encrypt_statistics(dek, run_id, commitment, document))
    location = AssetLocation(
        asset_id=f"ds-{k}", uri=f"file://{dataset}", kms_key=key.key_name,
        pool_provider=f"projects/20000000000{k}/locations/global/workloadIdentityPools/"
                      f"hospital-{k}/providers/attestation")
    item = PoolInput(run_id=run_id, dataset=location, data_digest=data_digest,
                     statistics_uri=f"file://{result_dir}", commitment=commitment)
    grant = GrantedKey(key, {_identity(AGGREGATOR_IMAGE, pin=str(plugin.ref))})
    return Site(run_id, results, item, dek, document), grant


def _pool(root: Path, sites_results: list[list[Any]], plugin: Any = WDBC) -> Pool:
    sites, keys = [], {}
    for k, results in enumerate(sites_results):
        site, key = _site(root, k, results, plugin)
        sites.append(site)
        keys[key.key_name] = key
    pin = str(plugin.ref)
    inputs = PoolInputs(pool_id="pool-1", benchmark_id="1", metrics_version=pin,
                        model_id="model-1", model_digest=MODEL_DIGEST,
                        inputs=tuple(site.item for site in sites))
    ledger = Ledger(POOL_RECIPIENT_KEY, log=POOL_LOG_SIGNER)
    declared = pooled_release_spec(plugin)
    authorization = ledger.authorize(
        inputs, rho=None if declared is None else declared.rho,
        laplace=() if declared is None else declared.loss.laplace)  # WDBC's headline AUROC
    made = Pool(root, sites, keys, authorization, ledger, pin)
    made.write_inputs(authorization)
    return made


@pytest.fixture
def pool(tmp_path: Path) -> Pool:
    rng = np.random.default_rng(27)
    return _pool(tmp_path, [_wdbc_results(rng, n, f"s{k}-") for k, n in enumerate((7, 30, 45))])


def _refused(pool: Pool, error: type[EnclaveError], **run: Any) -> EnclaveError:
    with pytest.raises(error) as caught:
        pool.run(**run)
    assert not (pool.out / POOLED_RELEASE_OBJECT).exists()
    assert not (pool.out / POOLED_TOKEN_OBJECT).exists()
    return caught.value


# -- the release ---------------------------------------------------------------------------------


def test_three_sites_pool_to_the_auroc_of_all_cases_together(
        pool: Pool, capsys: pytest.CaptureFixture[str]) -> None:
    report, attester = pool.run()

    # sealed to the spec's recipient (the registry's pool-release key) for this pool and image:
    # only that key opens it, and what it opens is the release the report states
    sealed = (pool.out / POOLED_RELEASE_OBJECT).read_bytes()
    assert sealed == report.sealed
    info = pooled_release_info("pool-1", "1", AGGREGATOR_IMAGE)
    with pytest.raises(IntegrityError):
        open_sealed(sealed, generate_recipient_key(), info)
    release = PooledRelease.from_bytes(open_sealed(sealed, POOL_KEY, info))
    assert release == report.release
    every = [r for site in pool.sites for r in site.results]
    labels = [bool(r.malignant) for r in every]
    scores = [r.penalised_score() for r in every]  # a failed case enters with the worst score
    # noise off: an exact release of the pooled spec (what parse_pooled_summary reads, exact)
    exact = replace(WDBC.release_spec, exact=True)
    figures = {str(f.ref): f
               for f in WDBC.figures(s.parse_pooled_summary(release.aggregates, exact))}
    assert figures["auroc"].value == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    assert figures["auroc"].bias is None  # exact: computed over every case, not from bins
    assert figures["n_cases"].value == release.n_cases == len(every) == 82
    assert release.inputs_digest == pool.inputs.digest()
    assert release.model_digest == MODEL_DIGEST and release.pool_id == "pool-1"
    assert [(i.run_id, i.dataset_id, i.commitment) for i in release.inputs] == [
        (site.run_id, site.item.dataset.asset_id, site.item.commitment) for site in pool.sites]

    # the token binds the sealed release's exact bytes, under the pool's audience
    token = (pool.out / POOLED_TOKEN_OBJECT).read_text()
    assert token == report.token == attester.tokens[-1]
    claims = claims_of(token)
    assert claims.aud == POOL_AUDIENCE
    assert pooled_nonce(sealed) in claims.eat_nonce
    assert claims.image_digest == AGGREGATOR_IMAGE

    events = [e for e in map(parse_event, capsys.readouterr().out.splitlines()) if e is not None]
    steps = [e for e in events if isinstance(e, StepStarted)]
    assert [(e.index, e.total) for e in steps] == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)]
    assert events[-1].event == "done"


def test_three_brats_sites_pool_to_the_means_of_all_cases_together(tmp_path: Path) -> None:
    """BraTS through the aggregator workload, the noise off: each region's pooled mean Dice and
    the case count are those of every site's cases together, a failed case counting 0."""
    spec = BRATS_2023_GLI_METRICS
    rng = np.random.default_rng(2027)

    def case(case_id: str) -> CaseScores:
        regions = {}
        for region in spec.regions:
            dice = float(rng.uniform(0.2, 1.0))
            regions[region] = RegionScores(
                dice=dice, hd95=float(rng.uniform(1, 20)), sensitivity=0.9, specificity=1.0,
                lesion_dice=dice, lesion_hd95=2.0, num_tp=1, num_fp=0, num_fn=0,
                gt_volume_mm3=1000.0, pred_volume_mm3=900.0)
        return CaseScores(case_id=case_id, regions=regions)

    sites: list[list[Any]] = [[case(f"s{k}c{i}") for i in range(n)]
                              for k, n in enumerate((5, 5, 12))]
    sites[2].append(CaseFailure(case_id="s2-failed", reason="inference failed"))
    brats = _pool(tmp_path, sites, BRATS)
    report, _ = brats.run()
    release = report.release
    assert str(release.metrics_version) == brats.pin and release.n_cases == 23
    # read as released, exact (the noise was off): the site parser would refuse an exact release
    summary = PublishedSummary.model_validate(release.aggregates)
    assert summary.release.exact
    figures = {str(f.ref): f for f in BRATS.figures(summary)}
    every = [r for site in sites for r in site]
    for region in spec.regions:
        dice = [r.regions[region].dice if isinstance(r, CaseScores) else 0.0 for r in every]
        assert figures[f"dice {region}"].value == pytest.approx(np.mean(dice), abs=1e-12)
    assert summary.n_cases == len(every)


def test_the_authoritys_storage_is_reached_through_its_pool(pool: Pool) -> None:
    seen: list[SiteAccess] = []
    spec = pool.spec()
    env = spec.to_environ()
    attester = FakeAttester(
        WorkloadLaunch(AGGREGATOR_IMAGE, "local/aggregator", env), pool.root / "token")

    def access(run: AttestedAggregate) -> SiteAccess:
        made = SiteAccess(pool.keys, _identity(run.image_digest))
        seen.append(made)
        return made

    run_aggregator(env, attester, access=access, noise=LocalExact())
    pools = seen[0].pools
    site_pools = {site.item.dataset.pool_provider for site in pool.sites}
    # the inputs, the result folder: the authority's; each dataset and its statistics: the site's
    assert pools.count(AUTHORITY_POOL) == 2
    assert set(pools) == site_pools | {AUTHORITY_POOL}


# -- refusals: nothing is released ---------------------------------------------------------------


@pytest.mark.parametrize("how", ["another commitment", "the same commitment"])
def test_stale_statistics_fail_the_whole_pool(pool: Pool, how: str) -> None:
    """Site 1 ran again (a new document under a fresh salt) after the registry stored the
    commitment the inputs name: whether its new object is bound to its new commitment (the AAD
    refuses it) or claims the old one (the digest refuses it), the pool fails naming it."""
    site = pool.sites[1]
    document, fresh = seal_statistics(WDBC.ref, site.run_id, site.results)
    commitment = fresh if how == "another commitment" else site.item.commitment
    path = Path(site.item.statistics_uri.removeprefix("file://")) / POOL_STATISTICS_OBJECT
    path.write_bytes(encrypt_statistics(site.dek, site.run_id, commitment, document))

    error = _refused(pool, AssetIntegrityError)
    assert "run-1" in str(error)
    assert "run-0" not in str(error) and "run-2" not in str(error)


def test_an_authorization_that_is_not_the_attested_one_is_refused(pool: Pool) -> None:
    """The authority swaps in another genuine authorization (two of the three sites) than the
    one the attested spec names: refused before any site's key is asked for."""
    fewer = pool.ledger.authorize(pool.inputs.model_copy(update={
        "pool_id": "pool-2", "inputs": pool.inputs.inputs[:2], "debits": ()}),
        rho=pool.inputs.rho, laplace=pool.inputs.laplace)
    pool.write_inputs(fewer)  # the spec still names the three-site document's digest
    error = _refused(pool, AuthorizationRefused)
    assert "SEALBENCH_POOL_INPUTS_DIGEST" in str(error)
    assert all(key.calls == 0 for key in pool.keys.values())
    # the failure is recorded at the result destination, as an evaluation's
    record = FailureRecord.model_validate_json((pool.out / FAILURE_OBJECT).read_bytes())
    assert record.run_id == "agg-1" and record.error == "AuthorizationRefused"
    assert record.step == "verify the registry's pool authorization"


def test_authorization_of_another_model_is_refused(pool: Pool) -> None:
    other = pool.ledger.authorize(pool.inputs.model_copy(update={
        "pool_id": "pool-2", "model_digest": sha256_digest(b"another model"), "debits": ()}),
        rho=pool.inputs.rho, laplace=pool.inputs.laplace)
    pool.write_inputs(other)
    error = _refused(pool, AuthorizationRefused, spec=pool.spec(
        inputs_digest=other.inputs.digest()))
    assert "model_digest" in str(error)


def test_operator_forged_authorization_draws_nothing(pool: Pool) -> None:
    """The registry operator's own inputs, signed with a key of its own and proven in a log
    of its own: the attested spec names the benchmark's log key (the uid binds it), so the
    aggregator refuses before any key is released or any noise drawn."""
    forger = Ledger(POOL_RECIPIENT_KEY, log=SignerKey.generate(POOL_LOG_SIGNER.name))
    forged = forger.authorize(pool.inputs.model_copy(update={"debits": ()}),
                              rho=pool.inputs.rho, laplace=pool.inputs.laplace)
    pool.write_inputs(forged)
    error = _refused(pool, AuthorizationRefused, spec=pool.spec(
        inputs_digest=forged.inputs.digest()))
    assert "not signed by the benchmark's log key" in str(error)
    assert all(key.calls == 0 for key in pool.keys.values())


def test_an_authorization_without_its_debits_logged_draws_nothing(pool: Pool) -> None:
    """The debits stripped from the log evidence (an operator that never wrote them)."""
    stripped = pool.authorization.model_copy(update={
        "debit_events": pool.authorization.debit_events[:1]})
    pool.write_inputs(stripped)
    error = _refused(pool, AuthorizationRefused)
    assert "debit events are not the ones the authorization names" in str(error)
    assert all(key.calls == 0 for key in pool.keys.values())


def test_relaunching_one_authorization_yields_the_very_same_release(pool: Pool) -> None:
    """The registry operator relaunches the genuine aggregator 10 times on one authorization
    and opens every release with the pool-release key: every draw is the same (noise keyed by
    the sites' released keys and the authorization), so averaging them buys nothing."""
    info = pooled_release_info("pool-1", "1", AGGREGATOR_IMAGE)
    opened = set()
    for attempt in range(10):
        spec = pool.spec(run_id=f"agg-{attempt}", result_uri=f"file://{pool.out}-{attempt}")
        report, _ = pool.run(spec, noise=None)
        opened.add(open_sealed(report.sealed, POOL_KEY, info))
    assert len(opened) == 1
    release = PooledRelease.from_bytes(opened.pop())
    assert "discrete Gaussian" in str(release.aggregates)


def test_another_authorization_draws_other_noise(pool: Pool) -> None:
    """A fresh draw needs a fresh authorization (debited first): it gets other noise."""
    first, _ = pool.run(noise=None)
    again = pool.ledger.authorize(pool.inputs.model_copy(update={
        "pool_id": "pool-2", "debits": ()}), rho=pool.inputs.rho, laplace=pool.inputs.laplace)
    pool.write_inputs(again)
    second, _ = pool.run(pool.spec(inputs_digest=again.inputs.digest(),
                                   result_uri=f"file://{pool.out}-2"), noise=None)
    assert first.release.aggregates != second.release.aggregates


@pytest.mark.parametrize("name", ["SEALBENCH_DATASET_URI", "SEALBENCH_RECIPIENT_PUBLIC_KEY"])
def test_an_evaluation_input_in_the_environment_is_refused(pool: Pool, name: str) -> None:
    environ = {**pool.spec().to_environ(), name: "file:///somewhere"}
    with pytest.raises(SpecError, match=name):
        pool.run(environ=environ)
    assert not pool.out.exists()


def test_a_site_whose_key_is_not_released_fails_the_pool(pool: Pool) -> None:
    """Site 2's grant names only the evaluation image: its key refuses the aggregator."""
    site = pool.sites[2]
    pool.keys[site.item.dataset.kms_key].grants = {_identity(EVALUATION_IMAGE)}
    error = _refused(pool, KeyReleaseDenied)
    assert "run-2" in str(error)
    assert site.dek.secret_bytes().hex() not in str(error)


def test_statistics_the_sites_pool_does_not_let_the_aggregator_read_fail_the_pool(
        pool: Pool) -> None:
    site = pool.sites[1]
    error = _refused(pool, KeyReleaseDenied,
                     unreadable=frozenset({site.item.statistics_uri}))
    assert "run-1" in str(error) and "statistics" in str(error)


def test_an_image_the_sites_did_not_grant_is_refused(pool: Pool) -> None:
    error = _refused(pool, KeyReleaseDenied, image=EVALUATION_IMAGE)
    assert "run-0" in str(error)


@pytest.mark.parametrize("command", [["sealbench.enclave", "aggregate"],
                                     ["sealbench.enclave.aggregate"]])
def test_the_entry_points_run_the_aggregator(pool: Pool, command: list[str]) -> None:
    """``python -m sealbench.enclave aggregate`` and the mock backend's
    ``python -m sealbench.enclave.aggregate``: the aggregator's checks, the evaluation's process
    setup (the ``failed`` event, the exit code)."""
    env = {**pool.spec().to_environ(), "SEALBENCH_DATASET_URI": "file:///x",
           "PATH": os.environ.get("PATH", "")}
    done = subprocess.run(
        [sys.executable, "-m", *command], env=env, capture_output=True,
        text=True, timeout=120, check=False)
    assert done.returncode == SpecError.exit_code
    assert "an aggregator takes no evaluation input" in done.stderr
    failed = [e for e in map(parse_event, done.stdout.splitlines()) if e is not None]
    assert failed and failed[-1].event == "failed"
