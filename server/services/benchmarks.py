"""Benchmarks: anyone signed in registers one (pending); only an admin approves or rejects it;
its owner or an admin retires it, or closes an approved one to new associations (its state
stays approved and its existing links keep running).

A benchmark's images are fixed at creation: the evaluation image and, for a benchmark that pools
in the TEE (issue 27), its aggregator image. Each data owner consents to both when it
associates (its grants name them), so neither changes afterwards; a new image is a new
benchmark version, which owners join anew. The aggregator image must differ from the
evaluation image (see :mod:`sealbench.gcp._cs_cel` on why only the aggregator's uid may leave
the dataset open).

A benchmark's plug-in must be installed on the registry (:func:`plugin_installed`): a pin the
registry cannot load is refused at creation, naming it and how the operator installs one, since
the registry could validate none of its results. Its pin must match its definition: the grid
its data contract declares, as the plug-in reads it, must be the plug-in's (the grid is part of
the pin: a ``brats-2023-gli/1`` benchmark cannot declare 64x64x48, which is
``brats-2023-gli/1-64x64x48``). The enclave enforces the pinned grid on every case whatever the
registry stored; this check keeps the registry's statement of the grid, which datasets are
checked against at registration and association, the pin's."""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
from pydantic import ValidationError
from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from sealbench.benchmarks.interface import (
    POOLED_ONLY_SUFFIX,
    BenchmarkError,
    GridError,
    grid_of,
)
from sealbench.benchmarks.interface import Benchmark as BenchmarkPlugin
from sealbench.benchmarks.registry import load
from sealbench.contract.pin import BenchmarkPin
from sealbench.contract.pool import PoolAnchor
from sealbench.crypto.sealing import public_key_to_raw
from sealbench.server.audit import append_event
from sealbench.server.auth import Principal
from sealbench.server.errors import (
    ConflictError,
    InvalidRequestError,
    InvalidStateError,
    PermissionDeniedError,
)
from sealbench.server.models import Benchmark, LogKey, Model
from sealbench.server.schemas import BenchmarkCreate, BenchmarkState
from sealbench.server.services._common import PageOf, commit, flush, get_or_404, rows_page
from sealbench.server.services.benchmark_plugins import PluginLookup

#: How a registry's operator installs a benchmark plug-in (docs/benchmark-authoring.md).
INSTALL_HINT = (
    "the registry's operator installs a plug-in by installing its Python distribution (which "
    "declares it in the 'sealbench.benchmarks' entry-point group) into the registry server's "
    "environment, e.g. 'pip install ./my-benchmark', and restarting 'sealbench-server'; then "
    "create the benchmark again")


def plugin_installed(metrics_version: BenchmarkPin,
                     plugins: PluginLookup = load) -> BenchmarkPlugin:
    """The plug-in ``metrics_version`` pins, installed on this registry; 422 naming the pin and
    how an operator installs one when it is not (or fails to load)."""
    try:
        return plugins(metrics_version)
    except BenchmarkError as exc:
        raise InvalidRequestError(
            f"metrics_version: the registry cannot take a benchmark pinned to "
            f"{metrics_version}: {exc}; it could validate none of its results. "
            + INSTALL_HINT[0].upper() + INSTALL_HINT[1:]) from None


def _check_pin_matches_contract(plugin: BenchmarkPlugin, data_contract: dict[str, Any]) -> None:
    """422 when the installed ``plugin`` fixes another grid than ``data_contract`` declares
    (the plug-in reads both: :func:`grid_of`). One that fixes no grid (tabular) is not
    checked."""
    metrics_version = plugin.ref
    try:
        pinned = grid_of(plugin, plugin.data_contract())
    except BenchmarkError:
        return
    if pinned is None:
        return
    try:
        declared = grid_of(plugin, data_contract)
    except GridError as exc:
        raise InvalidRequestError(f"data_contract: {exc}") from None
    if declared is None or (declared.spacing_mm is None and pinned.spacing_mm is not None) \
            or not pinned.admits(declared):
        stated = "no grid" if declared is None else declared.text()
        raise InvalidRequestError(
            f"data_contract: benchmark plug-in {metrics_version} takes cases on the grid "
            f"{pinned.text()}, but the contract declares {stated}; the grid is part of the pin "
            "(pin the plug-in's variant of that grid, or declare its own)")


__all__ = ["approve", "close", "create", "get", "list_page", "plugin_installed", "set_state"]


def create(session: Session, actor: Principal, body: BenchmarkCreate, now: datetime, *,
           pool_key: X25519PublicKey | None = None,
           plugins: PluginLookup = load) -> Benchmark:
    """Create ``body`` (pending). A benchmark with an aggregator image records ``pool_key``,
    the registry's pool-release key (:mod:`sealbench.server.poolkey`), as its pool recipient:
    fixed with the benchmark, logged in its creation event. Its plug-in must be installed
    here (``plugins``: :func:`plugin_installed`)."""
    taken = select(Benchmark.id).where(
        Benchmark.name == body.name, Benchmark.version == body.version
    )
    if session.scalars(taken).first() is not None:
        raise ConflictError(f"benchmark {body.name} version {body.version} already exists")
    _check_pin_matches_contract(plugin_installed(body.metrics_version, plugins),
                                dict(body.data_contract))
    if body.metrics_version.version.endswith(POOLED_ONLY_SUFFIX) \
            and body.aggregator_image_digest is None:
        raise InvalidRequestError(
            f"metrics_version: {body.metrics_version} publishes no per-site release, only the "
            "pooled release drawn inside the benchmark's aggregator, and the benchmark names "
            "none (aggregator_image_digest): it would never publish a figure; pin "
            f"{str(body.metrics_version).removesuffix(POOLED_ONLY_SUFFIX)} or pool in the TEE")
    if body.aggregator_image_digest is not None \
            and body.aggregator_image_digest == body.image_digest:
        raise InvalidRequestError(
            "aggregator_image_digest: the aggregator is a second image (its own fixed command "
            "and launch policy), never the evaluation image: a data owner grants a uid without "
            "a dataset to the aggregator image alone")
    recipient = log_key = None
    if body.aggregator_image_digest is not None:
        if pool_key is None:
            raise InvalidRequestError("aggregator_image_digest: this registry has no "
                                      "pool-release key to seal pooled releases to")
        recipient = base64.b64encode(public_key_to_raw(pool_key)).decode("ascii")
        log_key = session.scalars(select(LogKey.verifier).where(
            LogKey.retired_at.is_(None))).first()
        if log_key is None:
            raise InvalidRequestError("aggregator_image_digest: this registry publishes no "
                                      "transparency-log key to authorize pools with")
        try:
            PoolAnchor(recipient_key=recipient, log_key=log_key,
                       witnesses=body.pool_witnesses, quorum=body.pool_witness_quorum)
        except ValidationError as exc:
            raise InvalidRequestError(
                f"pool_witnesses: {exc.errors()[0]['msg'].removeprefix('Value error, ')}"
            ) from None
    elif body.pool_witnesses or body.pool_witness_quorum:
        raise InvalidRequestError("pool_witnesses: witnesses guard an aggregator's "
                                  "authorizations; this benchmark names no aggregator image")
    if body.reference_model_id is not None and session.get(Model, body.reference_model_id) is None:
        raise InvalidRequestError(f"reference model {body.reference_model_id} does not exist")
    row = Benchmark(
        owner_id=actor.user_id,
        name=body.name,
        version=body.version,
        description=body.description,
        data_contract=dict(body.data_contract),
        metrics_spec=dict(body.metrics_spec),
        metrics_version=body.metrics_version,
        image_reference=body.image_reference,
        image_digest=body.image_digest,
        reference_model_id=body.reference_model_id,
        leaderboard_published=body.leaderboard_published,
        accept_experimental=body.accept_experimental,
        site_releases=not body.metrics_version.version.endswith(POOLED_ONLY_SUFFIX),
        aggregator_image_digest=body.aggregator_image_digest,
        pool_recipient_key=recipient,
        pool_log_key=log_key,
        pool_witnesses=None if log_key is None else sorted(body.pool_witnesses),
        pool_witness_quorum=None if log_key is None else body.pool_witness_quorum,
        state="pending",
        created_at=now,
        updated_at=now,
    )
    session.add(row)
    flush(session, f"benchmark {body.name} {body.version}")
    append_event(
        session,
        actor_id=actor.user_id,
        action="benchmark.create",
        entity_type="benchmark",
        entity_id=row.id,
        payload={
            "name": row.name,
            "version": row.version,
            "image_digest": row.image_digest,
            "metrics_version": str(row.metrics_version),
            "leaderboard_published": row.leaderboard_published,
            "accept_experimental": row.accept_experimental,
            "site_releases": row.site_releases,
            "aggregator_image_digest": row.aggregator_image_digest,
            "pool_recipient_key": row.pool_recipient_key,
            "pool_log_key": row.pool_log_key,
            "pool_witnesses": row.pool_witnesses,
            "pool_witness_quorum": row.pool_witness_quorum,
        },
        now=now,
    )
    commit(session, f"benchmark {body.name} {body.version}")
    return row


def get(session: Session, benchmark_id: int, *, for_update: bool = False) -> Benchmark:
    return get_or_404(session, Benchmark, benchmark_id, "benchmark", for_update=for_update)


def list_page(
    session: Session, *, state: BenchmarkState | None, limit: int, offset: int
) -> PageOf[Row[Any]]:
    """Benchmarks in id order, as plain rows with the table's columns."""
    stmt = select(*Benchmark.__table__.columns).order_by(Benchmark.id)
    if state is not None:
        stmt = stmt.where(Benchmark.state == state)
    return rows_page(session, stmt, limit=limit, offset=offset)


def approve(session: Session, actor: Principal, benchmark_id: int, now: datetime) -> Benchmark:
    """Only an admin approves, and only a pending benchmark."""
    if not actor.is_admin:
        raise PermissionDeniedError("only an admin approves a benchmark")
    row = get(session, benchmark_id, for_update=True)
    if row.state != "pending":
        raise InvalidStateError(f"benchmark {row.id} is {row.state}, expected pending")
    row.state = "approved"
    row.approved_by_id = actor.user_id
    row.approved_at = now
    row.updated_at = now
    _audit_state(session, actor, row, now)
    commit(session, f"benchmark {row.id}")
    return row


def set_state(
    session: Session, actor: Principal, benchmark_id: int, state: str, now: datetime
) -> Benchmark:
    """``rejected``: an admin, from pending. ``retired``: the owner or an admin, from any state
    but retired."""
    row = get(session, benchmark_id, for_update=True)
    if state == "rejected":
        if not actor.is_admin:
            raise PermissionDeniedError("only an admin rejects a benchmark")
        if row.state != "pending":
            raise InvalidStateError(f"benchmark {row.id} is {row.state}, expected pending")
    elif state == "retired":
        if not (actor.is_admin or actor.user_id == row.owner_id):
            raise PermissionDeniedError("only the benchmark's owner or an admin retires it")
        if row.state == "retired":
            raise InvalidStateError(f"benchmark {row.id} is already retired")
    else:
        raise InvalidRequestError(f"expected state 'rejected' or 'retired', received {state!r}")
    row.state = state
    row.updated_at = now
    _audit_state(session, actor, row, now)
    commit(session, f"benchmark {row.id}")
    return row


def set_leaderboard_published(
    session: Session, actor: Principal, benchmark_id: int, published: bool, now: datetime
) -> Benchmark:
    """The owner (or an admin) publishes the benchmark's leaderboard (every signed-in user sees
    every model's pooled and per-site values) or stops publishing it (a model owner sees only
    its own model's); logged."""
    row = get(session, benchmark_id, for_update=True)
    if not (actor.is_admin or actor.user_id == row.owner_id):
        raise PermissionDeniedError(
            "only the benchmark's owner or an admin publishes its leaderboard")
    if row.leaderboard_published != published:
        row.leaderboard_published = published
        row.updated_at = now
        append_event(
            session,
            actor_id=actor.user_id,
            action="benchmark.leaderboard",
            entity_type="benchmark",
            entity_id=row.id,
            payload={"leaderboard_published": published},
            now=now,
        )
    commit(session, f"benchmark {row.id}")
    return row


def close(session: Session, actor: Principal, benchmark_id: int, now: datetime) -> Benchmark:
    """The owner or an admin closes an approved benchmark to new associations: requests,
    invitations and approvals are refused from now on; approved links keep running, submitting
    results and receiving key grants."""
    row = get(session, benchmark_id, for_update=True)
    if not (actor.is_admin or actor.user_id == row.owner_id):
        raise PermissionDeniedError("only the benchmark's owner or an admin closes it")
    if row.state != "approved":
        raise InvalidStateError(
            f"benchmark {row.id} is {row.state}; only an approved benchmark takes associations"
        )
    if row.closed_at is not None:
        raise InvalidStateError(
            f"benchmark {row.id} is already closed (since {row.closed_at:%Y-%m-%d %H:%M} UTC)"
        )
    row.closed_at = now
    row.closed_by_id = actor.user_id
    row.updated_at = now
    append_event(
        session,
        actor_id=actor.user_id,
        action="benchmark.close",
        entity_type="benchmark",
        entity_id=row.id,
        payload={"state": row.state, "closed": True},
        now=now,
    )
    commit(session, f"benchmark {row.id}")
    return row


def _audit_state(session: Session, actor: Principal, row: Benchmark, now: datetime) -> None:
    append_event(
        session,
        actor_id=actor.user_id,
        action=f"benchmark.{row.state}",
        entity_type="benchmark",
        entity_id=row.id,
        payload={"state": row.state},
        now=now,
    )
