"""``/api/v1/datasets`` and ``/api/v1/models``: register, list, read, each asset's
confidential-computing coordinates (PUT by its owner; GET by its owner or approved parties),
the grants its owner's last ``policy sync`` wrote (PUT by its owner; GET, like the coordinates,
says whether they lag its approvals), and a dataset's privacy budget (GET, read like the
dataset itself)."""

from __future__ import annotations

from fastapi import APIRouter

from sealbench.server.deps import (
    CurrentUser,
    Limit,
    NowDep,
    Offset,
    RegistryDep,
    SessionDep,
)
from sealbench.server.models import DatasetCoordinates, ModelCoordinates
from sealbench.server.routers._common import ERRORS, IdPath, OptionalId, in_thread, to_page
from sealbench.server.schemas import (
    BudgetDebitPublic,
    CoordinatesPublic,
    CoordinatesUpdate,
    DatasetBudget,
    DatasetCreate,
    DatasetPublic,
    GrantsReport,
    GrantsStatus,
    ModelCreate,
    ModelPublic,
    Page,
    ReleaseCostPublic,
)
from sealbench.server.services import assets, budgets, grants

__all__ = ["datasets_router", "models_router"]

datasets_router = APIRouter(prefix="/datasets", tags=["datasets"], responses=ERRORS)
models_router = APIRouter(prefix="/models", tags=["models"], responses=ERRORS)


def _dataset(row: object) -> DatasetPublic:
    return DatasetPublic.model_validate(row, from_attributes=True)


def _model(row: object) -> ModelPublic:
    return ModelPublic.model_validate(row, from_attributes=True)


def _coords(kind: str, row: DatasetCoordinates | ModelCoordinates) -> CoordinatesPublic:
    return CoordinatesPublic(
        asset_kind="dataset" if kind == "dataset" else "model",
        asset_id=row.asset_id,
        kms_key_name=row.kms_key_name,
        storage_uri=row.storage_uri,
        wip_provider=row.wip_provider,
        updated_at=row.updated_at,
    )


@datasets_router.post("", status_code=201)
async def register_dataset(
    body: DatasetCreate, session: SessionDep, user: CurrentUser, now: NowDep
) -> DatasetPublic:
    return await in_thread(
        session, lambda: _dataset(assets.create_dataset(session, user, body, now))
    )


@datasets_router.get("")
async def list_datasets(
    session: SessionDep,
    _user: CurrentUser,
    owner_id: OptionalId = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> Page[DatasetPublic]:
    return await in_thread(
        session,
        lambda: to_page(
            assets.list_datasets(session, owner_id=owner_id, limit=limit, offset=offset),
            _dataset,
            Page[DatasetPublic],
        ),
    )


@datasets_router.get("/{dataset_id}")
async def get_dataset(dataset_id: IdPath, session: SessionDep, _user: CurrentUser) -> DatasetPublic:
    return await in_thread(session, lambda: _dataset(assets.get_dataset(session, dataset_id)))


def _cost(ledger: budgets.Ledger, cost: budgets.ReleaseCost) -> ReleaseCostPublic:
    rho = cost.spec.rho
    return ReleaseCostPublic(
        benchmark_id=cost.benchmark.id,
        benchmark_name=cost.benchmark.name,
        benchmark_version=cost.benchmark.version,
        association=cost.association,
        exact=cost.spec.exact,
        rho=rho,
        epsilon=None if rho is None else cost.spec.epsilon,
        delta=None if rho is None else cost.spec.delta,
        epsilon_at_budget_delta=None if rho is None else ledger.epsilon(rho),
        releases_left=None if rho is None else ledger.releases_left(rho),
    )


def _budget(read: budgets.BudgetReadout) -> DatasetBudget:
    ledger = read.ledger
    return DatasetBudget(
        dataset_id=read.dataset_id,
        group=None if read.group is None else read.group.name,
        datasets=read.datasets,
        budget_epsilon=ledger.budget.epsilon,
        budget_delta=ledger.budget.delta,
        budget_rho=ledger.budget.rho,
        spent_rho=ledger.spent_rho,
        spent_epsilon=ledger.epsilon(ledger.spent_rho),
        remaining_rho=ledger.remaining_rho,
        remaining_epsilon=ledger.epsilon(ledger.remaining_rho),
        releases=sum(1 for d in read.debits if not d.exact),
        exact_releases=sum(1 for d in read.debits if d.exact),
        debits=tuple(BudgetDebitPublic.model_validate(d, from_attributes=True)
                     for d in read.debits),
        costs=tuple(_cost(ledger, c) for c in read.costs),
    )


@datasets_router.get("/{dataset_id}/budget")
async def get_dataset_budget(
    dataset_id: IdPath, session: SessionDep, _user: CurrentUser, registry: RegistryDep
) -> DatasetBudget:
    """The dataset's privacy budget (its budget group's when it is in one), what its accepted
    releases spent, every debit with its transparency-log event, and what one release of each
    benchmark it is associated with costs. Readable by every signed-in user, like the dataset:
    budgets and debits are privacy-loss figures, never results."""
    return await in_thread(
        session, lambda: _budget(budgets.readout(session, dataset_id, registry.plugins)))


@datasets_router.put("/{dataset_id}/coordinates")
async def put_dataset_coordinates(
    dataset_id: IdPath,
    body: CoordinatesUpdate,
    session: SessionDep,
    user: CurrentUser,
    now: NowDep,
) -> CoordinatesPublic:
    return await in_thread(
        session,
        lambda: _coords(
            "dataset", assets.put_coordinates(session, user, "dataset", dataset_id, body, now)
        ),
    )


@datasets_router.get("/{dataset_id}/coordinates")
async def get_dataset_coordinates(
    dataset_id: IdPath, session: SessionDep, user: CurrentUser
) -> CoordinatesPublic:
    return await in_thread(
        session,
        lambda: _coords("dataset", assets.get_coordinates(session, user, "dataset", dataset_id)),
    )


@models_router.post("", status_code=201)
async def register_model(
    body: ModelCreate, session: SessionDep, user: CurrentUser, now: NowDep
) -> ModelPublic:
    return await in_thread(session, lambda: _model(assets.create_model(session, user, body, now)))


@models_router.get("")
async def list_models(
    session: SessionDep,
    _user: CurrentUser,
    owner_id: OptionalId = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> Page[ModelPublic]:
    return await in_thread(
        session,
        lambda: to_page(
            assets.list_models(session, owner_id=owner_id, limit=limit, offset=offset),
            _model,
            Page[ModelPublic],
        ),
    )


@models_router.get("/{model_id}")
async def get_model(model_id: IdPath, session: SessionDep, _user: CurrentUser) -> ModelPublic:
    return await in_thread(session, lambda: _model(assets.get_model(session, model_id)))


@models_router.put("/{model_id}/coordinates")
async def put_model_coordinates(
    model_id: IdPath,
    body: CoordinatesUpdate,
    session: SessionDep,
    user: CurrentUser,
    now: NowDep,
) -> CoordinatesPublic:
    return await in_thread(
        session,
        lambda: _coords(
            "model", assets.put_coordinates(session, user, "model", model_id, body, now)
        ),
    )


@models_router.get("/{model_id}/coordinates")
async def get_model_coordinates(
    model_id: IdPath, session: SessionDep, user: CurrentUser
) -> CoordinatesPublic:
    return await in_thread(
        session, lambda: _coords("model", assets.get_coordinates(session, user, "model", model_id))
    )


def grants_status(state: grants.GrantState) -> GrantsStatus:
    return GrantsStatus(
        asset_kind=state.kind,
        asset_id=state.asset.id,
        asset_name=state.asset.name,
        owner_id=state.asset.owner_id,
        sealed=state.coordinates is not None,
        required_digest=state.required,
        required_count=state.required_count,
        reported_digest=state.reported,
        synced_at=state.synced_at,
        lagging=state.lagging,
        command=state.command,
    )


_REPORT_DOC = ("Record the digest of the grant set your 'sealbench policy sync' wrote to the "
               "asset's key, and when (only the asset's owner; the asset must be sealed).")
_STATUS_DOC = ("Whether the grants the asset's owner last reported are the ones its current "
               "approvals require ('lagging': a 'sealbench policy sync' is due); readable by "
               "the owner and approved parties, like the coordinates.")


@datasets_router.put("/{dataset_id}/grants", description=_REPORT_DOC)
async def put_dataset_grants(
    dataset_id: IdPath, body: GrantsReport, session: SessionDep, user: CurrentUser, now: NowDep
) -> GrantsStatus:
    return await in_thread(session, lambda: grants_status(
        grants.report(session, user, "dataset", dataset_id, body, now)))


@datasets_router.get("/{dataset_id}/grants", description=_STATUS_DOC)
async def get_dataset_grants(
    dataset_id: IdPath, session: SessionDep, user: CurrentUser
) -> GrantsStatus:
    return await in_thread(session, lambda: grants_status(
        grants.status(session, user, "dataset", dataset_id)))


@models_router.put("/{model_id}/grants", description=_REPORT_DOC)
async def put_model_grants(
    model_id: IdPath, body: GrantsReport, session: SessionDep, user: CurrentUser, now: NowDep
) -> GrantsStatus:
    return await in_thread(session, lambda: grants_status(
        grants.report(session, user, "model", model_id, body, now)))


@models_router.get("/{model_id}/grants", description=_STATUS_DOC)
async def get_model_grants(
    model_id: IdPath, session: SessionDep, user: CurrentUser
) -> GrantsStatus:
    return await in_thread(session, lambda: grants_status(
        grants.status(session, user, "model", model_id)))
