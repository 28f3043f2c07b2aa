"""``/api/v1/inbox``: what waits for the caller, as far as the registry knows."""

from __future__ import annotations

from fastapi import APIRouter

from sealbench.server.deps import CurrentUser, RegistryDep, SessionDep
from sealbench.server.routers._common import ERRORS, in_thread
from sealbench.server.routers.assets import grants_status
from sealbench.server.routers.associations import association_public
from sealbench.server.schemas import (
    BenchmarkPublic,
    Inbox,
    InboxEvaluation,
    InboxLink,
)
from sealbench.server.services import inbox as inbox_service
from sealbench.server.services.benchmark_plugins import PluginLookup, release_terms
from sealbench.server.services.inbox import InboxData, PendingLink

__all__ = ["router"]

router = APIRouter(prefix="/inbox", tags=["inbox"], responses=ERRORS)


def _link(item: PendingLink, plugins: PluginLookup) -> InboxLink:
    benchmark, asset = item.benchmark, item.asset
    return InboxLink(
        association=association_public(item.link, item.kind),
        benchmark_name=benchmark.name,
        benchmark_version=benchmark.version,
        asset_name=asset.name,
        asset_version=getattr(asset, "version", None),
        asset_owner_id=asset.owner_id,
        benchmark_owner_id=benchmark.owner_id,
        benchmark_accept_experimental=benchmark.accept_experimental,
        release=release_terms(benchmark.metrics_version, plugins),
    )


def to_schema(data: InboxData, plugins: PluginLookup) -> Inbox:
    return Inbox(
        to_decide=tuple(_link(p, plugins) for p in data.to_decide),
        awaiting_others=tuple(_link(p, plugins) for p in data.awaiting_others),
        benchmarks_to_approve=tuple(
            BenchmarkPublic.model_validate(b, from_attributes=True)
            for b in data.benchmarks_to_approve
        ),
        evaluations=tuple(
            InboxEvaluation(
                benchmark_id=e.benchmark.id,
                benchmark_name=e.benchmark.name,
                benchmark_version=e.benchmark.version,
                dataset_id=e.dataset.id,
                dataset_name=e.dataset.name,
                model_id=e.model.id,
                model_name=e.model.name,
                model_version=e.model.version,
                result_id=e.result_id,
                benchmark_accept_experimental=e.benchmark.accept_experimental,
                release=release_terms(e.benchmark.metrics_version, plugins),
            )
            for e in data.evaluations
        ),
        limit=data.limit,
        truncated=data.truncated,
        syncs_needed=tuple(grants_status(s) for s in data.syncs_needed),
    )


@router.get("")
async def get_inbox(session: SessionDep, user: CurrentUser, registry: RegistryDep) -> Inbox:
    """Associations waiting for your decision, your requests waiting for the other side,
    benchmarks to approve (admins), the approved evaluations of your datasets with their
    latest verified result (None: not evaluated yet), and your sealed assets whose key grants
    lag their approvals (run the command each gives)."""
    return await in_thread(
        session, lambda: to_schema(inbox_service.inbox(session, user), registry.plugins))
