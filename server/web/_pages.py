"""Benchmark pages: the list, one benchmark (contract, metrics, image, participants), its
leaderboard with the charts, and one result's attestation details.

Every page calls the same service functions as the API's routers, with the viewer as the
acting principal, so it shows exactly what the API would return to that user: a result the API
refuses is absent from the leaderboard and answers 403 here too.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import jwt
from fastapi import APIRouter, Query, Request
from sqlalchemy.orm import Session
from starlette.responses import Response

from sealbench.platforms.platform import attests_hardware
from sealbench.server.auth import Principal
from sealbench.server.models import Benchmark, BenchmarkDataset, BenchmarkModel, Result
from sealbench.server.routers._common import IdPath
from sealbench.server.services import assets, associations, benchmarks, pooling, results
from sealbench.server.services._common import PageOf
from sealbench.server.services.benchmark_plugins import release_terms
from sealbench.server.web._charts import build_charts
from sealbench.server.web._state import DashboardState, registry_of, render_page
from sealbench.server.web._views import BoardEntry, View, build_board, summary_counts

__all__ = ["Participant", "all_pages", "benchmark_pages", "owner_label"]

PAGE = 50
#: Most rows a page reads through a paged service before it stops (and says so).
ROW_CAP = 2000
#: Claims of a result's attestation token shown on its page (the registry verified the token's
#: signature and these claims when the result was submitted).
_COUNT_LABELS = {"n_cases": "Cases", "n_scored": "Scored", "n_failed": "Failed"}
_CLAIMS = ("iss", "aud", "hwmodel", "swname", "swversion", "dbgstat", "secboot", "iat", "exp")


def owner_label(owner_id: int, viewer: Principal) -> str:
    """Users are shown by id (the API does not publish other users' emails)."""
    return "you" if owner_id == viewer.user_id else f"user #{owner_id}"


def all_pages(fetch: Any, cap: int = ROW_CAP) -> tuple[list[Any], bool]:
    """Read every page of a paged service call (``fetch(limit, offset)``) up to ``cap`` rows;
    returns the rows and whether the cap cut them short."""
    rows: list[Any] = []
    offset: int | None = 0
    while offset is not None and len(rows) < cap:
        page: PageOf[Any] = fetch(200, offset)
        rows.extend(page.items)
        offset = page.next_offset
    return rows[:cap], offset is not None


@dataclass(frozen=True)
class Participant:
    kind: Literal["dataset", "model"]
    asset_id: int
    label: str
    owner: str
    status: str
    revision: int
    initiator_role: str
    since: Any
    #: The viewer decides on this pending link (the dashboard shows approve / reject).
    viewer_decides: bool = False


def _participants(
    session: Session, viewer: Principal, benchmark: Benchmark
) -> tuple[list[Participant], bool]:
    benchmark_id = benchmark.id
    out: list[Participant] = []
    truncated = False
    for kind in ("dataset", "model"):

        def fetch(limit: int, offset: int, kind: Any = kind) -> PageOf[Any]:
            return associations.list_current(
                session, kind, benchmark_id, status=None, limit=limit, offset=offset
            )

        links, cut = all_pages(fetch)
        truncated = truncated or cut
        for link in links:
            assert isinstance(link, BenchmarkDataset | BenchmarkModel)
            if kind == "dataset":
                d = assets.get_dataset(session, link.asset_id)
                label, owner_id = d.name, d.owner_id
            else:
                m = assets.get_model(session, link.asset_id)
                label, owner_id = f"{m.name} {m.version}", m.owner_id
            out.append(
                Participant(
                    kind=kind,
                    asset_id=link.asset_id,
                    label=label,
                    owner=owner_label(owner_id, viewer),
                    status=link.status,
                    revision=link.revision,
                    initiator_role=link.initiator_role.replace("_", " "),
                    since=link.created_at,
                    viewer_decides=link.status == "pending"
                    and link.initiated_by_id != viewer.user_id
                    and viewer.user_id
                    == (benchmark.owner_id if link.initiator_role == "asset_owner" else owner_id),
                )
            )
    return out, truncated


def _token_claims(token: str) -> dict[str, Any]:
    """Display-only reading of a stored token's claims: the registry verified its signature,
    issuer and bindings before storing the result, and nothing here is trusted for access."""
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return {}
    shown = {k: _claim_text(k, claims[k]) for k in _CLAIMS if k in claims}
    submods = claims.get("submods")
    container = submods.get("container") if isinstance(submods, dict) else None
    if isinstance(container, dict) and "image_reference" in container:
        shown["image_reference"] = _claim_text("image_reference", container["image_reference"])
    return shown


def _claim_text(name: str, value: Any) -> str:
    if name in ("iat", "exp", "nbf") and isinstance(value, int) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        except (OverflowError, OSError, ValueError):
            return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ", ".join(str(item) for item in value)
    return str(value)


def _plan_lines(session: Session, bench: Benchmark, plugins: Any,
                participants: list[Participant]) -> list[str]:
    """What the board will read (issue 41, :func:`sealbench.benchmarks.planning.plan`): at
    the approved datasets' count and median size, else at 3 sites x 50 cases; empty when the
    plug-in is not installed here."""
    from statistics import median

    from sealbench.benchmarks.interface import BenchmarkError
    from sealbench.benchmarks.planning import plan

    try:
        plugin = plugins(bench.metrics_version)
    except (BenchmarkError, ValueError):
        return []
    sizes = [assets.get_dataset(session, p.asset_id).case_count for p in participants
             if p.kind == "dataset" and p.status == "approved"]
    sites, cases = (len(sizes), max(int(median(sizes)), 1)) if sizes else (3, 50)
    return plan(plugin, sites=sites, cases=cases,
                in_tee=bench.aggregator_image_digest is not None).lines()


def benchmark_pages(state: DashboardState) -> APIRouter:
    router = APIRouter()

    @router.get("/")
    async def benchmark_list(
        request: Request, offset: int = Query(0, ge=0, le=1_000_000_000)
    ) -> Response:
        def build(session: Session, viewer: Principal) -> tuple[str, dict[str, Any]]:
            page = benchmarks.list_page(session, state=None, limit=PAGE, offset=offset)
            rows = [(b, owner_label(b.owner_id, viewer)) for b in page.items]
            return "benchmarks.html", {"rows": rows, "page": page, "nav": "benchmarks"}

        return await render_page(state, request, build)

    @router.get("/benchmarks/{benchmark_id}")
    async def benchmark_detail(request: Request, benchmark_id: IdPath) -> Response:
        plugins = registry_of(request).plugins

        def build(session: Session, viewer: Principal) -> tuple[str, dict[str, Any]]:
            bench = benchmarks.get(session, benchmark_id)
            participants, truncated = _participants(session, viewer, bench)
            reference = (
                None
                if bench.reference_model_id is None
                else assets.get_model(session, bench.reference_model_id)
            )
            return "benchmark.html", {
                "b": bench,
                "owner": owner_label(bench.owner_id, viewer),
                "participants": participants,
                "truncated": truncated,
                "reference": reference,
                "terms": release_terms(bench.metrics_version, plugins),
                "plan": _plan_lines(session, bench, plugins, participants),
                "nav": "benchmarks",
            }

        return await render_page(state, request, build)

    @router.get("/benchmarks/{benchmark_id}/leaderboard")
    async def leaderboard(request: Request, benchmark_id: IdPath) -> Response:
        def build(session: Session, viewer: Principal) -> tuple[str, dict[str, Any]]:
            bench = benchmarks.get(session, benchmark_id)
            rows = results.leaderboard(session, viewer, benchmark_id)
            withdrawn = results.withdrawn_sides(session, (result for result, _, _ in rows))
            entries = [
                BoardEntry(
                    result_id=result.id,
                    model_id=model.id,
                    model_label=f"{model.name} {model.version}",
                    dataset_id=dataset.id,
                    dataset_label=dataset.name,
                    summary=result.summary,
                    created_at=result.created_at,
                    withdrawn=withdrawn.get(result.id, ()),
                )
                for result, model, dataset in rows
            ]
            view = View.of(bench.metrics_version)
            board = build_board(entries, view)
            return "leaderboard.html", {
                "b": bench,
                "board": board,
                "view": view,
                "charts": build_charts(board),
                "is_authority": bench.owner_id == viewer.user_id,
                "nav": "benchmarks",
            }

        return await render_page(state, request, build)

    @router.get("/results/{result_id}")
    async def result_detail(request: Request, result_id: IdPath) -> Response:
        def build(session: Session, viewer: Principal) -> tuple[str, dict[str, Any]]:
            row: Result = results.get(session, viewer, result_id)
            bench: Benchmark = benchmarks.get(session, row.benchmark_id)
            model = assets.get_model(session, row.model_id)
            dataset = assets.get_dataset(session, row.dataset_id)
            view = View.of(bench.metrics_version)
            table = [
                (group or "all", [(m, unit, view.stat(row.summary, group, m))
                                  for m, unit in view.metrics])
                for group in (view.groups or (None,))
            ]
            return "result.html", {
                "r": row,
                "b": bench,
                "model": model,
                "dataset": dataset,
                "table": table,
                "metrics": view.metrics,
                "counts": [(_COUNT_LABELS[k], v) for k, v in summary_counts(row.summary).items()],
                "release": view.release(row.summary),
                "claims": _token_claims(row.attestation_token),
                "image_matches": row.image_digest == bench.image_digest,
                # only the verifier of a platform that is not a mock attests a confidential run
                "mock_tee": not attests_hardware(row.token_issuer),
                "withdrawn": results.withdrawn_sides(session, [row]).get(row.id, ()),
                "submitter": owner_label(row.submitted_by_id, viewer),
                "nav": "benchmarks",
            }

        return await render_page(state, request, build)

    @router.get("/benchmarks/{benchmark_id}/pooled-releases/{release_id}")
    async def pooled_release_detail(request: Request, benchmark_id: IdPath,
                                    release_id: IdPath) -> Response:
        """A TEE-pooled release (issue 27), as a result's page shows a result: its attestation,
        the sites it pooled and its public figures."""

        def build(session: Session, viewer: Principal) -> tuple[str, dict[str, Any]]:
            bench, row = pooling.get_release(session, viewer, benchmark_id, release_id)
            model = assets.get_model(session, row.model_id)
            aggregates = row.release.get("aggregates") if isinstance(row.release, dict) else {}
            summary = aggregates if isinstance(aggregates, dict) else {}
            view = View.of(bench.metrics_version)
            table = [
                (group or "all", [(m, unit, view.stat(summary, group, m))
                                  for m, unit in view.metrics])
                for group in (view.groups or (None,))
            ]
            return "pooled_release.html", {
                "p": row,
                "b": bench,
                "model": model,
                "inputs": pooling.inputs_of(session, [row])[row.id],
                "pool_id": str(row.release.get("pool_id", "")),
                "summary": summary,
                "table": table,
                "metrics": view.metrics,
                "release": view.release(summary),
                "claims": _token_claims(row.attestation_token),
                "image_matches": row.image_digest == bench.aggregator_image_digest,
                "sealed_digest": "sha256:" + hashlib.sha256(row.sealed_release).hexdigest(),
                "mock_tee": not attests_hardware(row.token_issuer),
                "submitter": owner_label(row.submitted_by_id, viewer),
                "nav": "benchmarks",
            }

        return await render_page(state, request, build)

    return router
