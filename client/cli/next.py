"""``sealbench next``: the one step this profile takes now, with its command. Thin: options
in, :mod:`sealbench.client.runs.next_step` called, one step rendered."""

from __future__ import annotations

from typing import Annotated

import typer

from sealbench.client.cli.common import JsonOpt, ProfileOpt, emit_json, out, session
from sealbench.client.runs.next_step import ROLES, NextStep, Role, next_step, read_standing

__all__ = ["next_command"]


def _role(value: str | None) -> str | None:
    if value is not None and value not in ROLES:
        raise typer.BadParameter(f"{value!r} is none of {', '.join(ROLES)}")
    return value


def next_command(
    role: Annotated[
        str | None,
        typer.Option(metavar="ROLE", callback=_role,
                     help="only this role's steps: hospital, model-owner or authority "
                     "(default: the roles your registrations show)"),
    ] = None,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> NextStep:
    """The one next step for this profile, with the command that takes it: a decision or a
    key sync that waits for you first, then the next step of your path (hospital: result key,
    dataset prepared and registered, sealed, associated, run, result submitted; model owner:
    registered, sealed, associated; authority: a benchmark published). 'sealbench inbox'
    lists everything that waits."""
    chosen: Role | None = next((r for r in ROLES if r == role), None)
    with session(profile) as s:
        step = next_step(read_standing(s.profile, s.client), chosen)
    if json_out:
        emit_json(step.to_json())
        return step
    console = out()
    console.print(f"next: {step.what}", markup=False, highlight=False)
    if step.command:
        console.print(f"    {step.command}", markup=False, highlight=False, soft_wrap=True)
    return step
