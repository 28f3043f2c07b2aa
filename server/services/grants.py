"""Whether each asset's key grants follow its approvals (issue 29).

After ``sealbench policy sync`` wrote an asset's grants, its owner reports the digest of the
grant set it wrote (:func:`report`); the registry computes, with the same function
(:func:`sealbench.contract.workload.grant_set_digest`), the grant set the asset's *current*
approvals require (:func:`required_grants`, the registry's side of
:func:`sealbench.client.assets.grants.allowed_workloads`), so it knows whose grants lag: an approval
(or a withdrawal) since the owner's last sync. The inbox lists those assets to their owners, and
a data owner whose run was refused asks which of its run's assets lag (:func:`status`).

The report is the owner's word about its own cloud: the registry cannot check it, and needs not
(an owner who reports grants it did not write only hides from itself that a sync is due).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, cast

from sqlalchemy import select
from sqlalchemy.orm import Session

from sealbench.contract.pool import PoolAnchor, aggregator_identity
from sealbench.contract.workload import WorkloadIdentity, grant_set_digest
from sealbench.crypto.digest import Sha256Digest, parse_digest
from sealbench.server.audit import append_event
from sealbench.server.auth import Principal
from sealbench.server.errors import InvalidRequestError, NotFoundError, PermissionDeniedError
from sealbench.server.models import (
    Benchmark,
    Dataset,
    DatasetCoordinates,
    Model,
    ModelCoordinates,
)
from sealbench.server.schemas import GrantsReport
from sealbench.server.services._common import commit, get_or_404
from sealbench.server.services.assets import get_coordinates
from sealbench.server.services.associations import Kind, approved_pairs_subquery

__all__ = [
    "RECIPIENT_STATISTIC",
    "GrantState",
    "grant_state",
    "lagging_of_owner",
    "report",
    "required_grants",
    "status",
]

#: The dataset statistic holding the result recipient digest its owner registered (the same
#: key as :data:`sealbench.client.assets.prepare.RECIPIENT_STATISTIC`; a test holds them equal).
RECIPIENT_STATISTIC: Final = "result_recipient_digest"
#: How far ahead of the registry's clock a reported sync time may be (clock skew).
_MAX_SKEW: Final = timedelta(minutes=5)

Grant = tuple[WorkloadIdentity, bool]
Coordinates = DatasetCoordinates | ModelCoordinates
_ASSETS: dict[Kind, type[Dataset] | type[Model]] = {"dataset": Dataset, "model": Model}
_COORDS: dict[Kind, type[DatasetCoordinates] | type[ModelCoordinates]] = {
    "dataset": DatasetCoordinates, "model": ModelCoordinates,
}


@dataclass(frozen=True)
class GrantState:
    """An asset's grants as its owner last reported them and as its approvals require them."""

    kind: Kind
    asset: Dataset | Model
    coordinates: Coordinates | None
    #: None when the registry cannot compute it (an approved dataset without a recipient).
    required: Sha256Digest | None
    required_count: int

    @property
    def reported(self) -> Sha256Digest | None:
        c = self.coordinates
        return None if c is None or c.grants_digest is None else Sha256Digest(c.grants_digest)

    @property
    def synced_at(self) -> datetime | None:
        return None if self.coordinates is None else self.coordinates.grants_synced_at

    @property
    def lagging(self) -> bool:
        """The asset has a key whose reported grants (the empty set when never reported) are
        not the ones its current approvals require."""
        if self.coordinates is None or self.required is None:
            return False
        return (self.reported or grant_set_digest(())) != self.required

    @property
    def command(self) -> str:
        return f"sealbench policy sync --{self.kind} {self.asset.id}"


def required_grants(session: Session, kind: Kind, asset_id: int) -> tuple[Grant, ...] | None:
    """Every grant the owner of ``kind`` ``asset_id`` should have written: for each approved
    benchmark in which the asset is approved, each approved asset of the other kind, as
    :func:`sealbench.client.assets.grants.allowed_workloads` computes them (a model owner's grant
    leaves the dataset open). A dataset's grants also name, for each model approved in a
    benchmark that pools in the TEE, the benchmark's aggregator
    (:func:`~sealbench.contract.pool.aggregator_identity`, issue 27); a model owner's never do
    (the aggregator never opens a model). None when one cannot be built (a dataset without a
    result recipient digest: its owner's sync fails too)."""
    other_kind: Kind = "model" if kind == "dataset" else "dataset"
    mine, theirs = approved_pairs_subquery(kind), approved_pairs_subquery(other_kind)
    other_table = _ASSETS[other_kind]
    rows = session.execute(
        select(Benchmark, other_table)
        .select_from(mine)
        .join(Benchmark, Benchmark.id == mine.c.benchmark_id)
        .join(theirs, theirs.c.benchmark_id == mine.c.benchmark_id)
        .join(other_table, other_table.id == theirs.c.asset_id)
        .where(mine.c.asset_id == asset_id, Benchmark.state == "approved")
    ).all()
    if not rows:
        return ()
    asset = get_or_404(session, _ASSETS[kind], asset_id, kind)
    grants: list[Grant] = []
    for benchmark, other in rows:
        dataset = cast("Dataset", asset if kind == "dataset" else other)
        model = cast("Model", other if kind == "dataset" else asset)
        try:
            identity = WorkloadIdentity(
                image_digest=parse_digest(benchmark.image_digest),
                data_digest=parse_digest(dataset.digest) if kind == "dataset" else None,
                model_digest=parse_digest(model.digest),
                recipient_digest=parse_digest(
                    str(dataset.statistics.get(RECIPIENT_STATISTIC))),
                benchmark_id=str(benchmark.id),
                metrics_version=str(benchmark.metrics_version),
            )
        except ValueError:
            return None
        grants.append((identity, benchmark.accept_experimental))
        anchor = PoolAnchor.of(benchmark)
        if kind == "dataset" and anchor is not None and benchmark.aggregator_image_digest:
            # the aggregator needs no GPU: STABLE images only (no EXPERIMENTAL allowance)
            grants.append((aggregator_identity(
                benchmark.aggregator_image_digest, anchor, identity), False))
    return tuple(grants)


def _coordinates(session: Session, kind: Kind, asset_id: int) -> Coordinates | None:
    table = _COORDS[kind]
    row = session.scalars(select(table).where(table.asset_id == asset_id)).first()
    return cast("Coordinates | None", row)


def grant_state(session: Session, kind: Kind, asset: Dataset | Model) -> GrantState:
    grants = required_grants(session, kind, asset.id)
    return GrantState(
        kind, asset, _coordinates(session, kind, asset.id),
        None if grants is None else grant_set_digest(grants),
        0 if grants is None else len({g[0].uid() for g in grants}),
    )


def status(session: Session, actor: Principal, kind: Kind, asset_id: int) -> GrantState:
    """The asset's grant state; readable by whoever may read its coordinates (its owner and
    approved parties: the data owner whose run was refused asks about the model)."""
    asset = get_or_404(session, _ASSETS[kind], asset_id, kind)
    with contextlib.suppress(NotFoundError):  # not sealed: the state says so
        get_coordinates(session, actor, kind, asset_id)
    return grant_state(session, kind, asset)


def report(
    session: Session, actor: Principal, kind: Kind, asset_id: int, body: GrantsReport,
    now: datetime,
) -> GrantState:
    """Record the grant set the owner's sync wrote; only the asset's owner may, and only for a
    sealed asset (a sync needs its key)."""
    asset = get_or_404(session, _ASSETS[kind], asset_id, kind, for_update=True)
    if asset.owner_id != actor.user_id:
        raise PermissionDeniedError(f"only the {kind}'s owner reports its grants")
    row = _coordinates(session, kind, asset_id)
    if row is None:
        raise InvalidRequestError(
            f"{kind} {asset_id} has no coordinates, so no key whose grants could be reported")
    if body.synced_at > now + _MAX_SKEW:
        raise InvalidRequestError(
            f"the reported sync time {body.synced_at.isoformat()} is after the registry's "
            f"clock ({now.isoformat()})")
    row.grants_digest = body.grants_digest
    row.grants_synced_at = body.synced_at
    append_event(
        session, actor_id=actor.user_id, action=f"{kind}.grants", entity_type=kind,
        entity_id=asset_id,
        payload={"grants_digest": body.grants_digest, "synced_at": body.synced_at.isoformat()},
        now=now,
    )
    commit(session, f"{kind} {asset_id} grants")
    return grant_state(session, kind, asset)


def lagging_of_owner(
    session: Session, user_id: int, limit: int
) -> tuple[tuple[GrantState, ...], bool]:
    """The sealed assets of ``user_id`` whose grants lag their approvals (at most ``limit``),
    and whether the list was cut."""
    found: list[GrantState] = []
    kinds: Sequence[Kind] = ("dataset", "model")
    for kind in kinds:
        table, coords = _ASSETS[kind], _COORDS[kind]
        assets = cast("Sequence[Dataset | Model]", session.scalars(
            select(table).join(coords, coords.asset_id == table.id)
            .where(table.owner_id == user_id).order_by(table.id)
        ).all())
        for asset in assets:
            state = grant_state(session, kind, asset)
            if state.lagging:
                found.append(state)
            if len(found) > limit:
                return tuple(found[:limit]), True
    return tuple(found), False
