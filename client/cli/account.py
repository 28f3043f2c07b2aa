"""``sealbench login`` and ``sealbench whoami``: the account a profile signs in as. Each command
parses options, calls :mod:`sealbench.client.registry.profiles` and the registry client, and
renders."""

from __future__ import annotations

from typing import Annotated

import typer

from sealbench.client.cli.common import JsonOpt, ProfileOpt, emit_json, out, session
from sealbench.client.cli.profile import profile_store, server_option
from sealbench.client.errors import ConfigError
from sealbench.client.registry.api import RegistryClient
from sealbench.client.registry.profiles import Profile

__all__ = ["login", "whoami"]


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
    store = profile_store()
    name = profile or store.current() or "default"
    known = dict(store.names())
    url = server_option(server) if server else (known[name].server if name in known else "")
    if not url:
        raise ConfigError(
            f"profile {name!r} does not exist yet", hint="pass --server URL to create it"
        )
    if token is None:
        token = typer.prompt("API token", hide_input=True)
    with RegistryClient.connect(url, token) as client:
        me = client.me()
    account = known[name].account if name in known else None  # its cloud, kept
    same = name in known and known[name].server == url  # keep the log key pinned for it
    store.add(name, Profile(server=url, token=token, account=account,
                            log_key=known[name].log_key if same else None,
                            trust_on_first_use=known[name].trust_on_first_use if same else False,
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
