"""Datasets and models (metadata and digests only) and their confidential-computing coordinates.

Coordinates (KMS key name, storage URI, workload identity pool provider) are readable only by
the asset's owner and by parties of an approved association with it: the owner of a benchmark
in which the asset is approved, and the owners of assets of the other kind approved in that
same benchmark (the data owner needs the model's coordinates to launch a run).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, cast

from sqlalchemy import Row, Table, bindparam, exists, select
from sqlalchemy.orm import Session

from sealbench.server.audit import append_event
from sealbench.server.auth import Principal
from sealbench.server.errors import (
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
)
from sealbench.server.models import (
    Benchmark,
    Dataset,
    DatasetCoordinates,
    Model,
    ModelCoordinates,
)
from sealbench.server.schemas import CoordinatesUpdate, DatasetCreate, ModelCreate
from sealbench.server.services._common import PageOf, commit, flush, get_or_404, rows_page
from sealbench.server.services.associations import approved_pairs_subquery
from sealbench.server.services.budgets import join_group, registration_budget
from sealbench.server.services.dataset_grid import check_dataset_grid
from sealbench.server.services.fingerprints import record_fingerprints

__all__ = [
    "create_dataset",
    "create_model",
    "get_coordinates",
    "get_dataset",
    "get_model",
    "list_datasets",
    "list_models",
    "put_coordinates",
]

_DATASETS = cast(Table, Dataset.__table__)
#: whether the owner has a dataset of that name: a Core statement built once (through the ORM
#: this check cost a registration as much as its INSERT)
_DATASET_TAKEN = select(_DATASETS.c.id).where(
    _DATASETS.c.owner_id == bindparam("owner"), _DATASETS.c.name == bindparam("name")).limit(1)

Kind = Literal["dataset", "model"]
_ASSETS: dict[Kind, type[Dataset] | type[Model]] = {"dataset": Dataset, "model": Model}
_COORDS: dict[Kind, type[DatasetCoordinates] | type[ModelCoordinates]] = {
    "dataset": DatasetCoordinates,
    "model": ModelCoordinates,
}


def create_dataset(
    session: Session, actor: Principal, body: DatasetCreate, now: datetime
) -> Dataset:
    if session.execute(_DATASET_TAKEN, {"owner": actor.user_id, "name": body.name}).first():
        raise ConflictError(f"you already have a dataset named {body.name}")
    if body.prepared_for_id is not None:
        benchmark = session.get(Benchmark, body.prepared_for_id)
        if benchmark is None:
            raise InvalidRequestError(f"benchmark {body.prepared_for_id} does not exist")
        check_dataset_grid(benchmark, body.statistics, required=True)
    budget, group = registration_budget(session, actor, body, now)
    row = Dataset(
        owner_id=actor.user_id,
        name=body.name,
        digest=body.digest,
        case_count=body.case_count,
        statistics=dict(body.statistics),
        prepared_for_id=body.prepared_for_id,
        state="registered",
        created_at=now,
        budget_epsilon=budget.epsilon,
        budget_delta=budget.delta,
    )
    session.add(row)
    flush(session, f"dataset {body.name}")
    if group is not None:
        join_group(session, row, group)
    record_fingerprints(session, row, body.case_fingerprints or ())
    append_event(
        session,
        actor_id=actor.user_id,
        action="dataset.create",
        entity_type="dataset",
        entity_id=row.id,
        payload={"name": row.name, "digest": row.digest, "case_count": row.case_count,
                 # the privacy budget every later privacy.debit is checked against
                 "budget_epsilon": budget.epsilon, "budget_delta": budget.delta,
                 "budget_group": None if group is None else group.name,
                 "budget_group_id": None if group is None else group.id},
        now=now,
    )
    commit(session, f"dataset {body.name}")
    return row


def create_model(session: Session, actor: Principal, body: ModelCreate, now: datetime) -> Model:
    taken = select(Model.id).where(
        Model.owner_id == actor.user_id, Model.name == body.name, Model.version == body.version
    )
    if session.scalars(taken).first() is not None:
        raise ConflictError(f"you already have model {body.name} version {body.version}")
    row = Model(
        owner_id=actor.user_id,
        name=body.name,
        version=body.version,
        digest=body.digest,
        format=body.format,
        io_contract=dict(body.io_contract),
        state="registered",
        created_at=now,
    )
    session.add(row)
    flush(session, f"model {body.name} {body.version}")
    append_event(
        session,
        actor_id=actor.user_id,
        action="model.create",
        entity_type="model",
        entity_id=row.id,
        payload={"name": row.name, "version": row.version, "digest": row.digest},
        now=now,
    )
    commit(session, f"model {body.name} {body.version}")
    return row


def get_dataset(session: Session, dataset_id: int) -> Dataset:
    return get_or_404(session, Dataset, dataset_id, "dataset")


def get_model(session: Session, model_id: int) -> Model:
    return get_or_404(session, Model, model_id, "model")


def list_datasets(
    session: Session, *, owner_id: int | None, limit: int, offset: int
) -> PageOf[Row[Any]]:
    """Datasets in id order, as plain rows with the table's columns."""
    stmt = select(*Dataset.__table__.columns).order_by(Dataset.id)
    if owner_id is not None:
        stmt = stmt.where(Dataset.owner_id == owner_id)
    return rows_page(session, stmt, limit=limit, offset=offset)


def list_models(
    session: Session, *, owner_id: int | None, limit: int, offset: int
) -> PageOf[Row[Any]]:
    """Models in id order, as plain rows with the table's columns."""
    stmt = select(*Model.__table__.columns).order_by(Model.id)
    if owner_id is not None:
        stmt = stmt.where(Model.owner_id == owner_id)
    return rows_page(session, stmt, limit=limit, offset=offset)


def put_coordinates(
    session: Session,
    actor: Principal,
    kind: Kind,
    asset_id: int,
    body: CoordinatesUpdate,
    now: datetime,
) -> DatasetCoordinates | ModelCoordinates:
    """Create or replace an asset's coordinates; only its owner may."""
    asset = get_or_404(session, _ASSETS[kind], asset_id, kind, for_update=True)
    if asset.owner_id != actor.user_id:
        raise PermissionDeniedError(f"only the {kind}'s owner sets its coordinates")
    table = _COORDS[kind]
    row = _coordinates_row(session, kind, asset_id)
    if row is None:
        row = table(asset_id=asset_id, **body.model_dump(), updated_at=now)
        session.add(row)
    else:
        if (row.kms_key_name, row.wip_provider) != (body.kms_key_name, body.wip_provider):
            row.grants_digest = row.grants_synced_at = None  # a new key has no grants yet
        for name, value in body.model_dump().items():
            setattr(row, name, value)
        row.updated_at = now
    flush(session, f"{kind} {asset_id} coordinates")
    append_event(
        session,
        actor_id=actor.user_id,
        action=f"{kind}.coordinates",
        entity_type=kind,
        entity_id=asset_id,
        payload=body.model_dump(),
        now=now,
    )
    commit(session, f"{kind} {asset_id} coordinates")
    return row


def get_coordinates(
    session: Session, actor: Principal, kind: Kind, asset_id: int
) -> DatasetCoordinates | ModelCoordinates:
    asset = get_or_404(session, _ASSETS[kind], asset_id, kind)
    if asset.owner_id != actor.user_id and not _is_party(session, actor.user_id, kind, asset_id):
        raise PermissionDeniedError(
            f"{kind} coordinates are readable only by its owner and approved parties"
        )
    row = _coordinates_row(session, kind, asset_id)
    if row is None:
        raise NotFoundError(f"{kind} coordinates of", asset_id)
    return row


def _coordinates_row(
    session: Session, kind: Kind, asset_id: int
) -> DatasetCoordinates | ModelCoordinates | None:
    table = _COORDS[kind]
    row = session.scalars(select(table).where(table.asset_id == asset_id)).first()
    return cast("DatasetCoordinates | ModelCoordinates | None", row)


def _is_party(session: Session, user_id: int, kind: Kind, asset_id: int) -> bool:
    """Whether ``user_id`` owns a benchmark in which the asset is approved, or owns an asset of
    the other kind approved in such a benchmark."""
    mine = approved_pairs_subquery(kind)
    other_kind: Kind = "model" if kind == "dataset" else "dataset"
    theirs = approved_pairs_subquery(other_kind)
    other_table = _ASSETS[other_kind]
    as_benchmark_owner = exists(
        select(1)
        .select_from(mine)
        .join(Benchmark, Benchmark.id == mine.c.benchmark_id)
        .where(mine.c.asset_id == asset_id, Benchmark.owner_id == user_id)
    )
    as_other_owner = exists(
        select(1)
        .select_from(mine)
        .join(theirs, theirs.c.benchmark_id == mine.c.benchmark_id)
        .join(other_table, other_table.id == theirs.c.asset_id)
        .where(mine.c.asset_id == asset_id, other_table.owner_id == user_id)
    )
    return bool(session.scalar(select(as_benchmark_owner | as_other_owner)))
