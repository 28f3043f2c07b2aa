"""The first steps of a run, each returning the typed value the next one needs, so they cannot
run out of order: environment → :class:`AttestedRun` → :class:`ReadyDestination` (step 1) →
:class:`UnwrappedKeys` (step 2) → :class:`VerifiedModel` (step 3). The dataset, evaluation and
result steps continue in :mod:`sealbench.enclave.evaluation` and
:mod:`sealbench.enclave.publish`.

Nothing here writes plaintext anywhere: keys and weights stay in memory, ONNX Runtime loads the
model from bytes, and only a model that is exactly its bytes (no tensor stored as external data,
which ONNX Runtime would read from the working directory) reaches the plug-in.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import BinaryIO, Final, Literal, NoReturn

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey

from sealbench.benchmarks.interface import Benchmark, BenchmarkError, Runner
from sealbench.benchmarks.onnx_safety import UnsafeModelError, check_self_contained
from sealbench.contract.errors import (
    AssetIntegrityError,
    AssetRejected,
    AttestationUnavailable,
    DestinationError,
    KeyReleaseDenied,
    SpecError,
    StorageFailure,
)
from sealbench.contract.inputs import TokenDestinationError, check_token_destinations
from sealbench.contract.result import WRITE_CHECK_OBJECT, WriteCheck
from sealbench.contract.spec import (
    ENV_OVERRIDE_NAMES,
    AssetLocation,
    RunSpec,
    RunSpecError,
    ServiceEndpoints,
)
from sealbench.crypto.digest import Sha256Digest, parse_digest
from sealbench.crypto.envelope import DataKey, WrappedKey, asset_aad, unwrap_key
from sealbench.crypto.errors import IntegrityError, KeyFormatError, KeyUnwrapError
from sealbench.crypto.sealed_asset import (
    DEK_OBJECT,
    MAX_WEIGHTS_BYTES,
    WEIGHTS_OBJECT,
    open_weights_stream,
    weights_ciphertext_size,
)
from sealbench.crypto.sealing import public_key_from_raw
from sealbench.enclave.grant_wait import GrantWait
from sealbench.enclave.platforms import (
    Evidence,
    EvidenceSource,
    PlatformResolver,
    destinations_of,
    evidence_from,
    evidence_of,
)
from sealbench.enclave.rules import benchmark_for
from sealbench.enclave.timing import StepTimer
from sealbench.platforms import (
    BlobStore,
    CloudError,
    CredentialError,
    KeyAccessDenied,
    KeyNotFound,
    ObjectCorrupted,
    ObjectNotFound,
    ObjectTooLarge,
    StorageAccessDenied,
    StorageError,
    join_name,
)
from sealbench.platforms.access import AssetAccess
from sealbench.platforms.attester import Attester
from sealbench.platforms.platform import (
    AttestedWorkload,
    EnclavePlatform,
    TokenDestinations,
)

__all__ = [
    "MAX_WEIGHTS_CIPHERTEXT",
    "AttestedRun",
    "ReadyDestination",
    "RunnerFactory",
    "UnwrappedKeys",
    "VerifiedModel",
    "attest",
    "attested_evidence",
    "claims_of",
    "load_model",
    "open_destination",
    "release_keys",
    "unwrap_asset",
]

_log = logging.getLogger("sealbench.enclave")

#: Largest ``weights.sealed`` read: the sealed size of a model at the platform's cap (512 MiB).
MAX_WEIGHTS_CIPHERTEXT: Final = weights_ciphertext_size(MAX_WEIGHTS_BYTES)
_MAX_WRAPPED_KEY: Final = 64 * 1024

#: Loads decrypted weights into the plug-in's runner (tests wrap it to inject faults).
RunnerFactory = Callable[[Benchmark, bytes], Runner]


def _plugin_runner(benchmark: Benchmark, weights: bytes) -> Runner:
    return benchmark.load_model(weights)


# -- step 0: the attested run specification ---------------------------------------------------


@dataclass(frozen=True)
class AttestedRun:
    """A run spec read from the environment, equal to the attested env overrides, with the
    benchmark plug-in it pins and the image digest the launcher measured."""

    spec: RunSpec
    benchmark: Benchmark
    image_digest: Sha256Digest
    attester: Attester
    timer: StepTimer
    #: Where this run's tokens may go: the attesting platform's endpoints, checked against the
    #: spec's overrides (the only endpoints the platform's asset access uses).
    destinations: ServiceEndpoints
    #: The evidence attests an accelerator attached to the VM (a GPU run).
    gpu_attested: bool = False
    #: The platform that attested the run: it hands out the run's asset access.
    platform: EnclavePlatform | None = None


def read_spec(environ: Mapping[str, str]) -> tuple[RunSpec, Benchmark]:
    """Parse the run spec and resolve the plug-in it pins; :class:`SpecError` naming the field."""
    try:
        spec = RunSpec.from_environ(environ)
    except RunSpecError as exc:
        raise SpecError(f"invalid run specification: {exc}") from exc
    return spec, benchmark_for(spec.metrics_version)


def claims_of(token: str) -> AttestedWorkload:
    """What a token the launcher just gave us says, as mapped by the platform that issued it
    (read, not verified: the launcher socket is the trusted channel inside the TEE; key owners
    and the registry verify the signature). See :func:`~sealbench.enclave.platforms.evidence_of`.
    """
    return evidence_of(token)


def attest(
    environ: Mapping[str, str],
    source: Attester | EvidenceSource,
    timer: StepTimer,
    resolve: PlatformResolver | None = None,
) -> AttestedRun:
    """Read the spec, then the first token: from the platforms' own evidence sources
    (:class:`~sealbench.enclave.platforms.EvidenceSource`: the platform is the one whose source
    and verifier produced it), or from a caller's attester (its platform found by issuer). Its
    env overrides must be exactly the environment the spec was read from, its endpoint
    overrides must fit that platform's token destinations (``resolve`` overrides the lookup;
    no token has left the TEE yet), and its image digest is what the result will be bound to."""
    spec, benchmark = read_spec(environ)
    evidence, destinations, image_digest = attested_evidence(
        environ, ENV_OVERRIDE_NAMES, source, timer, resolve)
    return AttestedRun(
        spec, benchmark, image_digest, evidence.attester, timer, destinations.endpoints,
        gpu_attested=evidence.workload.gpu, platform=evidence.platform,
    )


def attested_evidence(
    environ: Mapping[str, str],
    names: Iterable[str],
    source: Attester | EvidenceSource,
    timer: StepTimer,
    resolve: PlatformResolver | None = None,
) -> tuple[Evidence, TokenDestinations, Sha256Digest]:
    """The first token (see :func:`attest`), checked: its env overrides equal ``environ`` for
    every one of ``names`` (the workload's allowed overrides: the evaluation's or the
    aggregator's), its endpoint overrides fit its platform's token destinations; with those
    destinations and the token's image digest."""
    with timer.measure("attest"):
        evidence: Evidence = (
            source.first() if isinstance(source, EvidenceSource) else evidence_from(source)
        )
    claims = evidence.workload
    attested = claims.env_override
    differing = sorted(n for n in names if environ.get(n) != attested.get(n))
    if differing:
        raise SpecError(f"the environment differs from the attested env overrides in {differing}")
    destinations = _destinations(evidence, resolve)
    try:
        check_token_destinations(attested, destinations.spec_overrides)
    except TokenDestinationError as exc:
        raise SpecError(f"refusing to send any token: {exc}") from exc
    try:
        image_digest = parse_digest(claims.image_digest)
    except ValueError as exc:
        raise AttestationUnavailable("the token's image digest is not a sha256 digest") from exc
    return evidence, destinations, image_digest


def _destinations(evidence: Evidence, resolve: PlatformResolver | None) -> TokenDestinations:
    if resolve is not None:
        return resolve(evidence.workload.iss)
    return destinations_of(evidence.platform, evidence.workload.iss)


# -- step 1: recipient key and result destination ----------------------------------------------


@dataclass(frozen=True)
class ReadyDestination:
    """The recipient key (digest checked) and a result destination that accepted a write."""

    run: AttestedRun
    recipient: X25519PublicKey
    store: BlobStore
    prefix: str

    def name(self, obj: str) -> str:
        return join_name(self.prefix, obj)


def result_store(run: AttestedRun, access: AssetAccess) -> tuple[BlobStore, str]:
    """The destination store, acting through the data owner's pool."""
    try:
        return access.store(run.spec.result_uri, run.spec.dataset.pool_provider)
    except CloudError as exc:
        raise DestinationError(f"the result destination cannot be opened: {exc}") from exc


def open_destination(
    run: AttestedRun, access: AssetAccess, wait: GrantWait | None = None
) -> ReadyDestination:
    """Step 1: check the recipient key's digest, then write ``write-check.json`` (a refusal
    after a successful token exchange is retried while ``wait`` lasts: by default the run
    spec's window, :class:`~sealbench.enclave.grant_wait.GrantWait`)."""
    wait = wait or GrantWait(run.spec.iam_wait_seconds)
    try:
        run.spec.check_recipient()
    except RunSpecError as exc:
        raise DestinationError(str(exc)) from exc
    recipient = public_key_from_raw(run.spec.recipient_key_bytes)
    store, prefix = result_store(run, access)
    destination = ReadyDestination(run, recipient, store, prefix)
    check = WriteCheck(run_id=run.spec.run_id).to_bytes()
    try:
        wait.call("dataset", lambda: store.put_bytes(destination.name(WRITE_CHECK_OBJECT), check))
    except CredentialError as exc:
        # The write uses the data owner's pool credential: its refusal is a key-release denial.
        raise KeyReleaseDenied(
            f"the dataset owner's pool refused this workload: {exc}"
        ) from exc
    except CloudError as exc:
        raise DestinationError(
            f"the result destination refused the test write: {exc}{wait.outlasted()}"
        ) from exc
    return destination


# -- step 2: credentials and keys --------------------------------------------------------------


@dataclass(frozen=True)
class OpenedAsset:
    """One owner's sealed asset: where it is and its unwrapped DEK (memory only)."""

    location: AssetLocation
    store: BlobStore
    prefix: str
    dek: DataKey

    def name(self, obj: str) -> str:
        return join_name(self.prefix, obj)


@dataclass(frozen=True)
class UnwrappedKeys:
    """Both owners released their keys to this workload."""

    destination: ReadyDestination
    dataset: OpenedAsset
    model: OpenedAsset


def _refused(what: str, exc: Exception, wait: GrantWait | None = None) -> NoReturn:
    if isinstance(exc, KeyAccessDenied | KeyNotFound | CredentialError | StorageAccessDenied):
        waited = "" if wait is None else wait.outlasted()
        raise KeyReleaseDenied(
            f"the {what} owner refused this workload: {exc}{waited}"
        ) from exc
    if isinstance(exc, ObjectNotFound):
        raise StorageFailure(f"the sealed {what} is incomplete: {exc}") from exc
    if isinstance(exc, ObjectCorrupted):
        # Altered at rest or in transit: tampering until shown otherwise, like a failed tag.
        raise AssetIntegrityError(f"the sealed {what} failed verification: {exc}") from exc
    if isinstance(exc, StorageError):
        raise StorageFailure(f"the sealed {what} cannot be read: {exc}") from exc
    if isinstance(exc, KeyFormatError | KeyUnwrapError):
        raise AssetIntegrityError(f"the {what} key could not be unwrapped: {exc}") from exc
    raise KeyReleaseDenied(f"the {what} key was not released: {exc}") from exc


def unwrap_asset(
    kind: Literal["dataset", "model"],
    location: AssetLocation,
    digest: Sha256Digest,
    access: AssetAccess,
    wait: GrantWait,
) -> OpenedAsset:
    """``location``'s ``dek.wrapped`` unwrapped through its owner's key and pool, with the AAD
    binding ``kind``, its asset id and ``digest`` (a refusal retried while ``wait`` lasts)."""

    def attempt() -> OpenedAsset:
        store, prefix = access.store(location.uri, location.pool_provider)
        record = store.get_bytes(join_name(prefix, DEK_OBJECT), _MAX_WRAPPED_KEY)
        wrapped = WrappedKey.from_bytes(record)
        dek = unwrap_key(
            access.key_wrapper(location), wrapped, asset_aad(kind, location.asset_id, digest)
        )
        return OpenedAsset(location, store, prefix, dek)

    try:
        return wait.call(kind, attempt)
    except (CloudError, KeyFormatError, KeyUnwrapError) as exc:
        _refused(kind, exc, wait)


def release_keys(
    destination: ReadyDestination, access: AssetAccess, wait: GrantWait | None = None
) -> UnwrappedKeys:
    """Step 2: one credential per owner pool; unwrap each ``dek.wrapped`` through KMS with the
    AAD that binds the asset id and its expected digest. A permission refusal after a
    successful token exchange (a grant IAM has not applied yet) is retried while ``wait``
    lasts (by default the run spec's window); a refused exchange fails at once."""
    run = destination.run
    spec = run.spec
    wait = wait or GrantWait(spec.iam_wait_seconds)
    with run.timer.measure("unwrap"):
        dataset = unwrap_asset(
            "dataset", spec.dataset, parse_digest(spec.data_digest), access, wait)
        model = unwrap_asset("model", spec.model, parse_digest(spec.model_digest), access, wait)
    _log.info("step 2/7: both owners released their keys")
    return UnwrappedKeys(destination, dataset, model)


# -- step 3: the model -------------------------------------------------------------------------


@dataclass(frozen=True)
class VerifiedModel:
    """The model, decrypted and digest-checked, loaded for inference."""

    keys: UnwrappedKeys
    runner: Runner


def load_model(keys: UnwrappedKeys, make_runner: RunnerFactory = _plugin_runner) -> VerifiedModel:
    """Step 3: stream ``weights.sealed`` from storage, decrypting it segment by segment into one
    plaintext buffer sized from the object's size (refused above :data:`MAX_WEIGHTS_CIPHERTEXT`
    before anything is read) and hashing it as it goes, check the weights' digest, then load them
    (from bytes) into the benchmark plug-in's runner. The ciphertext is never held whole. A model
    that refers to data outside its bytes is refused here by structure, whatever the plug-in
    checks (:func:`~sealbench.benchmarks.onnx_safety.check_self_contained`)."""
    run = keys.destination.run
    asset = keys.model
    name = asset.name(WEIGHTS_OBJECT)
    with run.timer.measure("download"):  # download and decryption are one streamed pass
        try:
            with asset.store.open_read(name) as src:
                src, size = _sized(src, name)
                weights = open_weights_stream(
                    asset.dek,
                    asset.location.asset_id,
                    src,
                    size,
                    parse_digest(run.spec.model_digest),
                )
        except CloudError as exc:
            _refused("model", exc)
        except IntegrityError as exc:
            raise AssetIntegrityError(
                f"the model weights failed verification: {exc} ({name})"
            ) from exc
    try:
        check_self_contained(weights)
    except UnsafeModelError as exc:
        raise AssetRejected(f"the model is not self-contained: {exc}") from exc
    try:
        runner = make_runner(run.benchmark, weights)
    except BenchmarkError as exc:
        raise AssetRejected(f"the model does not meet the benchmark's contract: {exc}") from exc
    del weights
    _log.info("step 3/7: model verified and loaded")
    return VerifiedModel(keys, runner)


def _sized(src: BinaryIO, name: str) -> tuple[BinaryIO, int]:
    """``src`` and the bytes left in it, refused above :data:`MAX_WEIGHTS_CIPHERTEXT` (as
    :class:`ObjectTooLarge`) before they are read. Stores' streams are seekable (a local file,
    Cloud Storage's reader, which knows the object's size); any other is read bounded."""
    try:
        seekable = src.seekable()
    except (OSError, ValueError):
        seekable = False
    if seekable:
        here = src.tell()
        size = src.seek(0, io.SEEK_END) - here
        src.seek(here)
    else:
        data = src.read(MAX_WEIGHTS_CIPHERTEXT + 1)
        src, size = io.BytesIO(data), len(data)
    if size > MAX_WEIGHTS_CIPHERTEXT:
        raise ObjectTooLarge(name, MAX_WEIGHTS_CIPHERTEXT)
    return src, size
