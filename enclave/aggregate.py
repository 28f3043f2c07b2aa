"""The aggregator workload (issue 27, "The aggregator is a workload"): the second program the
TEE runs, which pools the sites' exact statistics under one release. The flow and the documents
are :mod:`sealbench.contract.pool`'s; this module is the aggregator's side of it.

:func:`run_aggregator` runs, as the evaluation's :func:`~sealbench.enclave.run.run_enclave`
does, a chain of steps each returning what the next needs, and is the aggregator's one error
boundary:

0. **Spec and attestation.** :class:`~sealbench.contract.pool.AggregateSpec` is read from the
   environment only. An evaluation input present in it (any name of the run spec's that is
   not one of :data:`~sealbench.contract.pool.AGGREGATE_ENV_NAMES`: a dataset, a model, a
   recipient key) refuses the run: an aggregator is never handed evaluation inputs. The first
   token is checked exactly as the evaluation's
   (:func:`~sealbench.enclave.steps.attested_evidence`): its env overrides equal the
   environment for every aggregator name, its endpoint overrides fit its platform's token
   destinations, and its image digest is the aggregator image's. With an egress guard, the
   process then connects only to those destinations.
1. **Authorization.** ``pool-authorization.json`` is read at ``inputs_uri`` through the
   authority's pool (``result_pool_provider``; ``file://`` needs none), at most
   :data:`~sealbench.contract.result.MAX_DOCUMENT_BYTES`, and verified
   (:func:`~sealbench.contract.pool_authorization.verify_authorization`) against the spec's
   pool anchor, which the uid binds: signed by the registry's log key, its debits in the log
   (inclusion proofs in a checkpoint cosigned by the benchmark's witnesses, if it names any),
   each naming this authorization and the release's rho; its inputs document's digest must be
   ``inputs_digest`` and its benchmark, pin and model digest the spec's. Anything else is
   :class:`~sealbench.contract.errors.AuthorizationRefused` (exit 19): no site's statistics are
   read and no noise is drawn.
2. **Keys and statistics.** For each input, the site's dataset DEK is unwrapped exactly as the
   evaluation unwraps it (:func:`~sealbench.enclave.steps.unwrap_asset`: ``dek.wrapped`` at the
   dataset's location, the AAD binding the dataset id and its data digest, through the site's
   own KMS key and pool, whose key-release condition must admit the aggregator image), then
   ``<statistics_uri>/pool.sealed`` is read (bounded by
   :data:`~sealbench.benchmarks.pooling.MAX_STATISTICS_BYTES` plus the AEAD's overhead),
   decrypted (:func:`~sealbench.crypto.pool_statistics.decrypt_statistics`: the AAD binds the
   run and the commitment) and checked against the commitment
   (:func:`~sealbench.benchmarks.pooling.open_statistics`). Any input that fails fails the whole
   pool, naming its run: nothing partial is ever released.
3. **Pooling.** :func:`~sealbench.benchmarks.pooling.pool_exact`, the noise drawn once: the
   discrete Gaussian sampled exactly from a stream keyed by every site's released key and the
   authorization's digest (:mod:`sealbench.benchmarks.seeded_noise`), so the aggregator run
   again on the same authorization releases the very same figures and a fresh draw needs a
   fresh authorization, debited on the log first. Only a Python caller (a test) can pass another
   source (``noise=LocalExact()``); no environment variable can.
4. **Release.** :class:`~sealbench.contract.pool.PooledRelease` (the inputs used, each with its
   run, dataset and commitment; the case count; the pooled public summary), sealed to the
   spec's recipient, the registry's pool-release key, whose digest the uid binds
   (:func:`~sealbench.crypto.sealing.seal`,
   :func:`~sealbench.crypto.sealing.pooled_release_info`), so that whoever launched the
   aggregator cannot read it; a token of audience
   :data:`~sealbench.contract.pool.POOL_AUDIENCE` whose ``eat_nonce`` is
   :func:`~sealbench.contract.pool.pooled_nonce` of the sealed bytes (checked in the token),
   then ``pooled.sealed`` and ``pooled.token`` at ``result_uri`` (token last: its presence
   marks a complete release), through the authority's pool.

Progress is reported as the evaluation's is (:mod:`sealbench.enclave.progress`: ``step`` events
out of :data:`AGGREGATE_STEPS`, ``waiting`` while IAM applies a grant, ``done``, and ``failed``
from the entry point), and a failure after the result destination is known leaves the
evaluation's attested failure record there (``failure.token``, ``failure.json``,
:mod:`sealbench.enclave.run`). Logs and errors name runs, datasets and counts, never a key, a
token, a case or a value.

Entry point: ``python -m sealbench.enclave.aggregate [--launcher-dir DIR]`` (the mock backend's
command) or ``python -m sealbench.enclave aggregate [--launcher-dir DIR]``, with the evaluation's
process setup (:mod:`sealbench.enclave.__main__`: egress guard first, logging, the ``failed``
event and exit code).
"""

from __future__ import annotations

import base64
import contextlib
import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from sealbench.benchmarks.interface import Benchmark
from sealbench.benchmarks.pooling import (
    MAX_STATISTICS_BYTES,
    PoolingError,
    SiteStatistics,
    open_statistics,
    pool_exact,
    pooled_release_spec,
)
from sealbench.benchmarks.release import NoiseSource
from sealbench.benchmarks.seeded_noise import SeededDiscreteGaussian, pool_noise_seed
from sealbench.contract.errors import (
    AssetIntegrityError,
    AuthorizationRefused,
    DestinationError,
    EnclaveError,
    KeyReleaseDenied,
    ResultUploadError,
    SpecError,
    StorageFailure,
)
from sealbench.contract.events import StepStarted
from sealbench.contract.pool import (
    AGGREGATE_ENV_NAMES,
    ENV_RESULT_POOL_PROVIDER,
    POOL_AUDIENCE,
    POOL_STATISTICS_OBJECT,
    POOLED_RELEASE_OBJECT,
    POOLED_TOKEN_OBJECT,
    AggregateSpec,
    PooledInput,
    PooledRelease,
    PoolInput,
    PoolInputs,
    pooled_nonce,
)
from sealbench.contract.pool_authorization import (
    AuthorizationError,
    PoolAuthorization,
    VerifiedAuthorization,
    verify_authorization,
)
from sealbench.contract.privacy_loss import PrivacyLoss
from sealbench.contract.result import MAX_DOCUMENT_BYTES, ResultFormatError
from sealbench.contract.spec import (
    ENV_OVERRIDE_NAMES,
    MAX_IAM_WAIT_S,
    RunSpecError,
    ServiceEndpoints,
)
from sealbench.crypto import streaming
from sealbench.crypto.digest import Sha256Digest, parse_digest
from sealbench.crypto.errors import IntegrityError
from sealbench.crypto.pool_statistics import decrypt_statistics
from sealbench.crypto.sealing import pooled_release_info, public_key_from_raw, seal
from sealbench.enclave.grant_wait import GrantWait
from sealbench.enclave.network import EgressGuard
from sealbench.enclave.platforms import EvidenceSource, PlatformResolver
from sealbench.enclave.progress import emit, run_done
from sealbench.enclave.publish import bound_token
from sealbench.enclave.rules import benchmark_for
from sealbench.enclave.run import RunProgress, record_failure, timings_line
from sealbench.enclave.steps import attested_evidence, unwrap_asset
from sealbench.enclave.timing import StepTimer
from sealbench.platforms import (
    BlobStore,
    CloudError,
    CredentialError,
    ObjectNotFound,
    StorageAccessDenied,
    join_name,
)
from sealbench.platforms.access import AssetAccess
from sealbench.platforms.attester import Attester
from sealbench.platforms.platform import Platform

__all__ = [
    "AGGREGATE_STEPS",
    "MAX_SEALED_STATISTICS",
    "AggregateReport",
    "AggregatorAccessFactory",
    "AttestedAggregate",
    "attest_aggregate",
    "main",
    "read_aggregate_spec",
    "run_aggregator",
]

_log = logging.getLogger("sealbench.enclave")

#: The aggregator's steps after step 0 (reading the spec and attesting).
AGGREGATE_STEPS: Final = 4
#: The largest ``pool.sealed`` read: a statistics document at its cap, encrypted.
MAX_SEALED_STATISTICS: Final = streaming.ciphertext_size(MAX_STATISTICS_BYTES)


@dataclass(frozen=True)
class AttestedAggregate:
    """An aggregate spec read from the environment, equal to the attested env overrides, with
    the plug-in it pins, the aggregator image's digest from the token, and the run's checked
    token destinations."""

    spec: AggregateSpec
    benchmark: Benchmark
    image_digest: Sha256Digest
    attester: Attester
    timer: StepTimer
    destinations: ServiceEndpoints
    platform: Platform | None = None


#: Builds the asset access of an attested aggregator run (tests pass their own).
AggregatorAccessFactory = Callable[[AttestedAggregate], AssetAccess]


@dataclass(frozen=True)
class AggregateReport:
    """A published pool: the release, its sealed bytes (``pooled.sealed``), its token and the
    seconds per step."""

    release: PooledRelease
    sealed: bytes
    token: str
    timings: dict[str, float]


# -- step 0: the spec and the first token ----------------------------------------------------


def read_aggregate_spec(environ: Mapping[str, str]) -> tuple[AggregateSpec, Benchmark]:
    """The aggregate spec and the plug-in it pins; :class:`SpecError` for an evaluation input
    in the environment (named, never its value) or a bad variable."""
    foreign = sorted(n for n in ENV_OVERRIDE_NAMES
                     if n not in AGGREGATE_ENV_NAMES and n in environ)
    if foreign:
        raise SpecError(f"an aggregator takes no evaluation input, yet {foreign} are set")
    try:
        spec = AggregateSpec.from_environ(environ)
    except RunSpecError as exc:
        raise SpecError(f"invalid aggregate specification: {exc}") from exc
    return spec, benchmark_for(spec.metrics_version)


def attest_aggregate(
    environ: Mapping[str, str],
    source: Attester | EvidenceSource,
    timer: StepTimer,
    resolve: PlatformResolver | None = None,
) -> AttestedAggregate:
    """Step 0: the spec, then the first token checked as the evaluation's
    (:func:`~sealbench.enclave.steps.attested_evidence` over
    :data:`~sealbench.contract.pool.AGGREGATE_ENV_NAMES`); the token must attest no
    evaluation input either."""
    spec, benchmark = read_aggregate_spec(environ)
    evidence, destinations, image_digest = attested_evidence(
        environ, AGGREGATE_ENV_NAMES, source, timer, resolve)
    foreign = sorted(n for n in evidence.workload.env_override
                     if n in ENV_OVERRIDE_NAMES and n not in AGGREGATE_ENV_NAMES)
    if foreign:
        raise SpecError(f"the attested launch carries evaluation inputs {foreign}")
    return AttestedAggregate(spec, benchmark, image_digest, evidence.attester, timer,
                             destinations.endpoints, evidence.platform)


def _platform_access(run: AttestedAggregate) -> AssetAccess:
    if run.platform is None:
        raise EnclaveError("the run names no attesting platform to reach its assets through")
    return run.platform.asset_access(run.destinations, run.attester)


# -- the authority's storage -------------------------------------------------------------------


def _authority_store(run: AttestedAggregate, access: AssetAccess, uri: str
                     ) -> tuple[BlobStore, str]:
    """``uri`` opened through the authority's pool (a ``file://`` location needs none)."""
    provider = run.spec.result_pool_provider
    if provider is None and not uri.startswith("file://"):
        raise SpecError(f"{ENV_RESULT_POOL_PROVIDER} is required for a location in cloud storage")
    try:
        return access.store(uri, provider or "")
    except CloudError as exc:
        raise DestinationError(f"the authority's storage cannot be opened: {exc}") from exc


def _split(uri: str) -> tuple[str, str]:
    """A document's URI as its folder's URI and its object name."""
    folder, _, name = uri.rstrip("/").rpartition("/")
    if not name or not folder or folder.endswith("/"):
        raise SpecError("the pool inputs URI names no object")
    return folder, name


# -- step 1: the inputs --------------------------------------------------------------------------


def read_inputs(run: AttestedAggregate, access: AssetAccess) -> VerifiedAuthorization:
    """Step 1: the registry's pool authorization, verified before anything else is read
    (:func:`~sealbench.contract.pool_authorization.verify_authorization` against the spec's
    pool anchor, which the uid binds: the log key's signatures, the witnesses' cosignatures,
    each debit logged, naming this authorization and the release's rho, within its ledger, and
    covering every pooled dataset once); its inputs document's digest the spec's and its uid
    fields the spec's. :class:`~sealbench.contract.errors.AuthorizationRefused` for any
    authorization that does not hold: nothing is read from any site and no noise is drawn."""
    spec = run.spec
    folder, name = _split(spec.inputs_uri)
    store, prefix = _authority_store(run, access, folder)
    try:
        data = store.get_bytes(join_name(prefix, name), MAX_DOCUMENT_BYTES)
    except ObjectNotFound as exc:
        raise StorageFailure(f"the pool authorization is missing: {exc}") from exc
    except CloudError as exc:
        raise StorageFailure(f"the pool authorization cannot be read: {exc}") from exc
    try:
        authorization = PoolAuthorization.from_bytes(data)
    except ResultFormatError as exc:
        raise AuthorizationRefused(f"the pool authorization does not parse: {exc}") from exc
    inputs: PoolInputs = authorization.inputs
    if inputs.digest() != parse_digest(spec.inputs_digest):
        raise AuthorizationRefused(
            "the pool authorization is not the one the attested spec names (its inputs digest "
            "differs from SEALBENCH_POOL_INPUTS_DIGEST)")
    differing = [field for field, theirs, ours in (
        ("benchmark_id", inputs.benchmark_id, spec.benchmark_id),
        ("metrics_version", str(inputs.metrics_version), str(spec.metrics_version)),
        ("model_digest", inputs.model_digest, spec.model_digest),
    ) if theirs != ours]
    if differing:
        raise AuthorizationRefused(f"the pool authorization is not for the attested "
                                   f"aggregator: {differing} differ from the spec's")
    declared = pooled_release_spec(run.benchmark)
    cost = PrivacyLoss() if declared is None else declared.loss
    debited = inputs.loss
    if (cost.empty != debited.empty or len(cost.laplace) != len(debited.laplace)
            or abs(cost.rho - debited.rho) > 1e-12 * cost.rho
            or any(abs(a - b) > 1e-12 * a for a, b in zip(cost.laplace, debited.laplace,
                                                          strict=True))):
        raise AuthorizationRefused(
            f"the authorization debits {debited.text()}, but {run.benchmark.ref}'s pooled "
            f"release costs {cost.text()}")
    try:
        return verify_authorization(
            authorization, spec.anchor(),
            min_sites=int(getattr(run.benchmark, "min_pool_sites", 0) or 0))
    except AuthorizationError as exc:
        raise AuthorizationRefused(f"the pool authorization does not hold: {exc}") from exc


# -- step 2: the sites' keys and statistics ------------------------------------------------------


def _named(run_id: str, exc: EnclaveError) -> EnclaveError:
    """``exc`` (same class, so its exit code) with the input's run named first."""
    return type(exc)(f"input run {run_id}: {exc}")


@dataclass(frozen=True)
class OpenedInput:
    """One site's checked statistics and its released dataset key (from which, with every
    other site's, the pooled noise is derived: :func:`~sealbench.benchmarks.seeded_noise.
    pool_noise_seed`)."""

    run_id: str
    statistics: SiteStatistics
    key: bytes


def open_input(run: AttestedAggregate, item: PoolInput, access: AssetAccess, wait: GrantWait
               ) -> OpenedInput:
    """One site's statistics: its dataset DEK released by its own key, ``pool.sealed``
    decrypted under it and checked against the commitment. Every failure names the run."""
    try:
        dataset = unwrap_asset("dataset", item.dataset, parse_digest(item.data_digest), access,
                               wait)
    except EnclaveError as exc:
        raise _named(item.run_id, exc) from exc
    try:
        store, prefix = access.store(item.statistics_uri, item.dataset.pool_provider)
        blob = wait.call("dataset", lambda: store.get_bytes(
            join_name(prefix, POOL_STATISTICS_OBJECT), MAX_SEALED_STATISTICS))
    except ObjectNotFound as exc:
        raise StorageFailure(f"input run {item.run_id}: its statistics are missing "
                             f"({POOL_STATISTICS_OBJECT})") from exc
    except (CredentialError, StorageAccessDenied) as exc:
        raise KeyReleaseDenied(f"input run {item.run_id}: the dataset owner's pool refused "
                               f"this workload its statistics: {exc}{wait.outlasted()}") from exc
    except CloudError as exc:
        raise StorageFailure(f"input run {item.run_id}: its statistics cannot be read "
                             f"({type(exc).__name__})") from exc
    try:
        document = decrypt_statistics(dataset.dek, item.run_id, item.commitment, blob)
    except IntegrityError as exc:
        raise AssetIntegrityError(
            f"input run {item.run_id}: its statistics do not open under its dataset's key, run "
            "and commitment (stale, moved or altered)") from exc
    try:
        statistics = open_statistics(run.benchmark, document, item.commitment,
                                     run_id=item.run_id)
    except PoolingError as exc:
        raise AssetIntegrityError(str(exc)) from exc
    return OpenedInput(item.run_id, statistics, dataset.dek.secret_bytes())


# -- steps 3 and 4: pool and release -------------------------------------------------------------


def seeded_noise(authorized: VerifiedAuthorization, opened: Sequence[OpenedInput]
                 ) -> NoiseSource:
    """The pooled release's noise source: the discrete Gaussian keyed by every site's released
    key and the authorization's digest, so the same authorization always draws the same noise
    (:mod:`sealbench.benchmarks.seeded_noise`)."""
    return SeededDiscreteGaussian(pool_noise_seed(
        authorized.digest, ((o.run_id, o.key) for o in opened)))


def build_release(run: AttestedAggregate, inputs: PoolInputs, sites: Sequence[SiteStatistics],
                  noise: NoiseSource) -> PooledRelease:
    """Step 3: the pooled summary (noise drawn once) in the release document."""
    try:
        summary = pool_exact(run.benchmark, sites, noise)
    except PoolingError as exc:
        raise AssetIntegrityError(f"the statistics cannot be pooled: {exc}") from exc
    return PooledRelease(
        pool_id=inputs.pool_id,
        benchmark_id=inputs.benchmark_id,
        metrics_version=inputs.metrics_version,
        model_id=inputs.model_id,
        model_digest=inputs.model_digest,
        inputs_digest=inputs.digest(),
        inputs=tuple(PooledInput(run_id=i.run_id, dataset_id=i.dataset.asset_id,
                                 commitment=i.commitment) for i in inputs.inputs),
        n_cases=summary.n_cases,
        aggregates=dict(summary.to_json()),
    )


def publish_release(run: AttestedAggregate, store: BlobStore, prefix: str,
                    release: PooledRelease) -> tuple[bytes, str]:
    """Step 4: the release sealed to the registry's pool-release key (the spec's recipient,
    which the uid binds), a token binding the sealed bytes, checked, then both objects (token
    last). Whoever launched the aggregator reads neither figure nor noise."""
    spec = run.spec
    with run.timer.measure("seal"):
        recipient = public_key_from_raw(base64.b64decode(spec.recipient_public_key))
        sealed = seal(release.to_bytes(), recipient,  # bound to the pool the registry opens
                      pooled_release_info(release.pool_id, release.benchmark_id,
                                          run.image_digest))
    token = bound_token(run.attester, run.timer, POOL_AUDIENCE, pooled_nonce(sealed),
                        "pooled-release")
    with run.timer.measure("upload"):
        try:
            store.put_bytes(join_name(prefix, POOLED_RELEASE_OBJECT), sealed)
            store.put_bytes(join_name(prefix, POOLED_TOKEN_OBJECT), token.encode("ascii"))
        except CloudError as exc:
            raise ResultUploadError(f"the pooled release could not be uploaded: {exc}") from exc
    return sealed, token


# -- the run ---------------------------------------------------------------------------------------


def _step(progress: RunProgress, index: int, name: str) -> None:
    progress.step = name
    _log.info("step %d/%d: %s", index, AGGREGATE_STEPS, name)
    emit(StepStarted(index=index, total=AGGREGATE_STEPS, name=name))


def run_aggregator(
    environ: Mapping[str, str],
    attester: Attester | EvidenceSource,
    *,
    access: AggregatorAccessFactory | None = None,
    noise: NoiseSource | None = None,
    timer: StepTimer | None = None,
    egress: EgressGuard | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> AggregateReport:
    """Run the aggregator (module docstring); raise :class:`EnclaveError` (after recording it
    at the result destination when one is known) on any failure. ``attester``, ``egress`` and
    ``sleep`` as for :func:`~sealbench.enclave.run.run_enclave`; ``noise`` is the keyed discrete
    Gaussian of the authorization unless a test passes another."""
    timer = timer or StepTimer()
    progress = RunProgress()
    progress.step = "read the aggregate specification"
    try:
        return _run(environ, attester, access, noise, timer, progress, egress, sleep)
    except EnclaveError as exc:
        record_failure(progress, exc)
        raise
    except Exception as exc:  # the aggregator's one error boundary
        error = EnclaveError(
            f"internal error ({type(exc).__name__}) while trying to {progress.step}")
        record_failure(progress, error)
        raise error from exc


def _run(
    environ: Mapping[str, str],
    attester: Attester | EvidenceSource,
    access_factory: AggregatorAccessFactory | None,
    noise: NoiseSource | None,
    timer: StepTimer,
    progress: RunProgress,
    egress: EgressGuard | None,
    sleep: Callable[[float], None],
) -> AggregateReport:
    _step(progress, 0, progress.step)
    run = attest_aggregate(environ, attester, timer)
    if egress is not None:
        egress.pin(run.destinations)
    spec = run.spec
    progress.run_id = spec.run_id
    progress.attester = run.attester
    access = (access_factory or _platform_access)(run)
    # the run's window for IAM to apply a grant, as the evaluation's: inert, clamped
    wait = GrantWait(float(min(int(spec.iam_wait_s or 0), MAX_IAM_WAIT_S)), sleep)
    with contextlib.suppress(EnclaveError):
        progress.destination = _authority_store(run, access, spec.result_uri)
    _step(progress, 1, "verify the registry's pool authorization")
    authorized = read_inputs(run, access)
    inputs = authorized.inputs
    _log.info("step 1/%d: authorization %s holds: %d input(s), %d debit(s) logged by "
              "checkpoint %d", AGGREGATE_STEPS, inputs.pool_id, len(inputs.inputs),
              len(inputs.debits), authorized.checkpoint.size)
    _step(progress, 2, "unwrap each site's key and open its statistics")
    with timer.measure("unwrap"):
        opened = [open_input(run, item, access, wait) for item in inputs.inputs]
    _log.info("step 2/%d: every site released its key and its statistics matched",
              AGGREGATE_STEPS)
    _step(progress, 3, "pool the statistics")
    with timer.measure("pool"):
        release = build_release(run, inputs, [o.statistics for o in opened],
                                noise or seeded_noise(authorized, opened))
    _step(progress, 4, "attest and upload the pooled release")
    store, prefix = progress.destination or _authority_store(run, access, spec.result_uri)
    sealed, token = publish_release(run, store, prefix, release)
    timings = timer.totals()
    run_done(timings, None, timings_line(timings, None))
    return AggregateReport(release, sealed, token, timings)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sealbench.enclave.aggregate``: the evaluation's process setup around
    :func:`run_aggregator` (:func:`sealbench.enclave.__main__.serve`)."""
    from sealbench.enclave.__main__ import serve

    return serve(argv, "python -m sealbench.enclave.aggregate",
                 lambda environ, source, egress: run_aggregator(environ, source, egress=egress))


if __name__ == "__main__":
    sys.exit(main())
