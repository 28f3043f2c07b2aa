"""Attacks on the registry's audit log by the party the design says may be compromised: its
operator, with the database and the log's signing key. Each is played against the real
registry app (in-process) and checked from a client that pinned the log key and keeps the last
checkpoint it verified. Forks are played with two copies of the registry that share one key,
each showing its own history."""

from __future__ import annotations

import base64
import json
import shutil
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import uvicorn
from fastapi.testclient import TestClient
from sqlalchemy import TextClause, delete, select, text, update
from typer.testing import CliRunner
from typer.testing import Result as CliResult

from sealbench.client.cli import app
from sealbench.client.errors import (
    LogInconsistentError,
    LogKeyNotPinnedError,
    LogProofError,
    LogSignatureError,
    NotFoundError,
    TransparencyLogError,
)
from sealbench.client.registry.api import RegistryClient
from sealbench.client.registry.logstate import LogState
from sealbench.client.registry.receipts import (
    Receipt,
    expected_digests,
    fetch_receipt,
    prove_receipt,
    verify_receipt,
)
from sealbench.client.registry.transparency import LogMonitor
from sealbench.client.registry.witness import Witness
from sealbench.crypto import tlog
from sealbench.crypto.digest import sha256_digest
from sealbench.crypto.note import ALG_COSIGNATURE, SignerKey, VerifierKey, write_signer_key
from sealbench.server.app import create_app
from sealbench.server.audit import append_event, verify_stored_log
from sealbench.server.audit_format import GENESIS_HASH, event_hash, event_leaf_hash
from sealbench.server.db import open_database
from sealbench.server.logkeys import ensure_log_key, rotate_log_key
from sealbench.server.models import (
    AuditEvent,
    AuditHead,
    AuditNode,
    Benchmark,
    Dataset,
    LogKey,
    Model,
    Result,
)
from sealbench.server.settings import ServerSettings

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@dataclass
class Site:
    """One copy of the registry: its settings, an in-process client per account."""

    settings: ServerSettings
    http: TestClient
    tokens: dict[str, str]

    def client(self, account: str) -> RegistryClient:
        return RegistryClient(self.http, self.tokens[account])

    @property
    def url(self) -> str:
        return self.settings.effective_database_url


def _open(settings: ServerSettings, tokens: dict[str, str]) -> Iterator[Site]:
    with TestClient(create_app(settings)) as http:
        yield Site(settings, http, tokens)


def grow(site: Site, n: int, label: str = "event") -> None:
    db = open_database(site.url)
    try:
        with db.writer() as session:
            for i in range(n):
                append_event(session, actor_id=None, action=f"test.{label}",
                             entity_type="thing", entity_id=i, payload={"i": i}, now=NOW)
            session.commit()
    finally:
        db.dispose()


def rewrite(site: Site, *, seq: int | None = None, keep: int | None = None) -> None:
    """What an operator with the database does to hide a change: edit event ``seq`` (or drop
    every event after ``keep``), then recompute every later chain hash, the leaves, the stored
    subtrees and the head, so that the server's own recomputation finds nothing."""
    db = open_database(site.url)
    try:
        with db.writer() as session:
            if seq is not None:
                session.execute(update(AuditEvent).where(AuditEvent.seq == seq).values(
                    payload='{"rewritten":true}'))
            if keep is not None:
                session.execute(delete(AuditEvent).where(AuditEvent.seq > keep))
            rows = session.scalars(select(AuditEvent).order_by(AuditEvent.seq)).all()
            session.execute(delete(AuditNode))
            edge, prev = tlog.CompactRange(), GENESIS_HASH
            for row in rows:
                row.prev_hash = prev
                row.hash = prev = event_hash(
                    seq=row.seq, actor_id=row.actor_id, action=row.action,
                    entity_type=row.entity_type, entity_id=row.entity_id, payload=row.payload,
                    occurred_at=row.occurred_at, prev_hash=row.prev_hash)
                for (level, idx), value in edge.append(event_leaf_hash(row)):
                    session.add(AuditNode(level=level, idx=idx, hash=value))
            session.flush()
            session.execute(update(AuditHead).values(
                seq=len(rows), hash=prev, tree_root=edge.root(), tree_edge=edge.to_bytes()))
            session.commit()
        with db.reader() as session:
            verify_stored_log(session)  # the server's own check passes: the chain is "intact"
    finally:
        db.dispose()


def log_result(site: Site, owner: str, sealed: str) -> tuple[int, dict[str, str]]:
    """A result accepted by the registry, with its audit event as the results service writes
    it (the attestation path is tested elsewhere)."""
    me = site.client(owner).me()
    summary, token = {"dice": 0.8}, "header.payload.signature"
    db = open_database(site.url)
    try:
        with db.writer() as session:
            bench = Benchmark(owner_id=me.id, name=f"b-{sealed[-6:]}", version="1",
                              description="", data_contract={}, metrics_spec={},
                              metrics_version="m/1", image_reference="img",
                              image_digest=sha256_digest(b"img"), state="approved",
                              created_at=NOW, updated_at=NOW)
            dataset = Dataset(owner_id=me.id, name=f"d-{sealed[-6:]}",
                              digest=sha256_digest(b"d"), case_count=1, statistics={},
                              state="registered", created_at=NOW)
            model = Model(owner_id=me.id, name=f"m-{sealed[-6:]}", version="1",
                          digest=sha256_digest(b"m"), format="onnx", io_contract={},
                          state="registered", created_at=NOW)
            session.add_all([bench, dataset, model])
            session.flush()
            result = Result(benchmark_id=bench.id, dataset_id=dataset.id, model_id=model.id,
                            submitted_by_id=me.id, summary=summary, sealed_result_digest=sealed,
                            attestation_token=token, token_issuer="https://issuer.test",
                            image_digest=bench.image_digest, nonce="0" * 64, created_at=NOW)
            session.add(result)
            session.flush()
            expected = expected_digests(sealed, summary, token)
            append_event(session, actor_id=me.id, action="result.submit", entity_type="result",
                         entity_id=result.id, payload={"benchmark_id": bench.id, **expected},
                         now=NOW)
            session.commit()
            return result.id, expected
    finally:
        db.dispose()


@pytest.fixture
def site(registry: object, tmp_path: Path) -> Iterator[Site]:
    reg = registry
    yield from _open(reg.settings, reg.tokens)  # type: ignore[attr-defined]


def log_key(settings: ServerSettings) -> VerifierKey:
    """The registry's log key as its operator gives it out of band."""
    return ensure_log_key(settings, create=False).verifier()


def monitor(site: Site, state_dir: Path, account: str = "admin",
            pinned: VerifierKey | None = None, **kwargs: object) -> LogMonitor:
    """A client that pinned ``pinned``, by default the registry's key given out of band."""
    pin = pinned or log_key(site.settings)
    return LogMonitor(site.client(account), LogState(state_dir), pinned=pin, **kwargs)  # type: ignore[arg-type]


def fork_copy(site: Site, root: Path) -> ServerSettings:
    """A second registry with the same database and the same log key: the operator's other
    face."""
    root.mkdir()
    source = sqlite3.connect(site.settings.data_dir / "registry.sqlite3")
    target = sqlite3.connect(root / "registry.sqlite3")
    try:
        source.backup(target)  # includes what is still in the write-ahead log
    finally:
        source.close()
        target.close()
    shutil.copy2(site.settings.effective_log_key_file, root / "log-signer.key")
    return ServerSettings(data_dir=root, trusted_issuers=())


# -- rewriting history -----------------------------------------------------------------------


def test_rewritten_event_detected_naming_the_first_divergent_size(
    site: Site, tmp_path: Path
) -> None:
    grow(site, 40)
    auditor = monitor(site, tmp_path / "auditor")
    assert auditor.verify_log().events == 48  # 4 accounts (2 events each) + 40; keeps leaves
    hospital = monitor(site, tmp_path / "hospital", "hospital")
    hospital.refresh()
    held = (tmp_path / "auditor" / "checkpoint").read_bytes()
    rewrite(site, seq=10)
    assert site.client("admin").audit_verify().ok  # undetected on the server, as before

    with pytest.raises(LogInconsistentError) as caught:
        auditor.refresh()
    assert caught.value.first_divergent_size == 10
    assert "first divergent size is 10" in str(caught.value)
    evidence = Path(str(caught.value.evidence))
    assert (evidence / "held.checkpoint").read_bytes() == held
    assert (evidence / "received.checkpoint").read_bytes() != held
    assert (tmp_path / "auditor" / "checkpoint").read_bytes() == held  # kept, not replaced
    with pytest.raises(LogInconsistentError, match="does not extend the checkpoint at size 48"):
        hospital.refresh()  # without kept leaves: the sizes, not the event


def test_rewrite_with_more_events_appended_still_detected(site: Site, tmp_path: Path) -> None:
    grow(site, 20)
    auditor = monitor(site, tmp_path / "auditor")
    auditor.verify_log()
    rewrite(site, seq=7)
    grow(site, 30, "later")
    with pytest.raises(LogInconsistentError) as caught:
        auditor.verify_log()
    assert caught.value.first_divergent_size == 7


def test_truncated_tail_detected_as_rollback(site: Site, tmp_path: Path) -> None:
    grow(site, 30)
    auditor = monitor(site, tmp_path / "auditor")
    auditor.verify_log()
    rewrite(site, keep=33)  # drop the last five events, re-sign a smaller checkpoint
    with pytest.raises(LogInconsistentError, match="fewer than the 38 you verified"):
        auditor.refresh()
    grow(site, 10, "cover-up")  # grow past the old size to hide it
    with pytest.raises(LogInconsistentError) as caught:
        auditor.refresh()
    assert caught.value.first_divergent_size == 34


# -- forks -------------------------------------------------------------------------------------


def test_fork_detected_by_a_witness(site: Site, registry: object, tmp_path: Path) -> None:
    grow(site, 5)
    other = fork_copy(site, tmp_path / "fork")
    witness_key = SignerKey.generate("authority.test/witness", ALG_COSIGNATURE)
    state = LogState(tmp_path / "witness")
    grow(site, 3, "view-a")
    Witness(site.client("authority"), witness_key, state).cosign_latest()
    for forked in _open(other, site.tokens):
        grow(forked, 3, "view-b")  # same size as view A, another history
        with pytest.raises(LogInconsistentError, match="does not extend"):
            Witness(forked.client("authority"), witness_key, state).cosign_latest()
        assert forked.client("admin").audit_checkpoint().cosignatures == ()


def test_fork_detected_by_gossip_between_two_clients(site: Site, tmp_path: Path) -> None:
    grow(site, 5)
    other = fork_copy(site, tmp_path / "fork")
    grow(site, 2, "view-a")
    first = monitor(site, tmp_path / "first", "hospital")
    first.refresh()
    for forked in _open(other, site.tokens):
        grow(forked, 4, "view-b")
        second = monitor(forked, tmp_path / "second", "authority")
        shown_to_second = second.refresh().to_bytes()
        with pytest.raises(LogInconsistentError, match="a fork") as caught:
            first.compare(shown_to_second)
        assert (Path(str(caught.value.evidence)) / "received.checkpoint").read_bytes() == (
            shown_to_second)
        same_view = monitor(site, tmp_path / "third", "modelco").refresh().to_bytes()
        first.compare(same_view)  # gossip between clients of one view passes


def test_cosignature_of_another_view_exposes_the_fork(site: Site, tmp_path: Path) -> None:
    """The operator shows a client view B with a witness's cosignature made over view A."""
    grow(site, 5)
    other = fork_copy(site, tmp_path / "fork")
    witness_key = SignerKey.generate("authority.test/witness", ALG_COSIGNATURE)
    grow(site, 3, "view-a")
    Witness(site.client("authority"), witness_key, LogState(tmp_path / "w")).cosign_latest()
    db = open_database(site.url)
    with db.reader() as session:
        cosig = session.execute(text_cosignature()).one()
    db.dispose()
    for forked in _open(other, site.tokens):
        grow(forked, 5, "view-b")
        fdb = open_database(forked.url)
        with fdb.writer() as session:
            session.execute(insert_cosignature(), dict(cosig._mapping))
            session.commit()
        fdb.dispose()
        client = monitor(forked, tmp_path / "client", "hospital",
                         witnesses=[witness_key.verifier()])
        with pytest.raises(LogInconsistentError, match="a fork"):
            client.refresh()
        unwitnessed = monitor(forked, tmp_path / "plain", "hospital",
                              witnesses=[SignerKey.generate("w2.test/w", ALG_COSIGNATURE)
                                         .verifier()])
        with pytest.raises(TransparencyLogError, match="no cosignature by witness"):
            unwitnessed.refresh()


def text_cosignature() -> TextClause:
    return text("SELECT witness, tree_size, root, timestamp, signature, submitted_by_id, "
                "received_at FROM audit_cosignatures")


def insert_cosignature() -> TextClause:
    return text("INSERT INTO audit_cosignatures (witness, tree_size, root, timestamp, "
                "signature, submitted_by_id, received_at) VALUES (:witness, :tree_size, :root, "
                ":timestamp, :signature, :submitted_by_id, :received_at)")


# -- keys --------------------------------------------------------------------------------------


def test_checkpoint_signed_by_another_key_refused(
    site: Site, registry: object, tmp_path: Path
) -> None:
    client = monitor(site, tmp_path / "client", "hospital")
    client.refresh()
    assert client.pinned is not None
    # the operator replaces the key (file and published row) without any endorsement
    settings = site.settings
    impostor = SignerKey.generate(client.pinned.name)
    settings.effective_log_key_file.unlink()
    write_signer_key(settings.effective_log_key_file, impostor)
    db = open_database(site.url)
    with db.writer() as session:
        session.execute(update(LogKey).values(verifier=impostor.verifier().to_string()))
        session.commit()
    db.dispose()
    for swapped in _open(settings, site.tokens):
        again = monitor(swapped, tmp_path / "client", "hospital", pinned=client.pinned)
        with pytest.raises(LogSignatureError, match="none of which is a trusted key"):
            again.refresh()


def test_rewritten_log_against_fresh_pinned_profile_detected(
    site: Site, tmp_path: Path
) -> None:
    """The operator rewrites history and, so that no checkpoint signed before can contradict
    it, starts it over under a new key. A fresh client (no checkpoint held yet) that pinned the
    key given out of band refuses it; one that pinned nothing refuses to check at all; only one
    that chose trust on first use accepts it, and says so."""
    grow(site, 12)
    genuine = log_key(site.settings)
    rewrite(site, seq=4)
    settings = site.settings
    impostor = SignerKey.generate(genuine.name)
    settings.effective_log_key_file.unlink()
    write_signer_key(settings.effective_log_key_file, impostor)
    db = open_database(site.url)
    with db.writer() as session:
        session.execute(update(LogKey).values(verifier=impostor.verifier().to_string()))
        session.commit()
    db.dispose()
    for swapped in _open(settings, site.tokens):
        fresh = monitor(swapped, tmp_path / "fresh", "modelco", pinned=genuine)
        with pytest.raises(LogSignatureError, match="none of which is a trusted key"):
            fresh.refresh()
        assert not (tmp_path / "fresh" / "checkpoint").exists()  # nothing of it held
        unpinned = LogMonitor(swapped.client("modelco"), LogState(tmp_path / "unpinned"),
                              pinned=None)
        with pytest.raises(LogKeyNotPinnedError):
            unpinned.refresh()
        tofu = LogMonitor(swapped.client("modelco"), LogState(tmp_path / "tofu"), pinned=None,
                          trust_on_first_use=True)
        tofu.refresh()  # the residual risk of the user's explicit choice
        assert tofu.pinned == impostor.verifier() and tofu.trusted_on_first_use


def test_rotated_key_followed_through_its_endorsement(site: Site, tmp_path: Path) -> None:
    owner = site.client("hospital")
    result_id, expected = log_result(site, "hospital", "sha256:" + "7" * 64)
    client = monitor(site, tmp_path / "client", "hospital")
    old_receipt = fetch_receipt(client, owner.audit_receipt(result_id), registry="r",
                                expected=expected)
    pinned = client.pinned
    db = open_database(site.url)
    try:
        rotate_log_key(site.settings, db, NOW)
    finally:
        db.dispose()
    for rotated in _open(site.settings, site.tokens):
        again = monitor(rotated, tmp_path / "client", "hospital", pinned=pinned)
        latest = again.refresh()
        assert latest.signed_by[0] != pinned and len(again.trusted) == 2
        prove_receipt(again, old_receipt)  # signed by the retired key: still valid


# -- receipts ----------------------------------------------------------------------------------


def _receipt(site: Site, tmp_path: Path) -> tuple[LogMonitor, Receipt]:
    result_id, expected = log_result(site, "hospital", "sha256:" + "8" * 64)
    grow(site, 3)
    client = monitor(site, tmp_path / "client", "hospital")
    proof = site.client("hospital").audit_receipt(result_id)
    return client, fetch_receipt(client, proof, registry="r", expected=expected)


def test_receipt_proves_the_result_was_logged(site: Site, tmp_path: Path) -> None:
    client, receipt = _receipt(site, tmp_path)
    assert verify_receipt(receipt, client.trusted).checkpoint.size == receipt.tree_size
    grow(site, 10)
    prove_receipt(client, receipt)  # an older receipt stays part of a newer log


def test_tampered_inclusion_proof_refused(site: Site, tmp_path: Path) -> None:
    client, receipt = _receipt(site, tmp_path)
    forged = receipt.model_copy(
        update={"proof": (base64.b64encode(tlog.leaf_hash(b"x")).decode(), *receipt.proof[1:])})
    with pytest.raises(LogProofError, match="not proven to be in the registry's log"):
        verify_receipt(forged, client.trusted)
    shifted = receipt.model_copy(update={"leaf_index": receipt.leaf_index - 1})
    with pytest.raises(LogProofError):
        verify_receipt(shifted, client.trusted)


def test_proof_for_a_result_never_logged_refused(site: Site, tmp_path: Path) -> None:
    client, receipt = _receipt(site, tmp_path)
    with pytest.raises(LogProofError, match="not for the submission of result"):
        verify_receipt(receipt.model_copy(update={"result_id": receipt.result_id + 1}),
                       client.trusted)
    invented = receipt.event.model_copy(update={"payload": json.dumps(
        {"sealed_result_digest": "sha256:" + "9" * 64})})
    with pytest.raises(LogProofError, match="not proven"):
        verify_receipt(receipt.model_copy(update={"event": invented}), client.trusted)
    other_result = {**(receipt.expected or {}), "summary_digest": sha256_digest(b"other")}
    with pytest.raises(LogProofError, match="logged summary_digest"):
        verify_receipt(receipt.model_copy(update={"expected": other_result}), client.trusted)
    with pytest.raises(NotFoundError):
        site.client("hospital").audit_receipt(receipt.result_id + 100)


def test_receipt_signed_by_another_key_refused(site: Site, tmp_path: Path) -> None:
    _, receipt = _receipt(site, tmp_path)
    with pytest.raises(LogSignatureError):
        verify_receipt(receipt, [SignerKey.generate(receipt.origin).verifier()])


# -- the same attacks, as the command line reports them ---------------------------------------


@pytest.fixture
def live(registry: object, cli_home: Path) -> Iterator[Site]:
    """The registry served on a loopback port (the CLI makes its own connections)."""
    reg = registry
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(reg.settings), host="127.0.0.1",  # type: ignore[attr-defined]
                                           port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the test registry did not start"
        time.sleep(0.05)
    try:
        for site in _open(reg.settings, reg.tokens):  # type: ignore[attr-defined]
            site.live_url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
            yield site
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli(site: Site, runner: CliRunner) -> Callable[..., CliResult]:
    key = log_key(site.settings).to_string()
    for name, token in site.tokens.items():
        added = runner.invoke(app, ["profile", "add", name, "--server",
                                    site.live_url, "--token", token, "--no-use",  # type: ignore[attr-defined]
                                    "--log-key", key])
        assert added.exit_code == 0, added.output
    return lambda *args: runner.invoke(app, list(args))


def test_cli_names_the_first_divergent_event_and_keeps_evidence(
    live: Site, runner: CliRunner, cli_home: Path
) -> None:
    cli = _cli(live, runner)
    grow(live, 20)
    assert cli("audit", "verify", "--profile", "admin").exit_code == 0
    rewrite(live, seq=5)
    r = cli("audit", "verify", "--profile", "admin")
    assert r.exit_code == 10, r.output
    assert "first divergent size is 5" in r.output
    evidence = sorted((cli_home / "profiles" / "admin" / "log" / "evidence").iterdir())
    assert evidence and (evidence[-1] / "held.checkpoint").is_file()
    assert (evidence[-1] / "received.checkpoint").is_file()
    r = cli("audit", "checkpoint", "--profile", "hospital")  # pinned at profile add
    assert r.exit_code == 10 and "does not extend the checkpoint" in r.output


def test_cli_prove_shows_and_checks_a_receipt(
    live: Site, runner: CliRunner, tmp_path: Path
) -> None:
    cli = _cli(live, runner)
    result_id, _ = log_result(live, "hospital", "sha256:" + "6" * 64)
    exported = tmp_path / "receipt.json"
    r = cli("audit", "prove", str(result_id), "--profile", "hospital", "--out", str(exported))
    assert r.exit_code == 0, r.output
    assert f"result {result_id} was logged" in r.output
    grow(live, 7)
    r = cli("audit", "prove", str(result_id), "--profile", "modelco", "--receipt", str(exported))
    assert r.exit_code == 0, r.output  # anyone who pinned the key checks it
    forged = json.loads(exported.read_text())
    forged["event"]["payload"] = forged["event"]["payload"].replace("6666", "6667")
    exported.write_text(json.dumps(forged))
    r = cli("audit", "prove", str(result_id), "--profile", "modelco", "--receipt", str(exported))
    assert r.exit_code == 10 and "not proven" in r.output
    assert cli("audit", "prove", "9999", "--profile", "hospital").exit_code == 4
