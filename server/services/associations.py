"""Benchmark↔dataset and benchmark↔model associations, with their whole history.

Rules: the benchmark must be approved; the asset's owner *requests*, the benchmark's owner
*invites*; whoever initiated can never approve or reject, the other side does; when the asset's
owner is also the benchmark's owner the link is approved at once; a rejected link can be
requested again. Once the benchmark's authority *closes* it, no link is requested, invited or
approved any more (pending ones can still be rejected or withdrawn). The asset's owner may
*withdraw* a pending or approved link at any time: nothing new runs on it (runs and result
submissions need an approved link, key grants follow the approved links), results already
verified stay and are marked, and it can be requested again like a rejected one. Every change
appends a revision (latest wins), so history is never lost.

**Exact releases only by knowing consent** (issue 25): a benchmark whose pin publishes exact,
non-private figures (:func:`publishes_exact`: its version ends in ``-exact``, or its plug-in
declares an exact release) takes a dataset only through a revision its owner wrote with
``exact_release_consent`` (the request, or the approval of an invitation); the benchmark owner's
approval of a consenting request carries the consent forward, and a result with an exact release
is accepted only while the dataset's current link holds it.

**A dataset joins only benchmarks of the plug-in it was prepared for**: a dataset registered as
prepared for a benchmark (``prepared_for_id``) is refused (422 naming both pins) by a benchmark
pinning another plug-in or another variant of its contract (grid), whatever the release
(``-exact``); the enclave would refuse its cases anyway, after its owner had consented.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Literal, cast

from sqlalchemy import Select, Subquery, and_, func, or_, select
from sqlalchemy.orm import Session

from sealbench.benchmarks.interface import EXACT_SUFFIX, POOLED_ONLY_SUFFIX, BenchmarkError
from sealbench.benchmarks.registry import load as load_plugin
from sealbench.server.audit import append_event
from sealbench.server.auth import Principal
from sealbench.server.errors import (
    ConflictError,
    InvalidRequestError,
    InvalidStateError,
    NotFoundError,
    PermissionDeniedError,
)
from sealbench.server.models import Benchmark, BenchmarkDataset, BenchmarkModel, Dataset, Model
from sealbench.server.services._common import PageOf, commit, flush, get_or_404, paged
from sealbench.server.services.benchmark_plugins import PluginLookup
from sealbench.server.services.dataset_grid import check_dataset_grid

__all__ = [
    "approved_pairs_subquery",
    "current_status",
    "decide",
    "exact_release_consented",
    "history",
    "is_approved",
    "list_current",
    "pending_links",
    "publishes_exact",
    "request",
    "withdraw",
    "withdrawn_pairs",
]

Kind = Literal["dataset", "model"]
Link = BenchmarkDataset | BenchmarkModel


def _table(kind: Kind) -> type[BenchmarkDataset] | type[BenchmarkModel]:
    return BenchmarkDataset if kind == "dataset" else BenchmarkModel


def _asset(session: Session, kind: Kind, asset_id: int) -> Dataset | Model:
    table: type[Dataset] | type[Model] = Dataset if kind == "dataset" else Model
    return get_or_404(session, table, asset_id, kind)


def _current_stmt(kind: Kind) -> Select[Link]:
    t = _table(kind)
    latest = (
        select(t.benchmark_id, t.asset_id, func.max(t.revision).label("rev"))
        .group_by(t.benchmark_id, t.asset_id)
        .subquery()
    )
    stmt = select(t).join(
        latest,
        and_(
            t.benchmark_id == latest.c.benchmark_id,
            t.asset_id == latest.c.asset_id,
            t.revision == latest.c.rev,
        ),
    )
    return cast("Select[Link]", stmt)


def approved_pairs_subquery(kind: Kind) -> Subquery:
    """(benchmark_id, asset_id) of every link whose latest revision is approved."""
    t = _table(kind)
    return (
        _current_stmt(kind)
        .where(t.status == "approved")
        .with_only_columns(t.benchmark_id, t.asset_id)
        .subquery()
    )


def _latest(session: Session, kind: Kind, benchmark_id: int, asset_id: int) -> Link | None:
    t = _table(kind)
    row = session.scalars(
        select(t)
        .where(t.benchmark_id == benchmark_id, t.asset_id == asset_id)
        .order_by(t.revision.desc())
        .limit(1)
    ).first()
    return cast("Link | None", row)


def is_approved(session: Session, kind: Kind, benchmark_id: int, asset_id: int) -> bool:
    latest = _latest(session, kind, benchmark_id, asset_id)
    return latest is not None and latest.status == "approved"


def current_status(session: Session, kind: Kind, benchmark_id: int, asset_id: int) -> str | None:
    """The pair's current status, or None when it was never linked."""
    latest = _latest(session, kind, benchmark_id, asset_id)
    return None if latest is None else latest.status


def withdrawn_pairs(
    session: Session, kind: Kind, benchmark_ids: Iterable[int]
) -> frozenset[tuple[int, int]]:
    """(benchmark_id, asset_id) of the links of ``benchmark_ids`` whose current revision is
    withdrawn (the results of those pairs are shown marked)."""
    wanted = sorted(set(benchmark_ids))
    if not wanted:
        return frozenset()
    t = _table(kind)
    stmt = (
        _current_stmt(kind)
        .where(t.status == "withdrawn", t.benchmark_id.in_(wanted))
        .with_only_columns(t.benchmark_id, t.asset_id)
    )
    return frozenset((int(b), int(a)) for b, a in session.execute(stmt).all())


def publishes_exact(benchmark: Benchmark, plugins: PluginLookup = load_plugin) -> bool:
    """Whether ``benchmark``'s pin publishes exact (non-private) figures: its version ends in
    ``-exact``, or its installed plug-in declares an exact release (a pin whose plug-in is not
    installed is judged by its name alone)."""
    ref = benchmark.metrics_version
    if ref.version.endswith(EXACT_SUFFIX):
        return True
    try:
        return plugins(ref).release_spec.exact
    except BenchmarkError:
        return False


def exact_release_consented(session: Session, benchmark_id: int, dataset_id: int) -> bool:
    """Whether the dataset's current link to the benchmark is approved with its owner's consent
    to exact releases."""
    latest = _latest(session, "dataset", benchmark_id, dataset_id)
    return (latest is not None and latest.status == "approved"
            and latest.exact_release_consent)


def _consent_needed(benchmark: Benchmark) -> InvalidRequestError:
    return InvalidRequestError(
        f"benchmark {benchmark.id} publishes EXACT figures (pin {benchmark.metrics_version}): "
        "each site's results are released without noise and without a privacy bound on what "
        "they reveal about a patient; its dataset's owner must consent explicitly "
        "(exact_release_consent: true; 'sealbench dataset associate' or 'sealbench association "
        "approve' with --consent-exact-release)")


def _base_pin(benchmark: Benchmark) -> str:
    """``benchmark``'s pin without the exact-release suffix: the plug-in and contract variant
    its datasets are prepared for (an exact release of the same contract takes the same data)."""
    ref = benchmark.metrics_version
    version = ref.version.removesuffix(POOLED_ONLY_SUFFIX)  # issue 41: the same data
    version = version[: -len(EXACT_SUFFIX)] if version.endswith(EXACT_SUFFIX) else version
    return f"{ref.name}/{version}"


def _refuse_other_plugin(session: Session, benchmark: Benchmark, dataset: Dataset) -> None:
    """422 when ``dataset`` was prepared for a benchmark pinning another plug-in or contract
    variant than ``benchmark``'s, naming both."""
    if dataset.prepared_for_id is None or dataset.prepared_for_id == benchmark.id:
        return
    prepared_for = session.get(Benchmark, dataset.prepared_for_id)
    if prepared_for is None or _base_pin(prepared_for) == _base_pin(benchmark):
        return
    raise InvalidRequestError(
        f"dataset {dataset.id} was prepared for benchmark {prepared_for.id} "
        f"({prepared_for.name}, plug-in {prepared_for.metrics_version}), but benchmark "
        f"{benchmark.id} ({benchmark.name}) takes data prepared for the plug-in "
        f"{benchmark.metrics_version}; prepare the raw cases for it ('sealbench dataset prepare "
        f"--benchmark {benchmark.id}') and register that dataset")


def _refuse_if_closed(benchmark: Benchmark) -> None:
    """A closed benchmark takes no new participant: no request, invitation or approval."""
    if benchmark.closed_at is not None:
        raise InvalidStateError(
            f"benchmark {benchmark.id} was closed to new associations on "
            f"{benchmark.closed_at:%Y-%m-%d}"
        )


def request(
    session: Session,
    actor: Principal,
    kind: Kind,
    benchmark_id: int,
    asset_id: int,
    now: datetime,
    *,
    exact_release_consent: bool = False,
    plugins: PluginLookup = load_plugin,
) -> Link:
    """Open a link (a request from the asset's owner, an invitation from the benchmark's); a
    dataset's owner joining a benchmark that :func:`publishes_exact` must consent."""
    benchmark = get_or_404(session, Benchmark, benchmark_id, "benchmark")
    asset = _asset(session, kind, asset_id)
    if actor.user_id == asset.owner_id:
        role = "asset_owner"
    elif actor.user_id == benchmark.owner_id:
        role = "benchmark_owner"
    else:
        raise PermissionDeniedError(
            f"only the {kind}'s owner or the benchmark's owner opens an association"
        )
    if benchmark.state != "approved":
        raise InvalidStateError(
            f"benchmark {benchmark.id} is {benchmark.state}; associations need an approved one"
        )
    _refuse_if_closed(benchmark)
    if isinstance(asset, Dataset):  # a dataset on another grid never joins the leaderboard
        _refuse_other_plugin(session, benchmark, asset)
        check_dataset_grid(benchmark, asset.statistics, required=False)
    latest = _latest(session, kind, benchmark_id, asset_id)
    if latest is not None and latest.status in ("pending", "approved"):
        raise ConflictError(
            f"{kind} {asset_id} is already {latest.status} in benchmark {benchmark_id}"
        )
    consent = False
    if kind == "dataset" and role == "asset_owner" and publishes_exact(benchmark, plugins):
        if not exact_release_consent:
            raise _consent_needed(benchmark)
        consent = True
    same_owner = asset.owner_id == benchmark.owner_id
    row = _table(kind)(
        benchmark_id=benchmark_id,
        asset_id=asset_id,
        revision=1 if latest is None else latest.revision + 1,
        status="approved" if same_owner else "pending",
        initiator_role=role,
        initiated_by_id=actor.user_id,
        actor_id=actor.user_id,
        exact_release_consent=consent,
        created_at=now,
    )
    session.add(row)
    flush(session, f"association of {kind} {asset_id}")
    _audit(session, actor, kind, row, "auto_approve" if same_owner else "request", now)
    commit(session, f"association of {kind} {asset_id}")
    return row


def decide(
    session: Session,
    actor: Principal,
    kind: Kind,
    benchmark_id: int,
    asset_id: int,
    *,
    approve: bool,
    now: datetime,
    exact_release_consent: bool = False,
    plugins: PluginLookup = load_plugin,
) -> Link:
    """Approve or reject a pending link; only the side that did not initiate it may. A
    dataset's owner approving an invitation to a benchmark that :func:`publishes_exact` must
    consent; the benchmark owner's approval carries the request's consent forward."""
    benchmark = get_or_404(session, Benchmark, benchmark_id, "benchmark")
    asset = _asset(session, kind, asset_id)
    latest = _latest(session, kind, benchmark_id, asset_id)
    if latest is None:
        raise NotFoundError(f"association of {kind}", asset_id)
    if actor.user_id == latest.initiated_by_id:
        raise PermissionDeniedError("the initiator of an association can never decide on it")
    deciding_owner = (
        benchmark.owner_id if latest.initiator_role == "asset_owner" else asset.owner_id
    )
    if actor.user_id != deciding_owner:
        other = "benchmark" if latest.initiator_role == "asset_owner" else kind
        raise PermissionDeniedError(f"only the {other}'s owner decides on this association")
    if latest.status != "pending":
        raise InvalidStateError(f"association is {latest.status}, expected pending")
    consent = latest.exact_release_consent
    if approve:
        _refuse_if_closed(benchmark)
        if (kind == "dataset" and latest.initiator_role == "benchmark_owner"
                and publishes_exact(benchmark, plugins)):
            if not exact_release_consent:
                raise _consent_needed(benchmark)
            consent = True
    row = _table(kind)(
        benchmark_id=benchmark_id,
        asset_id=asset_id,
        revision=latest.revision + 1,
        status="approved" if approve else "rejected",
        initiator_role=latest.initiator_role,
        initiated_by_id=latest.initiated_by_id,
        actor_id=actor.user_id,
        exact_release_consent=consent and approve,
        created_at=now,
    )
    session.add(row)
    flush(session, f"association of {kind} {asset_id}")
    _audit(session, actor, kind, row, "approve" if approve else "reject", now)
    commit(session, f"association of {kind} {asset_id}")
    return row


def withdraw(
    session: Session,
    actor: Principal,
    kind: Kind,
    benchmark_id: int,
    asset_id: int,
    now: datetime,
) -> Link:
    """The asset's owner takes a pending or approved link back (see the module docstring)."""
    get_or_404(session, Benchmark, benchmark_id, "benchmark")
    asset = _asset(session, kind, asset_id)
    if actor.user_id != asset.owner_id:
        raise PermissionDeniedError(f"only the {kind}'s owner withdraws its association")
    latest = _latest(session, kind, benchmark_id, asset_id)
    if latest is None:
        raise NotFoundError(f"association of {kind}", asset_id)
    if latest.status not in ("pending", "approved"):
        raise InvalidStateError(
            f"association is {latest.status}; only a pending or approved one can be withdrawn"
        )
    row = _table(kind)(
        benchmark_id=benchmark_id,
        asset_id=asset_id,
        revision=latest.revision + 1,
        status="withdrawn",
        initiator_role=latest.initiator_role,
        initiated_by_id=latest.initiated_by_id,
        actor_id=actor.user_id,
        created_at=now,
    )
    session.add(row)
    flush(session, f"association of {kind} {asset_id}")
    _audit(session, actor, kind, row, "withdraw", now, previous=latest.status)
    commit(session, f"association of {kind} {asset_id}")
    return row


def pending_links(
    session: Session,
    kind: Kind,
    user_id: int,
    *,
    side: Literal["decider", "initiator"],
    limit: int,
) -> list[tuple[Link, Benchmark, Dataset | Model]]:
    """Pending links whose decision waits for ``user_id`` (``decider``: the side that did not
    initiate, as :func:`decide` rules) or that ``user_id`` opened (``initiator``), oldest first,
    with their benchmark and asset; at most ``limit`` rows."""
    t = _table(kind)
    asset: type[Dataset] | type[Model] = Dataset if kind == "dataset" else Model
    stmt = (
        _current_stmt(kind)
        .join(Benchmark, Benchmark.id == t.benchmark_id)
        .join(asset, asset.id == t.asset_id)
        .where(t.status == "pending")
        .add_columns(Benchmark, asset)
        .order_by(t.created_at, t.id)
        .limit(limit)
    )
    if side == "initiator":
        stmt = stmt.where(t.initiated_by_id == user_id)
    else:
        stmt = stmt.where(
            t.initiated_by_id != user_id,
            or_(
                and_(t.initiator_role == "asset_owner", Benchmark.owner_id == user_id),
                and_(t.initiator_role == "benchmark_owner", asset.owner_id == user_id),
            ),
        )
    return [(row[0], row[1], row[2]) for row in session.execute(stmt).all()]


def list_current(
    session: Session,
    kind: Kind,
    benchmark_id: int,
    *,
    status: str | None,
    limit: int,
    offset: int,
) -> PageOf[Link]:
    get_or_404(session, Benchmark, benchmark_id, "benchmark")
    t = _table(kind)
    stmt = _current_stmt(kind).where(t.benchmark_id == benchmark_id).order_by(t.asset_id)
    if status is not None:
        stmt = stmt.where(t.status == status)
    return paged(session, stmt, limit=limit, offset=offset)


def history(
    session: Session, kind: Kind, benchmark_id: int, asset_id: int, *, limit: int, offset: int
) -> PageOf[Link]:
    get_or_404(session, Benchmark, benchmark_id, "benchmark")
    t = _table(kind)
    stmt = select(t).where(t.benchmark_id == benchmark_id, t.asset_id == asset_id)
    return paged(
        session, cast("Select[Link]", stmt.order_by(t.revision)), limit=limit, offset=offset
    )


def _audit(
    session: Session,
    actor: Principal,
    kind: Kind,
    row: Link,
    verb: str,
    now: datetime,
    *,
    previous: str | None = None,
) -> None:
    payload: dict[str, object] = {
        "revision": row.revision,
        "status": row.status,
        "role": row.initiator_role,
    }
    if row.exact_release_consent:  # logged, so that anyone can check who consented when
        payload["exact_release_consent"] = True
    if previous is not None:
        payload["previous"] = previous
    append_event(
        session,
        actor_id=actor.user_id,
        action=f"association.{verb}",
        entity_type=f"benchmark_{kind}",
        entity_id=f"{row.benchmark_id}:{row.asset_id}",
        payload=payload,
        now=now,
    )
