"""``sealbench inbox``: a participant's second question, "what waits for me?". Thin: options
in, the library's inbox (:mod:`sealbench.client.runs.inbox`) merged with this machine's run
records, rendering out."""

from __future__ import annotations

from sealbench.client.cli.common import JsonOpt, ProfileOpt, emit_json, out, session
from sealbench.client.runs import inbox as inbox_lib
from sealbench.client.runs.records import RunStore

__all__ = ["inbox"]


def inbox(profile: ProfileOpt = None, json_out: JsonOpt = False) -> inbox_lib.InboxView:
    """What waits for you: associations to approve or reject, benchmarks to approve (admins),
    evaluations of your datasets to run, results to open and submit (from this machine's run
    records), and your requests that wait for someone else."""
    with session(profile) as s:
        view = inbox_lib.merge(
            s.client.inbox(), RunStore(s.profile.data_dir / "runs").all()
        )
    if json_out:
        emit_json(view.to_json())
        return view
    console = out()
    if view.items:
        # a list, not a table: commands stay on one line, ready to copy
        console.print(f"inbox of profile {s.profile.name}:")
        for item in view.items:
            console.print(f"- {item.action}: {item.what}")
            if item.command:
                console.print(f"    {item.command}")
    if not view.items:
        console.print("nothing waits for you")
    elif not view.to_do:
        console.print("nothing for you to do now")
    if view.evaluated:
        console.print(f"{view.evaluated} approved evaluation(s) of your datasets already have a "
                      "verified result")
    if view.truncated:
        console.print("the list was cut: some items are not shown")
    return view
