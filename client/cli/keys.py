"""``sealbench keys``: your result key pair (data owners). Thin: options in,
:mod:`sealbench.client.assets.result_key` called, rendering out."""

from __future__ import annotations

from typing import Annotated

import typer

from sealbench.client.assets.result_key import init_result_key, load_result_key
from sealbench.client.cli.common import JsonOpt, ProfileOpt, emit_json, out, session

__all__ = ["keys_app", "keys_init", "keys_show"]

keys_app = typer.Typer(help="Your result key pair (data owners): results are sealed to it.")


@keys_app.command("init")
def keys_init(
    force: Annotated[
        bool,
        typer.Option("--force", help="replace an existing key (old results stay sealed to it)"),
    ] = False,
    profile: ProfileOpt = None,
) -> str:
    """Create your HPKE result key pair (private key mode 0600, never leaves this machine)."""
    with session(profile) as s:
        key = init_result_key(s.profile.secrets_dir, force=force)
    out().print(f"result key created: {key.private_path} (0600)\nrecipient digest {key.digest}")
    return key.digest


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
