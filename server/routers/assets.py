"""``/api/v1/datasets`` and ``/api/v1/models``: register, list, read, each asset's
confidential-computing coordinates (PUT by its owner; GET by its owner or approved parties),
the grants its owner's last ``policy sync`` wrote (PUT by its owner; GET, like the coordinates,
says whether they lag its approvals), and a dataset's privacy budget (GET, read like the
dataset itself).

No ``from __future__ import annotations`` here: the routes of :func:`asset_router` are
annotated with the schema classes of their kind, which FastAPI must see as classes."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from fastapi import APIRouter, Path
from pydantic import BaseModel
from sqlalchemy.orm import Session

from sealbench.server.auth import Principal
from sealbench.server.deps import (
    CurrentUser,
    Limit,
    NowDep,
    Offset,
    RegistryDep,
    SessionDep,
)
from sealbench.server.models import DatasetCoordinates, ModelCoordinates, PrivacyDebit
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
from sealbench.server.services import assets, budgets, grants, pool_authorizations
from sealbench.server.services._common import PageOf

__all__ = ["datasets_router", "models_router"]

_REPORT_DOC = ("Record the digest of the grant set your 'sealbench policy sync' wrote to the "
               "asset's key, and when (only the asset's owner; the asset must be sealed).")
_STATUS_DOC = ("Whether the grants the asset's owner last reported are the ones its current "
               "approvals require ('lagging': a 'sealbench policy sync' is due); readable by "
               "the owner and approved parties, like the coordinates.")

CreateT = TypeVar("CreateT", bound=BaseModel)
PublicT = TypeVar("PublicT", bound=BaseModel)


@dataclass(frozen=True)
class AssetRoutes(Generic[CreateT, PublicT]):
    """What differs between ``/datasets`` and ``/models``: the kind, the wire schemas and the
    service functions. :func:`asset_router` builds the same routes from it for both kinds."""

    kind: Literal["dataset", "model"]
    create_schema: type[CreateT]
    public_schema: type[PublicT]
    create: Callable[[Session, Principal, CreateT, datetime], object]
    list_rows: Callable[..., PageOf[Any]]
    get: Callable[[Session, int], object]


def _coords(kind: str, row: DatasetCoordinates | ModelCoordinates) -> CoordinatesPublic:
    return CoordinatesPublic(
        asset_kind="dataset" if kind == "dataset" else "model",
        asset_id=row.asset_id,
        kms_key_name=row.kms_key_name,
        storage_uri=row.storage_uri,
        wip_provider=row.wip_provider,
        updated_at=row.updated_at,
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


def asset_router(spec: AssetRoutes[CreateT, PublicT]) -> APIRouter:
    """``/{kind}s``: register, list, read, the coordinates and the grants of one asset kind.
    The path parameter keeps its kind's name (``{dataset_id}``, ``{model_id}``) in the URL
    templates and the OpenAPI document."""
    kind = spec.kind
    router = APIRouter(prefix=f"/{kind}s", tags=[f"{kind}s"], responses=ERRORS)
    one = f"/{{{kind}_id}}"
    AssetId = Annotated[int, Path(alias=f"{kind}_id", ge=1, le=2**31 - 1)]  # noqa: N806
    Create = spec.create_schema  # noqa: N806
    Public = spec.public_schema  # noqa: N806

    def public(row: object) -> PublicT:
        return Public.model_validate(row, from_attributes=True)

    @router.post("", status_code=201, name=f"register_{kind}", response_model=Public)
    async def register(body: Create, session: SessionDep, user: CurrentUser,  # type: ignore[valid-type]
                       now: NowDep) -> PublicT:
        return await in_thread(session, lambda: public(spec.create(session, user, body, now)))

    @router.get("", name=f"list_{kind}s", response_model=Page[Public])  # type: ignore[valid-type]
    async def list_assets(
        session: SessionDep,
        _user: CurrentUser,
        owner_id: OptionalId = None,
        limit: Limit = 50,
        offset: Offset = 0,
    ) -> Page[PublicT]:
        return await in_thread(
            session,
            lambda: to_page(
                spec.list_rows(session, owner_id=owner_id, limit=limit, offset=offset),
                public,
                Page[Public],  # type: ignore[valid-type]
            ),
        )

    @router.get(one, name=f"get_{kind}", response_model=Public)
    async def get(asset_id: AssetId, session: SessionDep, _user: CurrentUser) -> PublicT:
        return await in_thread(session, lambda: public(spec.get(session, asset_id)))

    @router.put(f"{one}/coordinates", name=f"put_{kind}_coordinates")
    async def put_coordinates(
        asset_id: AssetId,
        body: CoordinatesUpdate,
        session: SessionDep,
        user: CurrentUser,
        now: NowDep,
    ) -> CoordinatesPublic:
        return await in_thread(session, lambda: _coords(
            kind, assets.put_coordinates(session, user, kind, asset_id, body, now)))

    @router.get(f"{one}/coordinates", name=f"get_{kind}_coordinates")
    async def get_coordinates(
        asset_id: AssetId, session: SessionDep, user: CurrentUser
    ) -> CoordinatesPublic:
        return await in_thread(session, lambda: _coords(
            kind, assets.get_coordinates(session, user, kind, asset_id)))

    @router.put(f"{one}/grants", name=f"put_{kind}_grants", description=_REPORT_DOC)
    async def put_grants(
        asset_id: AssetId,
        body: GrantsReport,
        session: SessionDep,
        user: CurrentUser,
        now: NowDep,
    ) -> GrantsStatus:
        return await in_thread(session, lambda: grants_status(
            grants.report(session, user, kind, asset_id, body, now)))

    @router.get(f"{one}/grants", name=f"get_{kind}_grants", description=_STATUS_DOC)
    async def get_grants(
        asset_id: AssetId, session: SessionDep, user: CurrentUser
    ) -> GrantsStatus:
        return await in_thread(session, lambda: grants_status(
            grants.status(session, user, kind, asset_id)))

    return router


datasets_router = asset_router(AssetRoutes(
    "dataset", DatasetCreate, DatasetPublic,
    assets.create_dataset, assets.list_datasets, assets.get_dataset))
models_router = asset_router(AssetRoutes(
    "model", ModelCreate, ModelPublic,
    assets.create_model, assets.list_models, assets.get_model))


# A dataset's privacy budget: the one route only datasets have.
def _cost(ledger: budgets.Ledger, cost: budgets.ReleaseCost) -> ReleaseCostPublic:
    spec = cost.spec
    loss = spec.loss  # a Laplace release has no rho but costs its epsilon (issue 41)
    return ReleaseCostPublic(
        benchmark_id=cost.benchmark.id,
        benchmark_name=cost.benchmark.name,
        benchmark_version=cost.benchmark.version,
        association=cost.association,
        exact=spec.exact,
        rho=spec.rho,
        epsilon=None if loss.empty else spec.epsilon,
        delta=None if loss.empty or spec.mechanism == "laplace" else spec.delta,
        epsilon_at_budget_delta=None if loss.empty else ledger.cost_epsilon(loss),
        releases_left=None if loss.empty else ledger.releases_left(loss),
    )


def _debit(d: PrivacyDebit, pools: Mapping[int, tuple[str, int | None]]) -> BudgetDebitPublic:
    """One debit, naming its release (issue 41): per-site (the result) or pooled (the pool
    authorization's id and the release it produced)."""
    pool_id, released = (None, None) if d.pool_authorization_id is None else pools.get(
        d.pool_authorization_id, (None, None))
    return BudgetDebitPublic.model_validate({
        "release": "per-site" if d.result_id is not None else "pooled",
        "result_id": d.result_id,
        "pooled_release_id": d.pooled_release_id if released is None else released,
        "pool_authorization_id": d.pool_authorization_id, "pool_id": pool_id,
        "dataset_id": d.dataset_id, "benchmark_id": d.benchmark_id, "exact": d.exact,
        "rho": d.rho, "laplace": tuple(d.laplace or ()),
        "epsilon": d.epsilon, "delta": d.delta, "audit_seq": d.audit_seq,
        "created_at": d.created_at})


def _budget(read: budgets.BudgetReadout, pools: Mapping[int, tuple[str, int | None]]
            ) -> DatasetBudget:
    ledger = read.ledger
    return DatasetBudget(
        dataset_id=read.dataset_id,
        group=None if read.group is None else read.group.name,
        datasets=read.datasets,
        budget_epsilon=ledger.budget.epsilon,
        budget_delta=ledger.budget.delta,
        budget_rho=ledger.budget.rho,
        spent_rho=ledger.spent_rho,
        spent_epsilon=ledger.spent_epsilon,
        remaining_rho=ledger.remaining_rho,
        remaining_epsilon=ledger.epsilon(ledger.remaining_rho),
        releases=sum(1 for d in read.debits if not d.exact),
        exact_releases=sum(1 for d in read.debits if d.exact),
        debits=tuple(_debit(d, pools) for d in read.debits),
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
    def answer() -> DatasetBudget:
        read = budgets.readout(session, dataset_id, registry.plugins)
        return _budget(read, pool_authorizations.debit_releases(session, [
            d.pool_authorization_id for d in read.debits if d.pool_authorization_id is not None]))

    return await in_thread(session, answer)
