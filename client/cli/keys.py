"""``sealbench keys``: your result key pair (data owners). Thin: options in,
:mod:`sealbench.client.assets.result_key` called, rendering out."""

from __future__ import annotations

from typing import Annotated

import typer

from sealbench.client.assets.result_key import (
    ResultKey,
    ensure_result_key,
    init_result_key,
    load_result_key,
)
from sealbench.client.cli.common import JsonOpt, ProfileOpt, emit_json, out, session

__all__ = ["keys_app", "keys_init", "keys_show", "result_key_line"]

keys_app = typer.Typer(help="Your result key pair (data owners): results are sealed to it.")


@keys_app.command("init")
def keys_init(
    force: Annotated[
        bool,
        typer.Option("--force", help="replace an existing key (old results stay sealed to it)"),
    ] = False,
    profile: ProfileOpt = None,
) -> str:
    """Your HPKE result key pair (private key mode 0600, never leaves this machine): 'profile
    add' already made it; this makes it for a profile added before that, and --force replaces
    it (rotation)."""
    with session(profile) as s:
        if force:
            key, created = init_result_key(s.profile.secrets_dir, force=True), True
        else:
            key, created = ensure_result_key(s.profile.secrets_dir)
    out().print(result_key_line(key, created))
    return key.digest


def result_key_line(key: ResultKey, created: bool) -> str:
    """What ``profile add`` and ``keys init`` say about the profile's result key."""
    said = "created" if created else "kept (this profile has one; --force replaces it)"
    return f"result key {said}: {key.private_path} (0600)\nrecipient digest {key.digest}"


@keys_app.command("show")
def keys_show(profile: ProfileOpt = None, json_out: JsonOpt = False) -> str:
    """Show your result public key's digest (what policies and runs bind)."""
    with session(profile) as s:
        key = load_result_key(s.profile.secrets_dir)
    if json_out:
        emit_json({"recipient_digest": key.digest, "public_key": key.public_b64,
                   "private_key_path": str(key.private_path)})
    else:
        out().print(f"recipient digest {key.digest}\nprivate key {key.private_path}")
    return key.digest
