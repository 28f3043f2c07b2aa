"""``/api/v1/benchmarks/{id}/datasets`` and ``…/models``: request or invite, approve, reject,
withdraw (the asset's owner), list the current links and one link's history."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

from fastapi import APIRouter, Query

from sealbench.server.deps import (
    CurrentUser,
    Limit,
    NowDep,
    Offset,
    RegistryDep,
    SessionDep,
)
from sealbench.server.routers._common import ERRORS, IdPath, in_thread, to_page
from sealbench.server.schemas import (
    AssociationCreate,
    AssociationDecision,
    AssociationPublic,
    AssociationStatus,
    Page,
)
from sealbench.server.services import associations
from sealbench.server.services.associations import Link

__all__ = ["association_public", "router"]

router = APIRouter(prefix="/benchmarks", tags=["associations"], responses=ERRORS)


def association_public(row: Link, kind: Literal["dataset", "model"]) -> AssociationPublic:
    """One revision of a link as the API answers it."""
    return AssociationPublic(
        id=row.id,
        benchmark_id=row.benchmark_id,
        asset_kind=kind,
        asset_id=row.asset_id,
        revision=row.revision,
        status=row.status,  # type: ignore[arg-type]
        initiator_role=row.initiator_role,  # type: ignore[arg-type]
        initiated_by_id=row.initiated_by_id,
        actor_id=row.actor_id,
        exact_release_consent=row.exact_release_consent,
        created_at=row.created_at,
    )


def _public(kind: Literal["dataset", "model"]) -> Callable[[Link], AssociationPublic]:
    return lambda row: association_public(row, kind)


def _routes(kind: Literal["dataset", "model"], plural: str) -> None:
    convert = _public(kind)

    @router.post(f"/{{benchmark_id}}/{plural}", status_code=201, name=f"request_{kind}")
    async def request(
        benchmark_id: IdPath,
        body: AssociationCreate,
        session: SessionDep,
        user: CurrentUser,
        registry: RegistryDep,
        now: NowDep,
    ) -> AssociationPublic:
        """The asset's owner requests, the benchmark's owner invites. A dataset's owner joining
        a benchmark whose pin ends in '-exact' (exact, non-private figures) must send
        ``exact_release_consent: true``."""
        return await in_thread(
            session,
            lambda: convert(
                associations.request(
                    session, user, kind, benchmark_id, body.asset_id, now,
                    exact_release_consent=body.exact_release_consent, plugins=registry.plugins)
            ),
        )

    @router.get(f"/{{benchmark_id}}/{plural}", name=f"list_{plural}")
    async def list_current(
        benchmark_id: IdPath,
        session: SessionDep,
        _user: CurrentUser,
        status: AssociationStatus | None = Query(default=None),  # noqa: B008
        limit: Limit = 50,
        offset: Offset = 0,
    ) -> Page[AssociationPublic]:
        return await in_thread(
            session,
            lambda: to_page(
                associations.list_current(
                    session, kind, benchmark_id, status=status, limit=limit, offset=offset
                ),
                convert,
                Page[AssociationPublic],
            ),
        )

    @router.get(f"/{{benchmark_id}}/{plural}/{{asset_id}}/history", name=f"{kind}_history")
    async def history(
        benchmark_id: IdPath,
        asset_id: IdPath,
        session: SessionDep,
        _user: CurrentUser,
        limit: Limit = 50,
        offset: Offset = 0,
    ) -> Page[AssociationPublic]:
        return await in_thread(
            session,
            lambda: to_page(
                associations.history(
                    session, kind, benchmark_id, asset_id, limit=limit, offset=offset
                ),
                convert,
                Page[AssociationPublic],
            ),
        )

    for verb, approve in (("approve", True), ("reject", False)):
        router.add_api_route(
            f"/{{benchmark_id}}/{plural}/{{asset_id}}/{verb}",
            _decider(kind, approve, convert),
            methods=["POST"],
            name=f"{verb}_{kind}",
            response_model=AssociationPublic,
        )

    @router.post(f"/{{benchmark_id}}/{plural}/{{asset_id}}/withdraw", name=f"withdraw_{kind}")
    async def withdraw(
        benchmark_id: IdPath,
        asset_id: IdPath,
        session: SessionDep,
        user: CurrentUser,
        now: NowDep,
    ) -> AssociationPublic:
        """The asset's owner takes a pending or approved link back: no new run or result on
        it, key grants drop out at the next policy sync, verified results stay (marked)."""
        return await in_thread(
            session,
            lambda: convert(
                associations.withdraw(session, user, kind, benchmark_id, asset_id, now)
            ),
        )


def _decider(
    kind: Literal["dataset", "model"], approve: bool, convert: Callable[[Link], AssociationPublic]
) -> Callable[..., Awaitable[AssociationPublic]]:
    async def decide(
        benchmark_id: IdPath,
        asset_id: IdPath,
        session: SessionDep,
        user: CurrentUser,
        registry: RegistryDep,
        now: NowDep,
        body: AssociationDecision | None = None,
    ) -> AssociationPublic:
        consent = body is not None and body.exact_release_consent
        return await in_thread(
            session,
            lambda: convert(
                associations.decide(
                    session, user, kind, benchmark_id, asset_id, approve=approve, now=now,
                    exact_release_consent=consent, plugins=registry.plugins)
            ),
        )

    return decide


_routes("dataset", "datasets")
_routes("model", "models")
