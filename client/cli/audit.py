"""``sealbench audit``: the registry's audit log, checked on this machine. Each command parses
options, builds a :class:`~sealbench.client.registry.transparency.LogMonitor` for the profile (its
pinned log key, its witnesses, its state directory) and renders what the library verified; every
failure of the log is a :class:`~sealbench.client.errors.TransparencyLogError` (exit 10) with
its evidence kept."""

from __future__ import annotations

import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sealbench.client.cli.common import (
    JsonOpt,
    ProfileOpt,
    Session,
    emit_json,
    out,
    session,
    with_progress,
)
from sealbench.client.errors import ConfigError
from sealbench.client.registry.api import RegistryClient
from sealbench.client.registry.audit_log import (
    log_state,
    parse_key,
    profile_monitor,
    receipts_of,
    verify_audit_log,
)
from sealbench.client.registry.logstate import write_private
from sealbench.client.registry.profiles import ProfileStore
from sealbench.client.registry.receipts import (
    Receipt,
    fetch_receipt,
    load_receipt,
    prove_receipt,
)
from sealbench.client.registry.transparency import DEFAULT_PACE, LogMonitor
from sealbench.client.registry.witness import Witness, witness_key, witness_state
from sealbench.client.runs.submit import keep_result_receipt
from sealbench.crypto.note import VerifierKey

if TYPE_CHECKING:
    from sealbench.client.runs.result_open import OpenedResult

__all__ = [
    "audit_app",
    "audit_verify",
    "keep_receipt",
    "log_state",
    "monitor_for",
    "parse_key",
    "pin_profile_log",
    "receipts_of",
]

audit_app = typer.Typer(
    help="The registry's audit log, a transparency log checked on this machine: checkpoints, "
    "receipts, witnesses."
)


def monitor_for(s: Session) -> LogMonitor:
    """The log monitor of the session's profile."""
    return profile_monitor(s.client, s.profile, s.store)


def pin_profile_log(store: ProfileStore, name: str, *, replaced: bool) -> VerifierKey | None:
    """After ``profile add``: verify the registry's checkpoint against the log key given with
    ``--log-key``, or, for a profile that chose ``--trust-on-first-use``, pin the one it
    publishes now; a previous log state of a replaced profile is set aside first. Returns the
    pinned key; :class:`~sealbench.client.errors.LogKeyNotPinnedError` for a profile with
    neither."""
    profile = store.resolve(name)
    state = log_state(profile)
    if replaced and state.root.exists():
        aside = state.root.with_name(f"log.replaced-{datetime.now(UTC):%Y%m%dT%H%M%SZ}")
        shutil.move(state.root, aside)
    with RegistryClient.connect(profile.server, profile.token) as client:
        monitor = profile_monitor(client, profile, store)
        monitor.refresh()
    return monitor.pinned


# -- verify ------------------------------------------------------------------------------------


@audit_app.command("verify")
def audit_verify(
    pace: Annotated[
        float,
        typer.Option(min=0, help="seconds to wait per second the registry spends serving a "
                     "page of events (1: at most half its time; 0: as fast as it can)"),
    ] = DEFAULT_PACE,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Check the whole log on this machine: the latest checkpoint is signed by the pinned key
    and extends the last one you verified; then every event (admins only) matches its chain
    link, its leaf and that checkpoint. Exit 10 names the first event that breaks."""
    with session(profile) as s:
        bar, update = with_progress("verifying the audit log", None)
        with bar:
            check = verify_audit_log(s.client, s.profile, s.store, progress=update, pace=pace)
    report, signer = check.report, check.signer
    cp = report.checkpoint
    if json_out:
        emit_json({"events": report.events, "origin": cp.origin, "tree_size": cp.size,
                   "root": cp.root_hash.hex(),
                   "previous_size": None if report.previous is None else report.previous.size,
                   "log_key_trusted_on_first_use": check.trusted_on_first_use})
        return
    if check.trusted_on_first_use:
        out().print(f"TRUST ON FIRST USE: the log key {signer} is the one the registry itself "
                    "published when this profile first asked, not one given out of band: a "
                    "registry that rewrote its log before then would pass; compare it with the "
                    "operator's 'sealbench-server key show'")
    out().print(f"audit chain intact: {report.events} events")
    since = ("first check: this checkpoint is now the one you hold" if report.previous is None
             else f"consistent with the checkpoint of {report.previous.size} events you "
             "verified before")
    out().print(f"transparency log {cp.origin}: checkpoint of {cp.size} events (root "
                f"{cp.root_hash.hex()[:16]}…) signed by {signer}; {since}")


# -- prove -------------------------------------------------------------------------------------


@audit_app.command("prove")
def audit_prove(
    result_id: Annotated[int, typer.Argument(help="the result's registry id")],
    receipt_file: Annotated[
        Path | None,
        typer.Option("--receipt", help="check this receipt file instead of your own"),
    ] = None,
    out_file: Annotated[
        Path | None, typer.Option("--out", help="also write the receipt to this file")
    ] = None,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> Receipt:
    """Show and check the receipt that proves result RESULT_ID was logged: the checkpoint's
    signature, the inclusion proof of its event, that the event is this result's submission
    with the digests you submitted, and that the checkpoint belongs to the log you verified."""
    with session(profile) as s:
        monitor = monitor_for(s)
        if receipt_file is not None:
            receipt = load_receipt(receipt_file)
        else:
            receipt = receipts_of(s.profile).get(result_id) or fetch_receipt(
                monitor, s.client.audit_receipt(result_id), registry=s.profile.server,
                expected=None,
            )
        if receipt.result_id != result_id:
            raise ConfigError(f"the receipt is for result {receipt.result_id}, not {result_id}")
        proven = prove_receipt(monitor, receipt)
        held = monitor.state.held()
    if out_file is not None:
        write_private(out_file, receipt.model_dump_json(indent=2).encode() + b"\n")
    if json_out:
        emit_json(receipt)
        return receipt
    event = receipt.event
    out().print(
        f"result {result_id} was logged: event {event.seq} (leaf {receipt.leaf_index}) of log "
        f"{receipt.origin}, proven in the checkpoint of {receipt.tree_size} events signed by "
        f"{', '.join(k.label for k in proven.signed_by)}"
    )
    if held is not None:
        out().print(f"that checkpoint is part of the log you verified ({held.size} events)")
    if receipt.expected:
        out().print("the logged digests are those of the result you submitted: "
                    + ", ".join(f"{k} {v[:19]}…" for k, v in sorted(receipt.expected.items())))
    return receipt


# -- witness -----------------------------------------------------------------------------------


@audit_app.command("witness")
def audit_witness(
    registry: Annotated[
        str | None,
        typer.Option(metavar="URL",
                     help="registry URL to witness (default: the profile's registry)"),
    ] = None,
    every: Annotated[
        float, typer.Option(help="seconds between rounds; 0 runs one round", min=0)
    ] = 0.0,
    rounds: Annotated[
        int, typer.Option(help="stop after this many rounds (0: until Ctrl-C)", min=0)
    ] = 0,
    name: Annotated[
        str | None,
        typer.Option(help="the witness's name, used when its key is created "
                     "(default: sealbench-witness/PROFILE)"),
    ] = None,
    log_key: Annotated[
        str | None,
        typer.Option(metavar="KEY",
                     help="the registry's log key to trust (default: pinned on first use)"),
    ] = None,
    profile: ProfileOpt = None,
) -> None:
    """Co-sign the registry's checkpoints, each after checking it extends every checkpoint this
    witness saw before (run it as the authority or a hospital). Clients that add the printed
    witness key with 'profile add --witness' then refuse any view of the log it never saw."""
    with session(profile) as s:
        url = (registry or s.profile.server).rstrip("/")
        key = witness_key(s.profile.secrets_dir, name or f"sealbench-witness/{s.profile.name}")
        out().print(f"witness key {key.verifier().to_string()}")
        client = (s.client if url == s.profile.server
                  else RegistryClient.connect(url, s.profile.token))
        try:
            witness = Witness(client, key, witness_state(s.profile.secrets_dir, url),
                              pinned=parse_key(log_key, "--log-key") if log_key else None)
            done = 0
            while True:
                cosigned = witness.cosign_latest()
                done += 1
                cp = cosigned.checkpoint
                out().print(f"cosigned {cp.origin} at {cp.size} events (root "
                            f"{cp.root_hash.hex()[:16]}…)"
                            f"{'' if cosigned.new else ' (already cosigned)'}")
                if every <= 0 or (rounds and done >= rounds):
                    break
                time.sleep(every)
        finally:
            if client is not s.client:
                client.close()


# -- gossip ------------------------------------------------------------------------------------


@audit_app.command("checkpoint")
def audit_checkpoint(
    out_file: Annotated[
        Path | None, typer.Option("--out", help="write the signed checkpoint to this file")
    ] = None,
    profile: ProfileOpt = None,
) -> None:
    """Verify the registry's latest checkpoint and print it (a signed note): give it to another
    party, who checks it with 'sealbench audit compare FILE' against what they are shown."""
    with session(profile) as s:
        latest = monitor_for(s).refresh()
    if out_file is not None:
        write_private(out_file, latest.to_bytes())
    typer.echo(latest.to_bytes().decode("utf-8"), nl=False)


@audit_app.command("compare")
def audit_compare(
    checkpoint_file: Annotated[Path, typer.Argument(help="a checkpoint another party verified")],
    profile: ProfileOpt = None,
) -> None:
    """Check another party's checkpoint of this registry's log against yours: both must be one
    history (one extends the other). A fork exits 10 with both checkpoints kept."""
    try:
        note = checkpoint_file.read_bytes()[: 1 << 16]
    except OSError as exc:
        raise ConfigError(f"cannot read {checkpoint_file}: {exc.strerror}") from exc
    with session(profile) as s:
        monitor = monitor_for(s)
        theirs = monitor.compare(note).checkpoint
        mine = monitor.state.held()
    out().print(f"one history: their checkpoint of {theirs.size} events and yours of "
                f"{mine.size if mine else '?'} events are consistent")


def keep_receipt(s: Session, result_id: int, opened: OpenedResult) -> tuple[Receipt, Path]:
    """After ``result submit``: fetch the result's receipt, check it proves exactly the result
    this machine holds (its digests) in the log this profile verified, and keep it."""
    return keep_result_receipt(s.client, s.profile, s.store, result_id, opened)
