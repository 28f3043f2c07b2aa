"""``sealbench profile|login|whoami|benchmark|association|audit``: the commands that only talk to
the registry. Each parses options, calls :mod:`sealbench.client.api` or
:mod:`sealbench.client.workflows`, and renders."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from sealbench.client import workflows
from sealbench.client._cli_audit import audit_app, audit_verify, parse_key, pin_profile_log
from sealbench.client._cli_common import (
    JsonOpt,
    ProfileOpt,
    emit_json,
    log,
    out,
    session,
    table,
    user_label,
)
from sealbench.client.api import AssetKind, RegistryClient
from sealbench.client.config import Profile, ProfileStore, registry_url
from sealbench.client.errors import (
    AuthenticationFailed,
    ClientError,
    ConfigError,
    TransparencyLogError,
)
from sealbench.server.schemas import AssociationPublic, BenchmarkPublic

__all__ = [
    "association_app",
    "audit_app",
    "audit_verify",
    "benchmark_app",
    "login",
    "profile_app",
    "whoami",
]

profile_app = typer.Typer(help="Registry accounts on this machine (stored with mode 0600).")
benchmark_app = typer.Typer(
    help="Benchmarks: publish, approve, close, read results and leaderboards."
)
association_app = typer.Typer(
    help="Links between a benchmark and datasets/models: list, approve, reject, withdraw."
)


def _store() -> ProfileStore:
    return ProfileStore.from_environment(os.environ)


# -- profile -----------------------------------------------------------------------------------


@profile_app.command("add")
def profile_add(
    name: Annotated[str, typer.Argument(help="a name for this account, e.g. hospital-a")],
    server: Annotated[str, typer.Option(help="registry URL, e.g. https://registry.example.org")],
    token: Annotated[
        str | None,
        typer.Option(help="API token from the registry operator (prompted when omitted)"),
    ] = None,
    mock_tee: Annotated[
        Path | None,
        typer.Option(help="state directory of a running 'sealbench mock-tee up'"),
    ] = None,
    use: Annotated[bool, typer.Option("--use/--no-use", help="make it the current profile")] = True,
    log_key: Annotated[
        str | None,
        typer.Option(metavar="KEY",
                     help="the registry's transparency-log key, as 'sealbench-server key show' "
                     "prints it (default: the key the registry publishes now, pinned)"),
    ] = None,
    witness: Annotated[
        list[str] | None,
        typer.Option(metavar="KEY",
                     help="a witness key ('sealbench audit witness' prints it) that must have "
                     "cosigned the log you are shown; repeat for several"),
    ] = None,
) -> None:
    """Add (or replace) a profile; it becomes the current one unless --no-use. The registry is
    asked whether it accepts the token (a refusal is a warning: the profile is saved) and its
    log key is pinned: every checkpoint you are shown later must be signed by it."""
    url = _server_option(server)
    if token is None:
        token = typer.prompt("API token", hide_input=True)
    store = _store()
    before = dict(store.names()).get(name)
    profile = Profile(
        server=url,
        token=token or None,
        mock_tee=mock_tee.resolve() if mock_tee else None,
        log_key=parse_key(log_key, "--log-key").to_string() if log_key else None,
        witnesses=tuple(parse_key(w, "--witness").to_string() for w in witness or ()),
    )
    store.add(name, profile, make_current=use)
    out().print(f"profile {name} saved ({url}){' and in use' if use else ''}")
    if token:
        _warn_unless_accepted(url, token)
        _pin_log_key(store, name, replaced=before is not None and (
            before.server, before.log_key) != (profile.server, profile.log_key))


def _pin_log_key(store: ProfileStore, name: str, *, replaced: bool) -> None:
    try:
        pinned = pin_profile_log(store, name, replaced=replaced)
    except AuthenticationFailed:
        return  # already warned about the token
    except ClientError as exc:
        if isinstance(exc, TransparencyLogError):  # the log itself failed: never a warning
            raise
        log.warning("could not pin the registry's log key (%s); it is pinned on first use",
                    exc)
        return
    if pinned is not None:
        out().print(f"pinned the registry's transparency-log key {pinned.label} (compare it "
                    "with 'sealbench-server key show' on the registry)")


def _server_option(server: str) -> str:
    try:
        return registry_url(server)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--server'") from None


def _warn_unless_accepted(url: str, token: str) -> None:
    """Ask the registry who the token is; say so when it is refused or unreachable."""
    try:
        with RegistryClient.connect(url, token) as client:
            me = client.me()
    except AuthenticationFailed:
        log.warning(
            "the registry at %s did not accept this token; fix it with 'sealbench login "
            "--token ...'",
            url,
        )
    except ClientError as exc:
        log.warning("could not check the token with the registry at %s: %s", url, exc)
    else:
        out().print(f"the registry accepts it: signed in as {me.email} (user {me.id})")


@profile_app.command("use")
def profile_use(name: Annotated[str, typer.Argument(help="profile name")]) -> None:
    """Make NAME the current profile."""
    _store().use(name)
    out().print(f"now using profile {name}")


@profile_app.command("ls")
def profile_ls(json_out: JsonOpt = False) -> None:
    """List profiles (tokens are never shown)."""
    store = _store()
    current = store.current()
    rows = [
        {
            "name": name,
            "current": name == current,
            "server": p.server,
            "token": "set" if p.token else "missing",
            "mock_tee": str(p.mock_tee) if p.mock_tee else None,
        }
        for name, p in store.names()
    ]
    if json_out:
        emit_json(rows)
        return
    table(
        f"profiles in {store.path}",
        ("", "name", "server", "token", "mock TEE"),
        (("*" if r["current"] else "", r["name"], r["server"], r["token"], r["mock_tee"])
         for r in rows),
    )


@profile_app.command("rm")
def profile_rm(name: Annotated[str, typer.Argument(help="profile name")]) -> None:
    """Remove a profile (its keys and run records stay on disk)."""
    _store().remove(name)
    out().print(f"profile {name} removed")


# -- login / whoami ----------------------------------------------------------------------------


def login(
    token: Annotated[
        str | None, typer.Option(help="API token (prompted when omitted)", show_default=False)
    ] = None,
    server: Annotated[
        str | None, typer.Option(help="registry URL (needed when the profile is new)")
    ] = None,
    profile: ProfileOpt = None,
) -> None:
    """Store a token in a profile, after checking the registry accepts it."""
    store = _store()
    name = profile or store.current() or "default"
    known = dict(store.names())
    url = _server_option(server) if server else (known[name].server if name in known else "")
    if not url:
        raise ConfigError(
            f"profile {name!r} does not exist yet", hint="pass --server URL to create it"
        )
    if token is None:
        token = typer.prompt("API token", hide_input=True)
    with RegistryClient.connect(url, token) as client:
        me = client.me()
    mock = known[name].mock_tee if name in known else None
    same = name in known and known[name].server == url  # keep the log key pinned for it
    store.add(name, Profile(server=url, token=token, mock_tee=mock,
                            log_key=known[name].log_key if same else None,
                            witnesses=known[name].witnesses if same else ()),
              make_current=True)
    out().print(f"signed in to {url} as {me.email} (user {me.id}); profile {name} saved")


def whoami(profile: ProfileOpt = None, json_out: JsonOpt = False) -> None:
    """Show the active profile, the registry and the account it signs in as."""
    with session(profile) as s:
        me = s.client.me()
        version = s.client.version()
    if json_out:
        emit_json({"profile": s.profile.name, "server": s.profile.server, "user": me,
                   "server_version": version})
        return
    admin = " (admin)" if me.is_admin else ""
    out().print(f"profile {s.profile.name}: {me.email}{admin}, user {me.id}")
    out().print(f"registry {s.profile.server} (sealbench {version.version}, API {version.api})")


# -- benchmark ---------------------------------------------------------------------------------


def _benchmark_rows(rows: tuple[BenchmarkPublic, ...], me: int) -> None:
    table(
        "benchmarks",
        ("id", "name", "version", "state", "owner", "metrics", "image digest"),
        ((b.id, b.name, b.version, b.state + ("" if b.closed_at is None else ", closed"),
          user_label(b.owner_id, me), b.metrics_version, b.image_digest[:19] + "…")
         for b in rows),
    )


@benchmark_app.command("ls")
def benchmark_ls(
    state: Annotated[
        str | None, typer.Option(help="pending, approved, rejected or retired")
    ] = None,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """List benchmarks."""
    with session(profile) as s:
        rows = s.client.list_benchmarks(workflows.benchmark_state(state))
        me = s.client.me().id
    emit_json(rows) if json_out else _benchmark_rows(rows, me)


@benchmark_app.command("show")
def benchmark_show(
    benchmark_id: Annotated[int, typer.Argument(help="benchmark id")],
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show one benchmark with its data contract and metrics spec."""
    with session(profile) as s:
        b = s.client.get_benchmark(benchmark_id)
    if json_out:
        emit_json(b)
        return
    console = out()
    console.print(f"benchmark {b.id}: {b.name} {b.version} [{b.state}]")
    console.print(b.description)
    console.print(f"evaluation image {b.image_reference}\n  digest {b.image_digest}")
    reference = "-" if b.reference_model_id is None else b.reference_model_id
    console.print(f"metrics {b.metrics_version}; reference model {reference}")
    if b.closed_at is not None:
        console.print(f"closed to new associations since {b.closed_at:%Y-%m-%d %H:%M} UTC "
                      f"(by user {b.closed_by_id})")
    shape = b.data_contract.get("shape")
    console.print(f"data contract: modalities {b.data_contract.get('modalities')}, grid {shape}")


@benchmark_app.command("create")
def benchmark_create(
    definition: Annotated[
        str,
        typer.Option(help="'brats' for the shipped BraTS benchmark, or a definition JSON file"),
    ] = "brats",
    tee: Annotated[
        str,
        typer.Option(help="take the image digest of this TEE backend's evaluation image"),
    ] = "mock",
    image_reference: Annotated[
        str | None, typer.Option(help="evaluation image reference (overrides --tee)")
    ] = None,
    image_digest: Annotated[
        str | None, typer.Option(help="evaluation image digest sha256:… (overrides --tee)")
    ] = None,
    reference_model: Annotated[
        int | None, typer.Option(help="registry id of the reference model")
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="publish under this name (a variant of the definition)")
    ] = None,
    version: Annotated[
        str | None, typer.Option(help="publish as this version (a variant of the definition)")
    ] = None,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> BenchmarkPublic:
    """Publish a benchmark (an admin must approve it before anyone can join). A variant needs no
    Python: 'sealbench benchmark definition export brats > my.json', edit it, then
    'benchmark create --definition my.json', or rename the shipped one with --name/--version."""
    body = workflows.benchmark_body(
        workflows.load_benchmark_definition(definition, name=name, version=version),
        image=workflows.evaluation_image(tee, image_reference, image_digest),
        reference_model_id=reference_model,
    )
    with session(profile) as s:
        created = s.client.create_benchmark(body)
    if json_out:
        emit_json(created)
        return created
    out().print(f"benchmark {created.id} created: {created.name} {created.version} "
                f"[{created.state}]; an admin approves it with "
                f"'sealbench benchmark approve {created.id}'")
    return created


definition_app = typer.Typer(help="Benchmark definitions: export one to start a variant.")
benchmark_app.add_typer(definition_app, name="definition")


@definition_app.command("export")
def definition_export(
    definition: Annotated[
        str, typer.Argument(help="'brats' (the shipped definition) or a definition JSON file")
    ] = "brats",
) -> None:
    """Print a benchmark definition as JSON (redirect it to a file, edit it, and publish it
    with 'sealbench benchmark create --definition FILE')."""
    loaded = workflows.load_benchmark_definition(definition)
    typer.echo(loaded.model_dump_json(indent=2))


@benchmark_app.command("approve")
def benchmark_approve(
    benchmark_id: Annotated[int, typer.Argument(help="benchmark id")],
    profile: ProfileOpt = None,
) -> BenchmarkPublic:
    """Approve a pending benchmark (registry admins only)."""
    with session(profile) as s:
        b = s.client.approve_benchmark(benchmark_id)
    out().print(f"benchmark {b.id} is {b.state}")
    return b


@benchmark_app.command("close")
def benchmark_close(
    benchmark_id: Annotated[int, typer.Argument(help="benchmark id")],
    profile: ProfileOpt = None,
) -> BenchmarkPublic:
    """Close an approved benchmark to new associations (its owner or an admin): no request,
    invitation or approval gets in any more; approved datasets and models keep running."""
    with session(profile) as s:
        b = s.client.close_benchmark(benchmark_id)
    out().print(f"benchmark {b.id} is closed to new associations; its "
                "approved datasets and models keep running and submitting results")
    return b


@benchmark_app.command("results")
def benchmark_results(
    benchmark_id: Annotated[int, typer.Argument(help="benchmark id")],
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Verified results of a benchmark (aggregates only; per-case values stay with hospitals)."""
    with session(profile) as s:
        rows = s.client.list_results(benchmark_id)
    if json_out:
        emit_json(rows)
        return
    table(
        f"verified results of benchmark {benchmark_id}",
        ("id", "dataset", "model", "cases", "Dice WT", "Dice TC", "Dice ET", "issuer", "at",
         "withdrawn"),
        ((r.id, r.dataset_id, r.model_id, workflows.summary_cases(r.summary),
          *workflows.dice_cells(r.summary), r.token_issuer,
          r.created_at.strftime("%Y-%m-%d %H:%M"), ", ".join(r.withdrawn) or "-")
         for r in rows),
    )


@benchmark_app.command("leaderboard")
def benchmark_leaderboard(
    benchmark_id: Annotated[int, typer.Argument(help="benchmark id")],
    metric: Annotated[str, typer.Option(help="dice, hd95, lesion_dice, lesion_hd95, …")] = "dice",
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Models x datasets: the mean of METRIC over WT, TC and ET of each latest verified result."""
    with session(profile) as s:
        board = workflows.leaderboard(s.client, benchmark_id, metric)
    if json_out:
        emit_json(board.to_json())
        return
    workflows.print_leaderboard(out(), board)


# -- association -------------------------------------------------------------------------------


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
    kinds: tuple[AssetKind, ...] = workflows.asset_kinds(kind)
    with session(profile) as s:
        rows = [
            a for k in kinds
            for a in s.client.list_associations(k, benchmark, workflows.association_status(status))
        ]
    emit_json(rows) if json_out else _assoc_rows(f"associations of benchmark {benchmark}", rows)


def _decide(
    approve: bool, benchmark: int, dataset: int | None, model: int | None, profile: str | None
) -> None:
    kind, asset = _target(dataset, model)
    with session(profile) as s:
        row = s.client.decide_association(kind, benchmark, asset, approve=approve)
    out().print(f"{kind} {asset} in benchmark {benchmark}: {row.status}")


@association_app.command("approve")
def association_approve(
    benchmark: Annotated[int, typer.Option(help="benchmark id")],
    dataset: Annotated[int | None, typer.Option(help="dataset id")] = None,
    model: Annotated[int | None, typer.Option(help="model id")] = None,
    profile: ProfileOpt = None,
) -> None:
    """Approve a pending link (only the side that did not initiate it may)."""
    _decide(True, benchmark, dataset, model, profile)


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

