"""``sealbench association``: the links between a benchmark and datasets or models: list,
approve, reject, withdraw. Each command parses options, calls
:mod:`sealbench.client.registry.api` or :mod:`~sealbench.client.registry.governance`, and
renders."""

from __future__ import annotations

from typing import Annotated, Final, cast

import typer

from sealbench.client.cli.common import (
    ConsentExactOpt,
    JsonOpt,
    ProfileOpt,
    emit_json,
    one_of,
    out,
    session,
    table,
    warn_experimental,
    warn_privacy_cost,
)
from sealbench.client.errors import ConfigError
from sealbench.client.registry import governance
from sealbench.client.registry.api import AssetKind, RegistryClient
from sealbench.client.views.render import consent_plan
from sealbench.server.schemas import AssociationPublic, AssociationStatus, BenchmarkPublic

__all__ = ["association_app"]

association_app = typer.Typer(
    help="Links between a benchmark and datasets/models: list, approve, reject, withdraw."
)

_STATUSES: Final = ("pending", "approved", "rejected", "withdrawn")


def association_status(value: str | None) -> AssociationStatus | None:
    return cast("AssociationStatus | None", one_of(value, _STATUSES, "--status"))


def asset_kinds(value: str | None) -> tuple[AssetKind, ...]:
    if value is None:
        return ("dataset", "model")
    if value not in ("dataset", "model"):
        raise ConfigError(f"--kind must be dataset or model, received {value!r}")
    return (cast("AssetKind", value),)


def _assoc_rows(title: str, rows: list[AssociationPublic]) -> None:
    table(
        title,
        ("benchmark", "kind", "asset", "status", "revision", "initiated by", "last actor"),
        ((a.benchmark_id, a.asset_kind, a.asset_id, a.status, a.revision, a.initiated_by_id,
          a.actor_id) for a in rows),
    )


def _target(dataset: int | None, model: int | None) -> tuple[AssetKind, int]:
    if (dataset is None) == (model is None):
        raise ConfigError("name exactly one of --dataset and --model")
    return ("dataset", dataset) if dataset is not None else ("model", model)  # type: ignore[return-value]


@association_app.command("ls")
def association_ls(
    benchmark: Annotated[int, typer.Option(help="benchmark id")],
    kind: Annotated[str | None, typer.Option(help="dataset or model (default both)")] = None,
    status: Annotated[
        str | None, typer.Option(help="pending, approved, rejected or withdrawn")
    ] = None,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Current state of every link of a benchmark."""
    kinds: tuple[AssetKind, ...] = asset_kinds(kind)
    with session(profile) as s:
        rows = [
            a for k in kinds
            for a in s.client.list_associations(k, benchmark, association_status(status))
        ]
    emit_json(rows) if json_out else _assoc_rows(f"associations of benchmark {benchmark}", rows)


def _decide(
    approve: bool, benchmark: int, dataset: int | None, model: int | None, profile: str | None,
    *, consent_exact: bool = False,
) -> None:
    kind, asset = _target(dataset, model)

    def consent(client: RegistryClient, bench: BenchmarkPublic, owned: int | None) -> None:
        warn_experimental(bench)
        if owned is not None:
            # the data owner consents: it reads what each run costs its dataset's budget
            warn_privacy_cost(client, bench, owned, consent_exact=consent_exact)
            consent_plan(out(), client, bench, owned)

    with session(profile) as s:
        done = governance.decide_association(s.client, kind, benchmark, asset, approve=approve,
                                             consent_exact=consent_exact, consent=consent)
    row = done.row
    if done.already:
        out().print(f"{kind} {asset} in benchmark {benchmark} is already {row.status} "
                    f"(revision {row.revision}); nothing changed")
        return
    out().print(f"{kind} {asset} in benchmark {benchmark}: {row.status}")


@association_app.command("approve")
def association_approve(
    benchmark: Annotated[int, typer.Option(help="benchmark id")],
    dataset: Annotated[int | None, typer.Option(help="dataset id")] = None,
    model: Annotated[int | None, typer.Option(help="model id")] = None,
    consent_exact_release: ConsentExactOpt = False,
    profile: ProfileOpt = None,
) -> None:
    """Approve a pending link (only the side that did not initiate it may). A dataset's owner
    reads what each run will publish about its cases first; a benchmark publishing exact
    figures is approved only with --consent-exact-release."""
    _decide(True, benchmark, dataset, model, profile, consent_exact=consent_exact_release)


@association_app.command("reject")
def association_reject(
    benchmark: Annotated[int, typer.Option(help="benchmark id")],
    dataset: Annotated[int | None, typer.Option(help="dataset id")] = None,
    model: Annotated[int | None, typer.Option(help="model id")] = None,
    profile: ProfileOpt = None,
) -> None:
    """Reject a pending link (only the side that did not initiate it may)."""
    _decide(False, benchmark, dataset, model, profile)


@association_app.command("withdraw")
def association_withdraw(
    benchmark: Annotated[int, typer.Option(help="benchmark id")],
    dataset: Annotated[int | None, typer.Option(help="your dataset id")] = None,
    model: Annotated[int | None, typer.Option(help="your model id")] = None,
    profile: ProfileOpt = None,
) -> AssociationPublic:
    """Withdraw your dataset or model from a benchmark (a pending or approved link): no new run
    uses it, your next 'policy sync' revokes the key grants, verified results stay (marked)."""
    kind, asset = _target(dataset, model)
    with session(profile) as s:
        row = s.client.withdraw_association(kind, benchmark, asset)
    out().print(f"{kind} {asset} withdrawn from benchmark {benchmark}; run 'sealbench policy sync "
                f"--{kind} {asset}' to revoke the key grants it had")
    return row
