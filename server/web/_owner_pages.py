"""Owner pages: the viewer's own datasets and models, and one dataset or model (its associations
in every benchmark, with their history, its coordinates when the viewer may read them, and the
results the viewer may read). The audit trail is :mod:`sealbench.server.web._audit_page`.

As on the API: asset metadata is readable by anyone signed in; coordinates by the owner and
approved parties only; results by the dataset's owner and the benchmark's owner only. Each rule
is the service's, called with the viewer as the principal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from fastapi import APIRouter, Request
from sqlalchemy.orm import Session
from starlette.responses import Response

from sealbench.server.auth import Principal
from sealbench.server.errors import NotFoundError, PermissionDeniedError
from sealbench.server.models import Result
from sealbench.server.routers._common import IdPath
from sealbench.server.services import assets, associations, benchmarks, results
from sealbench.server.services._common import PageOf
from sealbench.server.web._pages import all_pages, owner_label
from sealbench.server.web._state import DashboardState, render_page
from sealbench.server.web._views import View

__all__ = ["AssetLink", "ResultRow", "owner_pages"]


@dataclass(frozen=True)
class AssetLink:
    """The current state of the asset's link with one benchmark, and how it got there."""

    benchmark_id: int
    benchmark_label: str
    status: str
    history: tuple[Any, ...]


def _links(session: Session, kind: Literal["dataset", "model"], asset_id: int) -> list[AssetLink]:
    def fetch(limit: int, offset: int) -> PageOf[Any]:
        return benchmarks.list_page(session, state=None, limit=limit, offset=offset)

    out: list[AssetLink] = []
    for bench in all_pages(fetch)[0]:
        revisions, _ = all_pages(
            lambda limit, offset, b=bench.id: associations.history(
                session, kind, b, asset_id, limit=limit, offset=offset
            )
        )
        if revisions:
            out.append(
                AssetLink(
                    benchmark_id=bench.id,
                    benchmark_label=f"{bench.name} {bench.version}",
                    status=revisions[-1].status,
                    history=tuple(revisions),
                )
            )
    return out


@dataclass(frozen=True)
class ResultRow:
    result: Result
    benchmark_label: str
    counterpart_label: str
    #: The benchmark's headline and secondary figures (see :class:`View`) with their labels.
    headline: float | None
    secondary: float | None
    headline_label: str = ""
    secondary_label: str = ""


def _visible_results(
    session: Session, viewer: Principal, *, dataset_id: int | None, model_id: int | None
) -> tuple[list[ResultRow], bool]:
    rows, cut = all_pages(
        lambda limit, offset: results.list_page(
            session, viewer, benchmark_id=None, limit=limit, offset=offset
        )
    )
    picked = [
        r
        for r in rows
        if (dataset_id is None or r.dataset_id == dataset_id)
        and (model_id is None or r.model_id == model_id)
    ]
    picked.sort(key=lambda r: r.id, reverse=True)
    labels: dict[tuple[str, int], str] = {}

    views: dict[int, View] = {}

    def view_of(benchmark_id: int) -> View:
        if benchmark_id not in views:
            views[benchmark_id] = View.of(benchmarks.get(session, benchmark_id).metrics_version)
        return views[benchmark_id]

    def label(kind: str, ident: int) -> str:
        if (kind, ident) not in labels:
            if kind == "benchmark":
                b = benchmarks.get(session, ident)
                labels[kind, ident] = f"{b.name} {b.version}"
            elif kind == "model":
                m = assets.get_model(session, ident)
                labels[kind, ident] = f"{m.name} {m.version}"
            else:
                labels[kind, ident] = assets.get_dataset(session, ident).name
        return labels[kind, ident]

    return [
        ResultRow(
            result=r,
            benchmark_label=label("benchmark", r.benchmark_id),
            counterpart_label=label("model", r.model_id)
            if dataset_id is not None
            else label("dataset", r.dataset_id),
            headline=view_of(r.benchmark_id).value(r.summary, view_of(r.benchmark_id).headline),
            secondary=view_of(r.benchmark_id).value(r.summary,
                                                    view_of(r.benchmark_id).secondary),
            headline_label=view_of(r.benchmark_id).label(view_of(r.benchmark_id).headline),
            secondary_label=view_of(r.benchmark_id).label(view_of(r.benchmark_id).secondary),
        )
        for r in picked
    ], cut


def _coordinates(
    session: Session, viewer: Principal, kind: Literal["dataset", "model"], asset_id: int
) -> tuple[Any, str | None]:
    try:
        return assets.get_coordinates(session, viewer, kind, asset_id), None
    except PermissionDeniedError:
        return None, "readable only by the owner and parties of an approved association"
    except NotFoundError:
        return None, "not set yet"


def owner_pages(state: DashboardState) -> APIRouter:
    router = APIRouter()

    @router.get("/mine")
    async def mine(request: Request) -> Response:
        def build(session: Session, viewer: Principal) -> tuple[str, dict[str, Any]]:
            datasets, cut_d = all_pages(
                lambda limit, offset: assets.list_datasets(
                    session, owner_id=viewer.user_id, limit=limit, offset=offset
                )
            )
            models, cut_m = all_pages(
                lambda limit, offset: assets.list_models(
                    session, owner_id=viewer.user_id, limit=limit, offset=offset
                )
            )
            return "mine.html", {
                "datasets": datasets,
                "models": models,
                "truncated": cut_d or cut_m,
                "nav": "mine",
            }

        return await render_page(state, request, build)

    def asset_page(kind: Literal["dataset", "model"]) -> Any:
        async def page(request: Request, asset_id: IdPath) -> Response:
            def build(session: Session, viewer: Principal) -> tuple[str, dict[str, Any]]:
                if kind == "dataset":
                    asset: Any = assets.get_dataset(session, asset_id)
                    label = asset.name
                else:
                    asset = assets.get_model(session, asset_id)
                    label = f"{asset.name} {asset.version}"
                coords, coords_note = _coordinates(session, viewer, kind, asset_id)
                shown, cut = _visible_results(
                    session,
                    viewer,
                    dataset_id=asset_id if kind == "dataset" else None,
                    model_id=asset_id if kind == "model" else None,
                )
                return "asset.html", {
                    "kind": kind,
                    "a": asset,
                    "label": label,
                    "owner": owner_label(asset.owner_id, viewer),
                    "is_owner": asset.owner_id == viewer.user_id,
                    "links": _links(session, kind, asset_id),
                    "coords": coords,
                    "coords_note": coords_note,
                    "results": shown,
                    "truncated": cut,
                    "nav": "mine",
                }

            return await render_page(state, request, build)

        return page

    router.add_api_route("/datasets/{asset_id}", asset_page("dataset"), methods=["GET"])
    router.add_api_route("/models/{asset_id}", asset_page("model"), methods=["GET"])

    return router
