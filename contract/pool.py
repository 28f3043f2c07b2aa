"""The aggregator workload's contract (issue 27): what a site's enclave leaves for it, what it is
told, and what it publishes. Platform-neutral, like the rest of :mod:`sealbench.contract`.

A benchmark that pools inside the TEE has a second approved workload, its **aggregator image**
(by digest, consented to by each data owner when it associates, like the evaluation image). The
flow::

    site enclave (each run)          writes, beside result.sealed at its result prefix,
                                     pool.sealed: the site's exact per-case results
                                     (benchmarks.pooling's statistics document) encrypted under a
                                     key derived from the dataset's DEK
                                     (:mod:`sealbench.crypto.pool_statistics`), and puts the
                                     document's commitment (sha256: of its bytes) in the public
                                     summary's ``pool_statistics`` member, which the result token
                                     binds (the token's nonce hashes the summary)
    registry                         stores the summary (so the commitment) with the accepted
                                     result; it never sees the document
    registry (POST pool-authorizations, asked by the authority for one model)
                                     chooses the inputs itself (every current approved site's
                                     latest accepted result), debits every pooled ledger on its
                                     transparency log and signs the PoolInputs document
                                     (:mod:`sealbench.contract.pool_authorization`)
    authority (sealbench benchmark pool)
                                     writes the signed authorization with its log evidence as
                                     pool-authorization.json and launches the aggregator with an
                                     AggregateSpec naming it by location and inputs digest
    aggregator (inside the TEE)      attests, verifies the authorization against the pool anchor
                                     its uid binds (refusing any it cannot, before anything is
                                     read), is released each site's dataset key by the site's
                                     own key-release condition (which admits the aggregator
                                     image's uid), checks each document against its commitment,
                                     pools exactly (benchmarks.pooling.pool_exact), draws the
                                     release noise once (keyed by the sites' keys and the
                                     authorization, so a relaunch draws the same), and writes
                                     pooled.sealed (the PooledRelease document, pooled.json,
                                     sealed to the registry's pool-release key) and pooled.token
                                     (audience sealbench-pool, nonce :func:`pooled_nonce` of
                                     pooled.sealed's bytes)
    authority                        submits both; it cannot read the release
    registry                         verifies the token (issuer, the approved aggregator image,
                                     the nonce), refuses a release of anything it did not
                                     authorize (or a second release of one authorization), and
                                     only then opens and publishes it (the authorization paid)

The aggregator's workload uid reuses :class:`~sealbench.contract.workload.WorkloadIdentity`:
``<aggregator image>::-::<model digest>::<pool anchor>::<benchmark>::<pin>``. The dataset
field is ``-`` (it pools many datasets; each owner's grant names the aggregator for the models it
evaluated), and the recipient is the digest of the benchmark's **pool anchor**
(:class:`PoolAnchor`, fixed when the benchmark is created): the registry's pool-release key (the
release is sealed to the registry, so whoever launches the aggregator cannot read it), its
transparency-log key and the witnesses whose cosignatures the authorization's checkpoint
needs. Without that, the authority could
read a release, rerun the pool for a fresh noise draw or pool chosen subsets, and submit only
what it liked: every draw it read would cost the sites privacy that no budget debited. Sealed,
only the release the registry accepts (and debits) is ever read.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from sealbench.contract.pin import Pin
from sealbench.contract.privacy_loss import PrivacyLoss
from sealbench.contract.result import _Document  # the result documents' base: canonical, capped
from sealbench.contract.spec import (
    ENDPOINT_PATTERN,
    ENV_RECIPIENT_PUBLIC_KEY,
    POOL_PROVIDER_PATTERN,
    AssetLocation,
    RecipientKey,
    RunSpecError,
    StorageUri,
)
from sealbench.contract.workload import (
    BENCHMARK_ID_PATTERN,
    ENV_BENCHMARK_ID,
    ENV_METRICS_VERSION,
    ENV_MODEL_DIGEST,
    ENV_RECIPIENT_DIGEST,
    WorkloadIdentity,
)
from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.digest import Sha256Digest, parse_digest, sha256_digest
from sealbench.crypto.errors import CryptoError
from sealbench.crypto.note import ALG_COSIGNATURE, ALG_ED25519, VerifierKey

__all__ = [
    "AGGREGATE_ENV_NAMES",
    "ENV_POOL_INPUTS_DIGEST",
    "ENV_POOL_INPUTS_URI",
    "ENV_POOL_LOG_KEY",
    "ENV_POOL_WITNESSES",
    "ENV_POOL_WITNESS_QUORUM",
    "ENV_RESULT_POOL_PROVIDER",
    "MAX_POOL_INPUTS",
    "MAX_WITNESSES",
    "MIN_POOL_SITES",
    "POOLED_RELEASE_OBJECT",
    "POOLED_TOKEN_OBJECT",
    "POOL_AUDIENCE",
    "POOL_INPUTS_OBJECT",
    "POOL_STATISTICS_OBJECT",
    "AggregateSpec",
    "PoolAnchor",
    "PoolDebit",
    "PoolInput",
    "PoolInputs",
    "PooledInput",
    "PooledRelease",
    "aggregator_identity",
    "pooled_nonce",
]

#: Beside a site's result objects: its statistics, encrypted for the aggregator.
POOL_STATISTICS_OBJECT: Final = "pool.sealed"
#: Under the pool's result prefix: the inputs the authority names, the release, its token.
POOL_INPUTS_OBJECT: Final = "pool-authorization.json"
#: The release, sealed to the registry's pool-release key (its plaintext is ``pooled.json``).
POOLED_RELEASE_OBJECT: Final = "pooled.sealed"
POOLED_TOKEN_OBJECT: Final = "pooled.token"  # noqa: S105 - an object name
#: The audience of the aggregator's release token (no pool accepts it).
POOL_AUDIENCE: Final = "sealbench-pool"
_POOL_PURPOSE: Final = "sealbench-pooled-release-v1"

#: The most results one pool reads (FeTS: 32 sites per model; room for 1,000-site studies).
MAX_POOL_INPUTS: Final = 1000
#: The fewest sites a pooled release covers: one site's pool is exactly a per-site release.
MIN_POOL_SITES: Final = 2
#: The most witnesses a benchmark names.
MAX_WITNESSES: Final = 16

ENV_POOL_INPUTS_URI: Final = "SEALBENCH_POOL_INPUTS_URI"
ENV_POOL_INPUTS_DIGEST: Final = "SEALBENCH_POOL_INPUTS_DIGEST"
ENV_RESULT_POOL_PROVIDER: Final = "SEALBENCH_RESULT_POOL_PROVIDER"
ENV_POOL_LOG_KEY: Final = "SEALBENCH_POOL_LOG_KEY"
ENV_POOL_WITNESSES: Final = "SEALBENCH_POOL_WITNESSES"
ENV_POOL_WITNESS_QUORUM: Final = "SEALBENCH_POOL_WITNESS_QUORUM"

_FROZEN = ConfigDict(frozen=True, extra="forbid")
_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
_COMMITMENT = r"^sha256:[0-9a-f]{64}$"


def _digest(value: str) -> Sha256Digest:
    return parse_digest(value)


Digest = Annotated[str, AfterValidator(_digest)]


def _verifier(text: str, alg: int, what: str) -> VerifierKey:
    try:
        key = VerifierKey.from_string(text)
    except CryptoError as exc:
        raise ValueError(f"{what} is not a verifier key: {exc}") from None
    if key.alg != alg:
        raise ValueError(f"{what} {key.label} is of another key type")
    return key


class PoolAnchor(BaseModel):
    """What the aggregator trusts for a benchmark, fixed when the benchmark is created: the
    registry's pool-release key (its release is sealed to it), the transparency log's key (its
    authorizations and checkpoints are signed by it), and the witnesses whose cosignatures a
    checkpoint needs (``quorum`` of them; none by default). Its :meth:`digest` is the
    aggregator uid's recipient field."""

    model_config = _FROZEN
    recipient_key: RecipientKey
    log_key: str = Field(min_length=1, max_length=512)
    witnesses: tuple[str, ...] = Field(default=(), max_length=MAX_WITNESSES)
    quorum: int = Field(default=0, ge=0, le=MAX_WITNESSES)

    @field_validator("log_key")
    @classmethod
    def _log_key(cls, value: str) -> str:
        return _verifier(value, ALG_ED25519, "the log key").to_string()

    @field_validator("witnesses")
    @classmethod
    def _witnesses(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        keys = [_verifier(text, ALG_COSIGNATURE, "a witness key").to_string() for text in value]
        if len(set(keys)) != len(keys):
            raise ValueError("a witness is named twice")
        return tuple(sorted(keys))

    @model_validator(mode="after")
    def _quorum(self) -> Self:
        if self.quorum > len(self.witnesses):
            raise ValueError(f"a quorum of {self.quorum} needs as many witnesses, "
                             f"{len(self.witnesses)} named")
        if self.witnesses and self.quorum == 0:
            raise ValueError("witnesses are named but the quorum is 0")
        return self

    def document(self) -> dict[str, object]:
        return {"format": "sealbench/pool-anchor", "version": 1,
                "recipient_key": self.recipient_key, "log_key": self.log_key,
                "witnesses": list(self.witnesses), "quorum": self.quorum}

    def digest(self) -> Sha256Digest:
        """The aggregator uid's recipient field."""
        return sha256_digest(canonical_json(self.document()))

    @classmethod
    def of(cls, benchmark: object) -> PoolAnchor | None:
        """The anchor a benchmark record names (the registry's row or its public schema:
        ``pool_recipient_key``, ``pool_log_key``, ``pool_witnesses``,
        ``pool_witness_quorum``); None when it names no aggregator or no complete anchor (a
        benchmark created before pool authorizations: it pools under a new version)."""
        recipient = getattr(benchmark, "pool_recipient_key", None)
        log_key = getattr(benchmark, "pool_log_key", None)
        if getattr(benchmark, "aggregator_image_digest", None) is None or recipient is None \
                or log_key is None:
            return None
        return cls(recipient_key=recipient, log_key=log_key,
                   witnesses=tuple(getattr(benchmark, "pool_witnesses", None) or ()),
                   quorum=int(getattr(benchmark, "pool_witness_quorum", None) or 0))

    def log_verifier(self) -> VerifierKey:
        return VerifierKey.from_string(self.log_key)

    def witness_verifiers(self) -> tuple[VerifierKey, ...]:
        return tuple(VerifierKey.from_string(w) for w in self.witnesses)


class PoolInput(BaseModel):
    """One accepted result to pool: its run, the dataset whose key unwraps the statistics, where
    the statistics are (the run's result location) and the commitment the site's attested
    summary carries."""

    model_config = _FROZEN
    run_id: str = Field(pattern=_ID)
    dataset: AssetLocation
    data_digest: Digest
    statistics_uri: StorageUri
    commitment: str = Field(pattern=_COMMITMENT)


class PoolDebit(BaseModel):
    """One ledger the authorization debited: the datasets of the pool it covers (a budget
    group pays once for all its members in one release) and the log sequence number of its
    ``privacy.debit`` event."""

    model_config = _FROZEN
    ledger: str = Field(pattern=r"^(dataset|group):[0-9]{1,12}$")
    datasets: tuple[str, ...] = Field(min_length=1, max_length=MAX_POOL_INPUTS)
    seq: int = Field(ge=1)


class PoolInputs(_Document):
    """What the registry authorized the aggregator to pool (version 2; the ``inputs`` of a
    :class:`~sealbench.contract.pool_authorization.PoolAuthorization`): one model's accepted
    results in one benchmark, each run and each dataset at most once, chosen by the registry;
    the release's privacy loss (its Gaussian part in zCDP, ``rho``, and the pure epsilons of
    its Laplace mechanisms, ``laplace``, issue 41; neither for a declared exact release) and
    the debits that paid for it, already on the log. A document without Laplace parts
    serialises as before (no ``laplace`` key), so its digest is unchanged."""

    format: Literal["sealbench/pool-inputs"] = "sealbench/pool-inputs"
    version: Literal[2] = 2
    pool_id: str = Field(pattern=_ID)
    benchmark_id: str = Field(pattern=BENCHMARK_ID_PATTERN)
    metrics_version: Pin
    model_id: str = Field(pattern=_ID)
    model_digest: Digest
    inputs: tuple[PoolInput, ...] = Field(min_length=1, max_length=MAX_POOL_INPUTS)
    rho: float | None = Field(default=None, gt=0)
    laplace: tuple[Annotated[float, Field(gt=0, allow_inf_nan=False)], ...] = Field(
        default=(), max_length=16)
    debits: tuple[PoolDebit, ...] = Field(default=(), max_length=MAX_POOL_INPUTS)

    @model_serializer(mode="wrap")
    def _without_empty_laplace(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if not self.laplace:
            out.pop("laplace", None)
        return out

    @property
    def loss(self) -> PrivacyLoss:
        """What the pooled release costs each ledger it debits (nothing for an exact one)."""
        return PrivacyLoss(rho=self.rho or 0.0, laplace=self.laplace)

    @property
    def exact(self) -> bool:
        """A declared exact release: no privacy loss at all."""
        return self.rho is None and not self.laplace

    @model_validator(mode="after")
    def _distinct(self) -> Self:
        runs = [i.run_id for i in self.inputs]
        if len(set(runs)) != len(runs):
            raise ValueError("a run appears twice among the inputs")
        datasets = [i.dataset.asset_id for i in self.inputs]
        if len(set(datasets)) != len(datasets):
            raise ValueError("a dataset appears twice among the inputs (one result per dataset)")
        seqs = [d.seq for d in self.debits]
        if len(set(seqs)) != len(seqs):
            raise ValueError("a debit event appears twice")
        return self

    def digest(self) -> Sha256Digest:
        """What the authorization's signature and its ``pool.authorize`` event name, and the
        release repeats; the pooled noise is derived from it."""
        return sha256_digest(self.to_bytes())


class PooledInput(BaseModel):
    """One input as the release states it was used: the run and the commitment it matched."""

    model_config = _FROZEN
    run_id: str = Field(pattern=_ID)
    dataset_id: str = Field(pattern=_ID)
    commitment: str = Field(pattern=_COMMITMENT)


class PooledRelease(_Document):
    """The aggregator's public release (``pooled.json``): the pooled summary of one model over
    exactly the listed inputs (the plug-in's pooled aggregates, noise drawn once), the inputs
    document's digest, and the attested image is in the token that binds it."""

    format: Literal["sealbench/pooled-release"] = "sealbench/pooled-release"
    version: Literal[1] = 1
    pool_id: str = Field(pattern=_ID)
    benchmark_id: str = Field(pattern=BENCHMARK_ID_PATTERN)
    metrics_version: Pin
    model_id: str = Field(pattern=_ID)
    model_digest: Digest
    inputs_digest: Digest
    inputs: tuple[PooledInput, ...] = Field(min_length=1, max_length=MAX_POOL_INPUTS)
    n_cases: int = Field(ge=1)
    aggregates: dict[str, object]


def aggregator_identity(aggregator_image: str, anchor: PoolAnchor,
                        evaluation: WorkloadIdentity) -> WorkloadIdentity:
    """The aggregator's identity a data owner grants beside its approved ``evaluation`` of one
    model in one benchmark: the aggregator image, no dataset, the same model, the benchmark's
    pool anchor (:meth:`PoolAnchor.digest`: the registry's pool-release key, its log key and
    witnesses), the same benchmark and pin (the uid of the module docstring)."""
    return WorkloadIdentity(parse_digest(aggregator_image), None, evaluation.model_digest,
                            anchor.digest(), evaluation.benchmark_id,
                            evaluation.metrics_version)


def pooled_nonce(release: bytes) -> str:
    """The ``eat_nonce`` a pooled-release token carries: hex SHA-256 over the canonical JSON
    ``{"pooled_release_sha256": <sha256:hex of release>, "purpose": "sealbench-pooled-release-v1"}``
    where ``release`` is the exact bytes of ``pooled.sealed`` (the sealed release: the token
    binds what the authority hands on, which it cannot read). Domain-separated from the result
    and failure nonces (other members; another audience too)."""
    document = canonical_json({
        "pooled_release_sha256": "sha256:" + hashlib.sha256(release).hexdigest(),
        "purpose": _POOL_PURPOSE,
    })
    return hashlib.sha256(document).hexdigest()


class AggregateSpec(BaseModel):
    """One aggregator run, read only from the attested environment (its own image's
    ``allow_env_override`` label is :data:`AGGREGATE_ENV_NAMES`). The uid fields (benchmark,
    pin, model digest, the pool recipient's digest) are what the sites' grants name; the
    recipient key must hash to that digest (:meth:`check_recipient`); the inputs document is
    bound by its digest, which the release repeats and the registry checks."""

    model_config = _FROZEN

    run_id: str = Field(pattern=_ID)
    benchmark_id: str = Field(pattern=BENCHMARK_ID_PATTERN)
    metrics_version: Pin
    model_digest: Digest
    #: The registry's pool-release key (X25519, base64 of the 32 raw bytes): the release is
    #: sealed to it.
    recipient_public_key: RecipientKey
    #: The digest of the pool anchor (:class:`PoolAnchor`: the recipient key, ``log_key``,
    #: ``witnesses`` and ``witness_quorum``), the uid's recipient field.
    recipient_digest: Digest
    #: The registry's transparency-log key (C2SP verifier key): authorizations and checkpoints.
    log_key: str = Field(min_length=1, max_length=512)
    #: The witnesses' cosigner keys, comma-separated (empty: none), and how many must cosign.
    witnesses: str = Field(default="", max_length=MAX_WITNESSES * 512)
    witness_quorum: str = Field(default="0", pattern=r"^[0-9]{1,2}$")
    inputs_uri: StorageUri
    inputs_digest: Digest
    result_uri: StorageUri
    #: The authority's pool provider, through which the aggregator reads the inputs document
    #: and writes its release (cloud storage); None where both are ``file://`` (the local mock).
    result_pool_provider: str | None = Field(default=None, pattern=POOL_PROVIDER_PATTERN)
    sts_url: str | None = Field(default=None, pattern=ENDPOINT_PATTERN)
    kms_endpoint: str | None = Field(default=None, pattern=ENDPOINT_PATTERN)
    storage_endpoint: str | None = Field(default=None, pattern=ENDPOINT_PATTERN)
    iam_wait_s: str | None = Field(default=None, pattern=r"^[0-9]{1,6}$")

    @model_validator(mode="after")
    def _recipient(self) -> Self:
        if self.anchor().digest() != self.recipient_digest:
            raise ValueError("the pool anchor (recipient key, log key, witnesses, quorum) does "
                             "not hash to the recipient digest")
        return self

    def anchor(self) -> PoolAnchor:
        """The pool anchor the spec names (its digest is :attr:`recipient_digest`)."""
        return PoolAnchor(
            recipient_key=self.recipient_public_key, log_key=self.log_key,
            witnesses=tuple(w for w in self.witnesses.split(",") if w),
            quorum=int(self.witness_quorum))

    @classmethod
    def for_anchor(cls, anchor: PoolAnchor, **fields: object) -> AggregateSpec:
        """A spec naming ``anchor`` (its four fields and its digest) and ``fields``."""
        return cls.model_validate({
            **fields, "recipient_public_key": anchor.recipient_key,
            "recipient_digest": anchor.digest(), "log_key": anchor.log_key,
            "witnesses": ",".join(anchor.witnesses), "witness_quorum": str(anchor.quorum)})

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> AggregateSpec:
        """Parse the spec from ``environ`` (only :data:`AGGREGATE_ENV_NAMES` are read);
        :class:`~sealbench.contract.spec.RunSpecError` naming the first bad variable."""
        values = {field: environ[name] for field, name in _ENV.items() if name in environ}
        for field, name in _ENV.items():
            if field not in values and field not in _OPTIONAL:
                raise RunSpecError(name, "missing")
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = str(err["loc"][0]) if err["loc"] else "recipient_digest"
            problem = re.sub(r"^Value error, ", "", err["msg"])
            raise RunSpecError(_ENV.get(field, field), problem) from None

    def to_environ(self) -> dict[str, str]:
        """The attested env overrides that encode this spec."""
        out: dict[str, str] = {}
        for field, name in _ENV.items():
            value = getattr(self, field)
            if value is not None and value != "":
                out[name] = str(value)
        return out


_ENV: Final[dict[str, str]] = {
    "run_id": "SEALBENCH_RUN_ID",
    "benchmark_id": ENV_BENCHMARK_ID,
    "metrics_version": ENV_METRICS_VERSION,
    "model_digest": ENV_MODEL_DIGEST,
    "recipient_public_key": ENV_RECIPIENT_PUBLIC_KEY,
    "recipient_digest": ENV_RECIPIENT_DIGEST,
    "log_key": ENV_POOL_LOG_KEY,
    "witnesses": ENV_POOL_WITNESSES,
    "witness_quorum": ENV_POOL_WITNESS_QUORUM,
    "inputs_uri": ENV_POOL_INPUTS_URI,
    "inputs_digest": ENV_POOL_INPUTS_DIGEST,
    "result_uri": "SEALBENCH_RESULT_URI",
    "result_pool_provider": ENV_RESULT_POOL_PROVIDER,
    "sts_url": "SEALBENCH_STS_URL",
    "kms_endpoint": "SEALBENCH_KMS_ENDPOINT",
    "storage_endpoint": "SEALBENCH_STORAGE_ENDPOINT",
    "iam_wait_s": "SEALBENCH_IAM_WAIT",
}
_OPTIONAL: Final = frozenset({"witnesses", "witness_quorum", "result_pool_provider", "sts_url",
                               "kms_endpoint", "storage_endpoint", "iam_wait_s"})

#: Every env override the aggregator image allows (its ``allow_env_override`` label).
AGGREGATE_ENV_NAMES: Final[tuple[str, ...]] = tuple(_ENV.values())
