"""``sealbench profile``: the registry accounts on this machine, the cloud each one uses (the
INSECURE mock or a Google Cloud project) and the transparency-log key pinned for its registry.
Each command parses options, calls :mod:`sealbench.client.registry.profiles` and the registry
client, and renders. ``login`` and ``whoami`` are in :mod:`sealbench.client.cli.account`,
``doctor`` in :mod:`sealbench.client.cli.doctor`."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from pydantic import BaseModel, ValidationError

from sealbench.client.assets.result_key import ensure_result_key
from sealbench.client.assets.watch_process import start_policy_watch
from sealbench.client.cli.audit import parse_key, pin_profile_log
from sealbench.client.cli.common import JsonOpt, emit_json, log, out, table
from sealbench.client.cli.keys import result_key_line
from sealbench.client.errors import (
    AuthenticationFailed,
    ClientError,
    ConfigError,
    TransparencyLogError,
)
from sealbench.client.registry.api import RegistryClient
from sealbench.client.registry.profiles import (
    GOOGLE_PLATFORM,
    PlatformAccount,
    Profile,
    ProfileStore,
    mock_account,
    registry_url,
    unknown_profile,
)
from sealbench.platforms.account import AccountPlatform

__all__ = ["profile_app", "profile_store", "profile_touches", "server_option"]

profile_app = typer.Typer(help="Registry accounts on this machine (stored with mode 0600).")


def profile_store() -> ProfileStore:
    """The profiles of this machine, where the environment says they are."""
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
    use: Annotated[bool, typer.Option(
        "--use/--no-use", help="make it the current profile (default: only when there is none "
        "yet; 'sealbench profile use NAME' switches later)")] = False,
    log_key: Annotated[
        str | None,
        typer.Option(metavar="KEY",
                     help="the registry's transparency-log key, given to you out of band by its "
                     "operator ('sealbench-server key show' prints it): every checkpoint you "
                     "are shown must be signed by it"),
    ] = None,
    trust_on_first_use: Annotated[
        bool,
        typer.Option("--trust-on-first-use",
                     help="instead of --log-key, pin the key the registry publishes now "
                     "(recorded in the profile; a registry that already rewrote its log "
                     "would pass). With neither, audit checks and receipts are refused"),
    ] = False,
    witness: Annotated[
        list[str] | None,
        typer.Option(metavar="KEY",
                     help="a witness key ('sealbench audit witness' prints it) that must have "
                     "cosigned the log you are shown; repeat for several"),
    ] = None,
    cloud: Annotated[
        str | None,
        typer.Option(help="your cloud: 'gcp' (Google Cloud, with --project), 'mock' (with "
                     "--mock-tee), or the name of another installed TEE platform (with "
                     "--setting for each of its settings); default: from the options given"),
    ] = None,
    setting: Annotated[
        list[str] | None,
        typer.Option(metavar="KEY=VALUE",
                     help="another platform's account setting (--cloud NAME), as that "
                     "platform documents it; repeat for several. Never a credential"),
    ] = None,
    project: Annotated[str | None, typer.Option(help="gcp: your project id")] = None,
    project_number: Annotated[
        str | None,
        typer.Option(help="gcp: its number (default: looked up with your credentials, as "
                     "'gcloud projects describe P' prints it)"),
    ] = None,
    location: Annotated[str, typer.Option(help="gcp: KMS location")] = "global",
    key_ring: Annotated[str, typer.Option(help="gcp: KMS key ring")] = "sealbench",
    key: Annotated[str, typer.Option(help="gcp: KMS key")] = "assets",
    bucket: Annotated[
        str | None, typer.Option(help="gcp: your bucket (default: PROJECT-sealbench)")
    ] = None,
    bucket_location: Annotated[
        str | None,
        typer.Option(help="gcp: where your bucket is created if it does not exist (EU, "
                     "europe-west4, US, ...): your data's residency, required to create one")
    ] = None,
    pool: Annotated[str, typer.Option(help="gcp: workload identity pool id")] = "sealbench",
    impersonate_service_account: Annotated[
        str | None,
        typer.Option(help="gcp: act as this service account (your ADC must be allowed to)"),
    ] = None,
    zone: Annotated[
        str | None, typer.Option(help="gcp: zone of your Confidential Space VMs")
    ] = None,
    service_account: Annotated[
        str | None, typer.Option(help="gcp: the service account your VMs run as")
    ] = None,
    machine_type: Annotated[
        str | None, typer.Option(help="gcp: the VMs' machine type (doctor checks its quota)")
    ] = None,
    watch_policy: Annotated[
        bool | None,
        typer.Option("--watch-policy/--no-watch-policy",
                     help="start 'sealbench policy sync --watch' for this profile in the "
                     "background now, so your key's grants follow the registry's approvals "
                     "with no step of yours (default: asked at a terminal; scripts say which)"),
    ] = None,
    api_endpoint: Annotated[
        list[str] | None,
        typer.Option(metavar="NAME=URL",
                     help="gcp: use URL instead of Google's endpoint for API NAME (kms, "
                     "storage, iam, sts, compute, serviceusage, cloudresourcemanager, "
                     "attestation, artifactregistry); repeat for several. For private "
                     "endpoints or a test stand-in: key-release policies then pin them "
                     "(docs/gcp-setup.md)"),
    ] = None,
) -> None:
    """Add (or replace) a profile, with its result key (made once: results are sealed to it)
    and, if you say so, a background 'policy sync --watch'; it becomes the current one with
    --use, or when it is the first (the current profile is never switched behind your back).
    The registry is
    asked whether it accepts the token (a refusal is a warning: the profile is saved) and its
    transparency log is checked against the log key you give (--log-key, from the registry's
    operator) or, with --trust-on-first-use, against the key it publishes now, pinned: every
    checkpoint you are shown later must be signed by it."""
    url = server_option(server)
    if log_key and trust_on_first_use:
        raise typer.BadParameter("give the key or trust it on first use, not both",
                                 param_hint="'--log-key' / '--trust-on-first-use'")
    settings = _pairs(setting or [], "--setting")
    account = _account(cloud, settings, mock_tee=mock_tee, project=project)
    google = None if account else _gcp_settings(
        cloud, mock_tee, project=project, project_number=project_number, location=location,
        key_ring=key_ring, key=key, bucket=bucket, bucket_location=bucket_location, pool=pool,
        impersonate_service_account=impersonate_service_account, zone=zone,
        service_account=service_account, machine_type=machine_type,
        api_endpoints=_pairs(api_endpoint or [], "--api-endpoint", "NAME=URL") or None,
    )
    if token is None:
        token = typer.prompt("API token", hide_input=True)
    store = profile_store()
    before = dict(store.names()).get(name)
    profile = Profile(
        server=url,
        token=token or None,
        account=account or google or (mock_account(mock_tee.resolve()) if mock_tee else None),
        log_key=parse_key(log_key, "--log-key").to_string() if log_key else None,
        trust_on_first_use=trust_on_first_use,
        witnesses=tuple(parse_key(w, "--witness").to_string() for w in witness or ()),
    )
    store.add(name, profile, make_current=use)
    current = store.current()
    out().print(f"profile {name} saved ({url})" + (
        " and in use" if current == name else
        f"; the current profile is still {current} ('sealbench profile use {name}' "
        "switches)"))
    # its result key, made once with the profile ('keys init' is no step of its own)
    out().print(result_key_line(*ensure_result_key(store.secrets_dir(name))))
    if not log_key and not trust_on_first_use:
        log.warning("no transparency-log key is pinned for %s: 'audit' checks and result "
                    "receipts are refused until you add the profile again with --log-key KEY "
                    "(ask the registry's operator: 'sealbench-server key show' prints it) or "
                    "--trust-on-first-use", url)
    _offer_policy_watch(store, name, watch_policy)
    if not token:
        _warn_unless_reachable(url)
        return
    _warn_unless_accepted(url, token)
    if log_key or trust_on_first_use:
        _pin_log_key(store, name, trust_on_first_use=trust_on_first_use,
                     replaced=before is not None and (before.server, before.log_key) != (
                         profile.server, profile.log_key))


def _offer_policy_watch(store: ProfileStore, name: str, watch: bool | None) -> None:
    """Start the profile's background ``policy sync --watch`` when asked to (``--watch-policy``,
    or yes at a terminal: input and output both one, so a script or a test whose output is
    read is never asked), else say how to."""
    if watch is None and sys.stdin.isatty() and sys.stdout.isatty():
        watch = typer.confirm("keep your key's grants following your approvals: start "
                              "'sealbench policy sync --watch' in the background now?",
                              default=True)
    command = f"sealbench policy sync --watch --profile {name}"
    if not watch:
        out().print(f"key grants follow approvals when you sync: '{command}' keeps them synced "
                    "(or add the profile with --watch-policy)")
        return
    started = start_policy_watch(name, store.resolve(name).data_dir)
    out().print(f"'{command}' {'started' if started.started else 'already runs'} in the "
                f"background (process {started.pid}, its lines in {started.log}; 'kill "
                f"{started.pid}' stops it)")


def _pin_log_key(
    store: ProfileStore, name: str, *, trust_on_first_use: bool, replaced: bool
) -> None:
    try:
        pinned = pin_profile_log(store, name, replaced=replaced)
    except AuthenticationFailed:
        return  # already warned about the token
    except ClientError as exc:
        if isinstance(exc, TransparencyLogError):  # the log itself failed: never a warning
            raise
        how = "pinned on first use" if trust_on_first_use else "checked against it then"
        log.warning("could not check the registry's log now (%s); its key is %s", exc, how)
        return
    if pinned is None:
        return
    if trust_on_first_use:
        out().print(f"pinned the registry's transparency-log key {pinned.label} on first use "
                    "(recorded in the profile; compare it with the operator's "
                    "'sealbench-server key show')")
    else:
        out().print(f"the registry's log is signed by the key you gave ({pinned.label})")


def _pairs(given: list[str], option: str, shape: str = "KEY=VALUE") -> dict[str, str]:
    """Repeated ``KEY=VALUE`` options (``shape`` says how the option's help spells them) as
    ``{KEY: VALUE}``; a usage error for a malformed or repeated one."""
    pairs: dict[str, str] = {}
    for item in given:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise typer.BadParameter(f"{item[:80]!r} is not {shape}", param_hint=f"'{option}'")
        if name in pairs:
            raise typer.BadParameter(f"{name} is given twice", param_hint=f"'{option}'")
        pairs[name] = value
    return pairs


def _account(
    cloud: str | None, settings: dict[str, str], *, mock_tee: Path | None, project: str | None
) -> PlatformAccount | None:
    """The account on another installed platform that ``--cloud NAME --setting ...`` names
    (None for Google Cloud and the mock)."""
    if cloud in (None, "gcp", "mock"):
        if settings:
            raise typer.BadParameter("--setting goes with --cloud NAME of another installed "
                                     "platform", param_hint="'--setting'")
        return None
    from sealbench.client.assets.owner import platform_account

    assert cloud is not None
    if mock_tee or project:
        raise typer.BadParameter(f"the {cloud} platform takes --setting, not --mock-tee or "
                                 "--project", param_hint="'--cloud'")
    try:
        return platform_account(cloud, settings)
    except ConfigError as exc:
        hint = f" ({exc.hint})" if exc.hint else ""
        raise typer.BadParameter(f"{exc}{hint}", param_hint="'--cloud' / '--setting'") from None


def _gcp_settings(
    cloud: str | None, mock_tee: Path | None, *, project: str | None,
    **options: str | dict[str, str] | None,
) -> PlatformAccount | None:
    """The profile's Google Cloud account from ``--cloud gcp`` and its options: sugar that
    fills the Confidential Space platform's settings model (None for the mock); a usage error
    names what is missing or malformed."""
    chosen = cloud or ("gcp" if project else "mock" if mock_tee else None)
    if chosen == "mock":
        if project:
            raise typer.BadParameter("the mock cloud takes --mock-tee, not --project")
        return None
    if chosen is None:
        return None
    if mock_tee:
        raise typer.BadParameter("Google Cloud takes --project, not --mock-tee")
    if not project:
        raise typer.BadParameter("--cloud gcp needs --project", param_hint="'--cloud'")
    from sealbench.platforms.account import load_account_platform

    platform = load_account_platform(GOOGLE_PLATFORM)
    given = {k: v for k, v in options.items() if v is not None}
    try:  # checked by the platform's model before anything is looked up
        settings = platform.account_settings.model_validate(
            {"project": project, "project_number": "0", **given}
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        option = "--" + str(err["loc"][0]).replace("_", "-").removesuffix("s")
        if option == "--api-endpoint":
            raise typer.BadParameter(err["msg"].removeprefix("Value error, "),
                                     param_hint=option) from None
        raise typer.BadParameter(f"not a valid value ({err['msg']})", param_hint=option) from None
    if "project_number" not in given:
        settings = _look_up_number(platform, settings, project)
    return PlatformAccount(platform=GOOGLE_PLATFORM, settings=settings.model_dump(mode="json"))


def _look_up_number(
    platform: AccountPlatform[BaseModel], settings: BaseModel, project: str
) -> BaseModel:
    """The settings with the project's number, asked of Resource Manager with the credentials
    the profile will use (its endpoint override honoured); a usage error saying how to pass it
    otherwise."""
    from sealbench.client.assets.accounts import client_errors

    try:
        with client_errors():
            completed: BaseModel = platform.complete_account(settings)
            return completed
    except ClientError as exc:
        raise typer.BadParameter(
            f"could not look up the number of project {project} ({exc}); pass it: "
            f"--project-number $(gcloud projects describe {project} "
            "--format='value(projectNumber)')",
            param_hint="'--project-number'",
        ) from None


def server_option(server: str) -> str:
    """``--server`` as a registry root URL; a usage error naming the option otherwise."""
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
        log.warning("could not check the token with the registry at %s: %s%s", url, exc,
                    _plain_http_hint(url, exc))
    else:
        out().print(f"the registry accepts it: signed in as {me.email} (user {me.id})")


def _warn_unless_reachable(url: str) -> None:
    """Without a token, ask the registry's ``/health`` once; say so when it does not answer."""
    try:
        with RegistryClient.connect(url, None) as client:
            client.health()
    except ClientError as exc:
        log.warning("the registry at %s does not answer: %s%s; the profile is saved as "
                    "given", url, exc, _plain_http_hint(url, exc))


def _plain_http_hint(url: str, exc: ClientError) -> str:
    """When an https URL failed its TLS handshake and the same host answers plain HTTP (the
    demo's and a local server's case), the sentence that says so; else nothing."""
    if not url.startswith("https://") or "SSL" not in str(exc):
        return ""
    plain = "http://" + url.removeprefix("https://")
    try:
        with RegistryClient.connect(plain, None) as client:
            client.health()
    except ClientError:
        return ""
    return (f". It answers plain HTTP at {plain}: add the profile again with --server "
            f"{plain}")


@profile_app.command("use")
def profile_use(name: Annotated[str, typer.Argument(help="profile name")]) -> None:
    """Make NAME the current profile."""
    profile_store().use(name)
    out().print(f"now using profile {name}")


@profile_app.command("ls")
def profile_ls(json_out: JsonOpt = False) -> None:
    """List profiles (tokens are never shown)."""
    store = profile_store()
    current = store.current()
    rows = [
        {
            "name": name,
            "current": name == current,
            "server": p.server,
            "token": "set" if p.token else "missing",
            "cloud": p.account.platform if p.account else None,
        }
        for name, p in store.names()
    ]
    if json_out:
        emit_json(rows)
        return
    table(
        f"profiles in {store.path}",
        ("", "name", "server", "token", "cloud"),
        (("*" if r["current"] else "", r["name"], r["server"], r["token"], r["cloud"])
         for r in rows),
    )


@profile_app.command("show")
def profile_show(
    name: Annotated[str | None, typer.Argument(help="profile name (default: the current)")] = None,
    json_out: JsonOpt = False,
) -> None:
    """What a profile will touch: its registry, pinned log key, and its cloud's key, bucket,
    workload identity pool and VM settings (never the token)."""
    store = profile_store()
    chosen = name or store.current()
    profiles = dict(store.names())
    if chosen is None or chosen not in profiles:
        raise unknown_profile(chosen, profiles)
    rows = profile_touches(profiles[chosen])
    if json_out:
        emit_json({"name": chosen, **rows})
        return
    table(f"profile {chosen}", ("what", "value"), sorted(rows.items()))


def _log_key_shown(profile: Profile) -> str:
    """The profile's log key and how it was pinned."""
    if profile.trust_on_first_use:
        return (f"{profile.log_key} (trusted on first use)" if profile.log_key
                else "trusted on first use, not pinned yet")
    if profile.log_key:
        return f"{profile.log_key} (given out of band)"
    return "none: audit checks refused (add the profile again with --log-key KEY)"


def profile_touches(profile: Profile) -> dict[str, str]:
    """The resources a profile's commands use, as ``{what: value}``."""
    rows = {
        "registry": profile.server,
        "token": "set" if profile.token else "missing",
        "log key": _log_key_shown(profile),
    }
    if profile.account is not None:
        from sealbench.client.assets.accounts import account_of

        rows.update(account_of(profile.account).rows())
    else:
        rows["cloud"] = "none (add --cloud gcp ... or --mock-tee DIR)"
    return rows


@profile_app.command("rm")
def profile_rm(name: Annotated[str, typer.Argument(help="profile name")]) -> None:
    """Remove a profile (its keys and run records stay on disk)."""
    profile_store().remove(name)
    out().print(f"profile {name} removed")
