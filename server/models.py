"""The registry's tables as typed SQLAlchemy 2 ORM classes. Rows never leave the server: routers
return the pydantic schemas of :mod:`sealbench.server.schemas` built from them.

Associations keep their whole history: every request, approval or rejection appends a row with
the next ``revision`` for its (benchmark, asset) pair, and the latest revision is the current
state. The unique key on (benchmark, asset, revision) makes two concurrent decisions collide
instead of both succeeding. The audit log is a hash chain whose head row is locked while an event
is appended, so concurrent transactions cannot fork it; each event is also a leaf of the
transparency log's Merkle tree, whose complete subtrees (``audit_nodes``) and right edge (on the
head row) are written in the same transaction.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
    true,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, validates

from sealbench.contract.pin import BenchmarkPin
from sealbench.server.schemas.budgets import DEFAULT_BUDGET_DELTA, DEFAULT_BUDGET_EPSILON

__all__ = [
    "ApiToken",
    "AuditCheck",
    "AuditCosignature",
    "AuditEvent",
    "AuditHead",
    "AuditNode",
    "AuthGeneration",
    "Base",
    "Benchmark",
    "BenchmarkDataset",
    "BenchmarkModel",
    "BudgetGroup",
    "CaseFingerprint",
    "Dataset",
    "DatasetBudgetGroup",
    "DatasetCoordinates",
    "LogKey",
    "Model",
    "ModelCoordinates",
    "PooledInput",
    "PooledRelease",
    "PrivacyDebit",
    "Result",
    "ResultStatistics",
    "Run",
    "User",
    "UtcDateTime",
    "WebSession",
]

_NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

_DIGEST = String(71)


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend (SQLite drops the offset on storage)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("timestamps must be timezone-aware")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


_TS = UtcDateTime()


class PinColumn(TypeDecorator[BenchmarkPin]):
    """A benchmark pin, stored as its text ``<name>/<version>`` and read back typed: the row holds
    the pin once (migration 0015), and no reader parses it again."""

    impl = String(64)
    cache_ok = True

    def process_bind_param(self, value: BenchmarkPin | str | None, dialect: Dialect) -> str | None:
        if value is None:
            return None
        return str(value if isinstance(value, BenchmarkPin) else BenchmarkPin.parse(value))

    def process_result_value(self, value: str | None, dialect: Dialect) -> BenchmarkPin | None:
        return None if value is None else BenchmarkPin.parse(value)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=_NAMING)
    type_annotation_map = {dict[str, Any]: JSON}  # noqa: RUF012


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    email: Mapped[str] = mapped_column(String(320), unique=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    oidc_issuer: Mapped[str | None] = mapped_column(String(512))
    oidc_subject: Mapped[str | None] = mapped_column(String(512))
    created_at: Mapped[datetime] = mapped_column(_TS)
    #: Set by ``sealbench-server user disable``: the account's tokens, JWTs and dashboard
    #: sessions stop working (NULL: active).
    disabled_at: Mapped[datetime | None] = mapped_column(_TS)

    __table_args__ = (UniqueConstraint("oidc_issuer", "oidc_subject", name="uq_users_oidc"),)


class ApiToken(Base):
    """An API token, stored only as the SHA-256 of the token string."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(_TS)
    revoked_at: Mapped[datetime | None] = mapped_column(_TS)


class AuthGeneration(Base):
    """One row (``id`` 1) whose ``value`` grows by one in the transaction of every token
    revocation and user disabling: each server process polls it (one primary-key read a second
    at most) and drops its token cache when it changed, so a revocation reaches every process
    within that bound."""

    __tablename__ = "auth_generation"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger, default=0)


class WebSession(Base):
    """A signed-in dashboard browser, shared by every server process. Keyed by the SHA-256 of
    the random session id (the raw id lives only in the browser's cookie); it names the user
    and, for an API-token sign-in, the token, so that revoking the token or disabling the user
    ends the session at once. The credential itself is never stored."""

    __tablename__ = "web_sessions"

    id_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(_TS)
    last_seen_at: Mapped[datetime] = mapped_column(_TS)
    expires_at: Mapped[datetime] = mapped_column(_TS, index=True)


class Benchmark(Base):
    __tablename__ = "benchmarks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    version: Mapped[str] = mapped_column(String(64))
    description: Mapped[str] = mapped_column(Text)
    data_contract: Mapped[dict[str, Any]]
    metrics_spec: Mapped[dict[str, Any]]
    #: The benchmark plug-in it pins, stored once (migration 0015 dropped the name/version copies).
    metrics_version: Mapped[BenchmarkPin] = mapped_column(PinColumn())
    image_reference: Mapped[str] = mapped_column(String(512))
    image_digest: Mapped[str] = mapped_column(_DIGEST)
    reference_model_id: Mapped[int | None] = mapped_column(ForeignKey("models.id"))
    state: Mapped[str] = mapped_column(String(16))
    approved_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    approved_at: Mapped[datetime | None] = mapped_column(_TS)
    created_at: Mapped[datetime] = mapped_column(_TS)
    updated_at: Mapped[datetime] = mapped_column(_TS)
    #: Set when the authority closed the benchmark to new associations (the state stays
    #: ``approved``: existing links keep running and submitting).
    closed_at: Mapped[datetime | None] = mapped_column(_TS)
    closed_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    #: Whether the benchmark publishes its leaderboard (issue 15): every signed-in user then sees
    #: every model's pooled and per-site values; otherwise a model owner sees only its own
    #: model's (migration 0007).
    leaderboard_published: Mapped[bool] = mapped_column(Boolean, default=False,
                                                        server_default=false())
    #: Whether key owners' conditions accept confidential-GPU preview images (support attribute
    #: EXPERIMENTAL, GPU cc_mode ON) for this benchmark's image (issue 18; migration 0008).
    accept_experimental: Mapped[bool] = mapped_column(Boolean, default=False,
                                                      server_default=false())
    #: Whether each run publishes its own (per-site) release (issue 41; migration 0022): False
    #: for a ``-pool`` pin, set from the pin at creation (the pin, which the owners' key-release
    #: conditions bind, decides it; this column states it).
    site_releases: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    #: The benchmark's aggregator image (issue 27; migration 0016): the second approved
    #: workload, which pools the sites' sealed exact statistics inside the TEE. Each data owner's
    #: grants admit it (for the models the dataset is evaluated with) when it associates; NULL:
    #: the benchmark does not pool in the TEE.
    aggregator_image_digest: Mapped[str | None] = mapped_column(_DIGEST)
    #: The registry's pool-release key (base64 X25519) the aggregator seals its releases to,
    #: fixed when the benchmark is created with an aggregator (its digest is in the
    #: aggregator's uid the sites grant); NULL without an aggregator.
    pool_recipient_key: Mapped[str | None] = mapped_column(String(44))
    #: The transparency log's key (C2SP verifier key) the aggregator checks authorizations and
    #: checkpoints against, and the witnesses (cosigner keys, JSON list) and how many of them
    #: must cosign a checkpoint (issue 40; migration 0018): with the pool-release key, the pool
    #: anchor whose digest the aggregator's uid names. NULL without an aggregator.
    pool_log_key: Mapped[str | None] = mapped_column(String(512))
    pool_witnesses: Mapped[list[str] | None] = mapped_column(JSON)
    pool_witness_quorum: Mapped[int | None] = mapped_column(Integer)

    __table_args__ = (UniqueConstraint("name", "version", name="uq_benchmarks_name_version"),)

    @validates("metrics_version")
    def _pin(self, _key: str, value: BenchmarkPin | str) -> BenchmarkPin:
        """The pin typed from the moment it is set (a row built from text holds the type too)."""
        return value if isinstance(value, BenchmarkPin) else BenchmarkPin.parse(value)


class Dataset(Base):
    __tablename__ = "datasets"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    digest: Mapped[str] = mapped_column(_DIGEST)
    case_count: Mapped[int] = mapped_column(Integer)
    statistics: Mapped[dict[str, Any]]
    prepared_for_id: Mapped[int | None] = mapped_column(ForeignKey("benchmarks.id"))
    state: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(_TS)
    #: The lifetime privacy budget its owner set at registration, as (epsilon, delta); the
    #: ledger works in zCDP rho (:mod:`sealbench.server.services.budgets`). A dataset in a
    #: budget group (:class:`DatasetBudgetGroup`) has the group's. Migration 0010 gave existing
    #: rows the defaults.
    budget_epsilon: Mapped[float] = mapped_column(Double, default=DEFAULT_BUDGET_EPSILON,
                                                  server_default="10.0")
    budget_delta: Mapped[float] = mapped_column(Double, default=DEFAULT_BUDGET_DELTA,
                                                server_default="1e-06")

    __table_args__ = (UniqueConstraint("owner_id", "name", name="uq_datasets_owner_name"),)


class BudgetGroup(Base):
    """Datasets of one owner that share cases, and so share one privacy ledger and one budget:
    the (epsilon, delta) set when the group was created (migration 0010). The name is the
    owner's, unique per owner."""

    __tablename__ = "budget_groups"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    budget_epsilon: Mapped[float] = mapped_column(Double)
    budget_delta: Mapped[float] = mapped_column(Double)
    created_at: Mapped[datetime] = mapped_column(_TS)

    __table_args__ = (UniqueConstraint("owner_id", "name", name="uq_budget_groups_owner_name"),)


class DatasetBudgetGroup(Base):
    """A dataset's membership of a budget group, set at registration and never changed (a
    table of its own, so that ``datasets`` gains no foreign key: SQLite would have to rebuild
    a table that results and runs refer to)."""

    __tablename__ = "dataset_budget_groups"

    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id"), primary_key=True,
                                            autoincrement=False)
    group_id: Mapped[int] = mapped_column(ForeignKey("budget_groups.id"), index=True)


class Model(Base):
    __tablename__ = "models"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    version: Mapped[str] = mapped_column(String(64))
    digest: Mapped[str] = mapped_column(_DIGEST)
    format: Mapped[str] = mapped_column(String(16))
    io_contract: Mapped[dict[str, Any]]
    state: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(_TS)

    __table_args__ = (
        UniqueConstraint("owner_id", "name", "version", name="uq_models_owner_name_version"),
    )


class _Coordinates:
    """Where an asset's sealed copy and key live; readable only by its owner and by parties of
    an approved association with it."""

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kms_key_name: Mapped[str] = mapped_column(String(512))
    storage_uri: Mapped[str] = mapped_column(String(1024))
    wip_provider: Mapped[str] = mapped_column(String(512))
    updated_at: Mapped[datetime] = mapped_column(_TS)
    #: The grant set the owner's last ``policy sync`` wrote to this key
    #: (:func:`sealbench.contract.workload.grant_set_digest`); None: never reported (revision 0014).
    grants_digest: Mapped[str | None] = mapped_column(_DIGEST)
    grants_synced_at: Mapped[datetime | None] = mapped_column(_TS)


class DatasetCoordinates(_Coordinates, Base):
    __tablename__ = "dataset_coordinates"
    asset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id"), unique=True)


class ModelCoordinates(_Coordinates, Base):
    __tablename__ = "model_coordinates"
    asset_id: Mapped[int] = mapped_column(ForeignKey("models.id"), unique=True)


class _Association:
    """One revision of a benchmark↔asset link. ``status`` is pending, approved or rejected;
    ``initiated_by_id`` is whoever opened the request this revision belongs to, ``actor_id``
    whoever wrote this revision."""

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    revision: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    initiator_role: Mapped[str] = mapped_column(String(24))
    created_at: Mapped[datetime] = mapped_column(_TS)

    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id"), index=True)
    initiated_by_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    actor_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    #: The dataset's owner consented, in the revision that let it join (request, approval or
    #: one carried forward), to a benchmark whose pin publishes exact, non-private figures
    #: (issue 25; migration 0011). Always false for models.
    exact_release_consent: Mapped[bool] = mapped_column(Boolean, default=False,
                                                        server_default=false())


class BenchmarkDataset(_Association, Base):
    __tablename__ = "benchmark_datasets"
    asset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id"), index=True)
    __table_args__ = (
        UniqueConstraint("benchmark_id", "asset_id", "revision", name="uq_benchmark_datasets_rev"),
    )


class BenchmarkModel(_Association, Base):
    __tablename__ = "benchmark_models"
    asset_id: Mapped[int] = mapped_column(ForeignKey("models.id"), index=True)
    __table_args__ = (
        UniqueConstraint("benchmark_id", "asset_id", "revision", name="uq_benchmark_models_rev"),
    )


class Result(Base):
    """A verified result: the public summary, the digest of the sealed per-case result and the
    attestation token that binds both to the benchmark's image, dataset and model."""

    __tablename__ = "results"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id"), index=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id"), index=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), index=True)
    submitted_by_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    summary: Mapped[dict[str, Any]]
    sealed_result_digest: Mapped[str] = mapped_column(_DIGEST, unique=True)
    attestation_token: Mapped[str] = mapped_column(Text)
    token_issuer: Mapped[str] = mapped_column(String(512))
    image_digest: Mapped[str] = mapped_column(_DIGEST)
    nonce: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(_TS)
    #: Where the run left its objects (the run spec's result location), as the data owner
    #: reported it: the aggregator reads the site's ``pool.sealed`` there (issue 27; migration
    #: 0016). NULL for results submitted without it: they cannot be pooled in the TEE.
    result_uri: Mapped[str | None] = mapped_column(String(1024))


class ResultStatistics(Base):
    """What the pooled leaderboard reads of one result, computed by the benchmark's plug-in
    (``plugin``, the pin) when the result was accepted, in the same transaction
    (:mod:`sealbench.server.services.result_statistics` says what each field holds)."""

    __tablename__ = "result_statistics"

    result_id: Mapped[int] = mapped_column(ForeignKey("results.id"), primary_key=True,
                                           autoincrement=False)
    plugin: Mapped[str] = mapped_column(String(80))
    format: Mapped[int] = mapped_column(Integer)
    n_cases: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str | None] = mapped_column(Text)
    mock_tee: Mapped[bool] = mapped_column(Boolean)
    epsilon: Mapped[float | None] = mapped_column(Double)
    delta: Mapped[float | None] = mapped_column(Double)
    figures: Mapped[dict[str, Any]]
    pool: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class PooledRelease(Base):
    """A TEE-pooled release (issue 27): the aggregator's ``pooled.json`` for one model over the
    accepted results it lists (:class:`PooledInput`), opened from the ``pooled.sealed`` it was
    sealed in (kept, so anyone can check the token's nonce) after its attestation token was
    verified (audience ``sealbench-pool``, the benchmark's approved aggregator image, nonce
    :func:`sealbench.contract.pool.pooled_nonce` of the sealed bytes)."""

    __tablename__ = "pooled_releases"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id"), index=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), index=True)
    submitted_by_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    #: The release document (``sealbench/pooled-release`` v1) as JSON.
    release: Mapped[dict[str, Any]]
    #: The exact ``pooled.sealed`` the token binds.
    sealed_release: Mapped[bytes] = mapped_column(LargeBinary)
    inputs_digest: Mapped[str] = mapped_column(_DIGEST)
    attestation_token: Mapped[str] = mapped_column(Text)
    token_issuer: Mapped[str] = mapped_column(String(512))
    image_digest: Mapped[str] = mapped_column(_DIGEST)
    nonce: Mapped[str] = mapped_column(String(64), unique=True)
    n_sites: Mapped[int] = mapped_column(Integer)
    n_cases: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(_TS)
    #: The authorization it spent (issue 40; NULL for releases submitted before authorizations).
    authorization_id: Mapped[int | None] = mapped_column(
        ForeignKey("pool_authorizations.id"), unique=True)


class PoolAuthorization(Base):
    """A pool the registry authorized (issue 40; migration 0018): the inputs document it chose
    (``sealbench/pool-inputs`` v2, exact bytes), its digest, the log key's signed note over it,
    the ``pool.authorize`` event that logged it (after each ledger's debit), and the release it
    produced once submitted. The debits are :class:`PrivacyDebit` rows with
    ``pool_authorization_id``."""

    __tablename__ = "pool_authorizations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    pool_id: Mapped[str] = mapped_column(String(64), unique=True)
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id"), index=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), index=True)
    authorized_by_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    inputs: Mapped[bytes] = mapped_column(LargeBinary)
    inputs_digest: Mapped[str] = mapped_column(_DIGEST)
    signature: Mapped[str] = mapped_column(Text)
    audit_seq: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(_TS)


class PooledInput(Base):
    """One accepted result a pooled release used, with the commitment it matched. A result may
    be pooled by several releases (each authorized and debited: the board pools every current
    site), once per release."""

    __tablename__ = "pooled_inputs"

    pooled_release_id: Mapped[int] = mapped_column(ForeignKey("pooled_releases.id"),
                                                   primary_key=True)
    result_id: Mapped[int] = mapped_column(ForeignKey("results.id"), primary_key=True)
    commitment: Mapped[str] = mapped_column(_DIGEST)


class PrivacyDebit(Base):
    """The privacy loss of one accepted result's release, charged to its dataset's ledger (the
    dataset's own, or its budget group's when ``budget_group_id`` is set) in the transaction
    that stored the result; ``audit_seq`` is the ``privacy.debit`` event that logged it. An
    exact (non-private) release is recorded with ``exact`` and no rho, epsilon or delta. One
    debit per result at most (the unique ``result_id``). A TEE-pooled release debits each
    dataset it includes once, with ``pooled_release_id`` set and no ``result_id`` (migration
    0016); one debit per (pooled release, dataset)."""

    __tablename__ = "privacy_debits"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id"), index=True)
    budget_group_id: Mapped[int | None] = mapped_column(ForeignKey("budget_groups.id"),
                                                        index=True)
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id"))
    result_id: Mapped[int | None] = mapped_column(ForeignKey("results.id"), unique=True)
    pooled_release_id: Mapped[int | None] = mapped_column(ForeignKey("pooled_releases.id"))
    #: A pool authorization's debit (issue 40): charged before the aggregator may draw.
    pool_authorization_id: Mapped[int | None] = mapped_column(
        ForeignKey("pool_authorizations.id"), index=True)
    exact: Mapped[bool] = mapped_column(Boolean)
    rho: Mapped[float | None] = mapped_column(Double)
    #: The pure epsilons of the release's Laplace mechanisms (issue 41; migration 0021): JSON
    #: list, None (the rows before it) for none. ``rho`` is the Gaussian part alone.
    laplace: Mapped[list[float] | None] = mapped_column(JSON)
    epsilon: Mapped[float | None] = mapped_column(Double)
    delta: Mapped[float | None] = mapped_column(Double)
    audit_seq: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(_TS)

    __table_args__ = (
        UniqueConstraint("pooled_release_id", "dataset_id",
                         name="uq_privacy_debits_pooled_release_dataset"),
        UniqueConstraint("pool_authorization_id", "dataset_id",
                         name="uq_privacy_debits_authorization_dataset"),
        CheckConstraint("(CASE WHEN result_id IS NULL THEN 0 ELSE 1 END) + "
                        "(CASE WHEN pooled_release_id IS NULL THEN 0 ELSE 1 END) + "
                        "(CASE WHEN pool_authorization_id IS NULL THEN 0 ELSE 1 END) = 1",
                        name="one_release"),
    )


class AuditEvent(Base):
    """One link of the audit hash chain. ``occurred_at`` and ``payload`` are stored as the exact
    text that was hashed (ISO 8601 UTC; canonical JSON)."""

    __tablename__ = "audit_events"

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    actor_id: Mapped[int | None] = mapped_column(Integer)
    action: Mapped[str] = mapped_column(String(64))
    entity_type: Mapped[str] = mapped_column(String(32))
    entity_id: Mapped[str] = mapped_column(String(64))
    payload: Mapped[str] = mapped_column(Text)
    occurred_at: Mapped[str] = mapped_column(String(40))
    prev_hash: Mapped[str] = mapped_column(_DIGEST)
    hash: Mapped[str] = mapped_column(_DIGEST, unique=True)

    __table_args__ = (Index("ix_audit_events_entity", "entity_type", "entity_id"),)


class AuditHead(Base):
    """The single row (id 1) naming the chain's last event and the transparency log's tree
    head: ``tree_root`` over the first ``seq`` events, and ``tree_edge``, the hashes of the
    complete subtrees on the tree's right edge (:class:`sealbench.crypto.tlog.CompactRange`).
    Locked while appending."""

    __tablename__ = "audit_head"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    seq: Mapped[int] = mapped_column(Integer)
    hash: Mapped[str] = mapped_column(_DIGEST)
    tree_root: Mapped[bytes] = mapped_column(LargeBinary)
    tree_edge: Mapped[bytes] = mapped_column(LargeBinary)


class AuditNode(Base):
    """The hash of a complete subtree of the transparency log: the ``2**level`` leaves from
    ``idx * 2**level``; level 0 holds the leaf hash of event ``idx + 1``. Written once, when the
    subtree completes; every proof reads ``O(log n)`` of them."""

    __tablename__ = "audit_nodes"

    level: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    idx: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    hash: Mapped[bytes] = mapped_column(LargeBinary)


class LogKey(Base):
    """A public key that signs (or signed) the log's checkpoints, as a C2SP verifier key. The
    current one has no ``retired_at``; a rotated-in key carries the ``endorsement`` its
    predecessor signed. Old keys stay so old checkpoints and receipts still verify."""

    __tablename__ = "log_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    verifier: Mapped[str] = mapped_column(String(400), unique=True)
    created_at: Mapped[datetime] = mapped_column(_TS)
    retired_at: Mapped[datetime | None] = mapped_column(_TS)
    endorsement: Mapped[str | None] = mapped_column(Text)


class AuditCosignature(Base):
    """A witness's ``cosignature/v1`` over the checkpoint of ``tree_size`` leaves (root
    ``root``), verified before it was stored."""

    __tablename__ = "audit_cosignatures"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    witness: Mapped[str] = mapped_column(String(400))
    tree_size: Mapped[int] = mapped_column(BigInteger)
    root: Mapped[bytes] = mapped_column(LargeBinary)
    timestamp: Mapped[int] = mapped_column(BigInteger)
    signature: Mapped[str] = mapped_column(Text)
    submitted_by_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    received_at: Mapped[datetime] = mapped_column(_TS)

    __table_args__ = (
        UniqueConstraint("witness", "tree_size", name="uq_audit_cosignatures_witness_size"),
    )


class AuditCheck(Base):
    """The outcome of one full recomputation of the log on the server (``sealbench-server
    audit verify`` or ``GET /audit/verify``); the dashboard shows the latest instead of
    recomputing per view."""

    __tablename__ = "audit_checks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    checked_at: Mapped[datetime] = mapped_column(_TS)
    actor_id: Mapped[int | None] = mapped_column(Integer)
    tree_size: Mapped[int] = mapped_column(Integer)
    ok: Mapped[bool] = mapped_column(Boolean)
    first_broken_seq: Mapped[int | None] = mapped_column(Integer)
    reason: Mapped[str | None] = mapped_column(String(500))


class Run(Base):
    """A confidential run as its data owner's client reported it (``/runs``): the latest
    state, its failure class or interrupt reason, per-step timings, the execution provider the
    model ran on, the image digest and, once
    submitted, the result it produced. ``seq`` is the highest report number received (later
    reports with a lower one are ignored). Never a case id, metric, key or token (a failure
    token is verified, then only whether it verified is kept)."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_key: Mapped[str] = mapped_column(String(64))
    reporter_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id"))
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id"), index=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), index=True)
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(String(32))
    image_digest: Mapped[str] = mapped_column(_DIGEST)
    tee: Mapped[str] = mapped_column(String(32))
    attempts: Mapped[int] = mapped_column(Integer)
    step_seconds: Mapped[dict[str, Any]]
    #: An ONNX Runtime provider name (``schemas.runs.ExecutionProvider``); NULL: not reported.
    execution_provider: Mapped[str | None] = mapped_column(String(32))
    result_id: Mapped[int | None] = mapped_column(ForeignKey("results.id"), unique=True)
    seq: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(_TS)
    updated_at: Mapped[datetime] = mapped_column(_TS)
    #: The run failed and ``reason`` is the error class of the enclave's own failure record,
    #: whose attestation token the registry verified (migration 0013); false: the hospital's
    #: claim, or no failure.
    failure_attested: Mapped[bool] = mapped_column(Boolean, default=False,
                                                   server_default=false())

    __table_args__ = (
        UniqueConstraint("reporter_id", "run_key", name="uq_runs_reporter_key"),
        Index("ix_runs_benchmark_pair", "benchmark_id", "model_id", "dataset_id"),
    )


class CaseFingerprint(Base):
    """One case of a dataset as its owner's client fingerprinted it at registration (issue 40,
    migration 0017): HMAC-SHA256, under the owner's own fingerprint key, of a digest of the
    case's content that no case id or file name enters (:mod:`sealbench.client.assets.
    fingerprints`). Used only to find a new dataset's cases among the same owner's earlier
    datasets (:mod:`sealbench.server.services.fingerprints`), so that they share one privacy
    ledger; never returned by any API. A dataset registered without fingerprints (before
    migration 0017) has none and keeps its own ledger. Two equal cases in one dataset are one
    row."""

    __tablename__ = "case_fingerprints"

    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id"), primary_key=True,
                                            autoincrement=False)
    fingerprint: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"))

    __table_args__ = (
        Index("ix_case_fingerprints_owner_fingerprint", "owner_id", "fingerprint"),
    )
