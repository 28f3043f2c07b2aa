"""TEE-pooled releases (issue 27): the registry's side of pooling inside the TEE.

**What a pool covers** is the registry's choice and is debited before any draw
(:mod:`sealbench.server.services.pool_authorizations`: the authority names a model, the registry
picks every current approved site's latest accepted result, debits each ledger on the log and
signs the authorization the aggregator verifies).

**Pooled releases** (:func:`submit`, the authority): the aggregator's ``pooled.sealed`` (its
exact bytes: the release sealed to the registry's pool-release key, which the authority cannot
open), ``pooled.token`` and the inputs document of the authorization it spent. Refused unless
the registry authorized exactly that document; refused when the authorization already produced
a release (a relaunch yields that very release). Verified like results
(:meth:`~sealbench.server.verification.ResultVerifier.verify_pooled`: trusted issuer, signature,
expiry, audience ``sealbench-pool``, the nonce of the sealed bytes, the benchmark's aggregator
image, the platform's production rules, the aggregate spec's uid fields (the recipient being the
benchmark's pool anchor) and the inputs digest as attested overrides) and not a replay; only
then opened with the registry's key (:mod:`sealbench.server.poolkey`); then refused, naming the
run, when its inputs are not exactly the authorization's, when an input is no longer the latest
accepted result of its dataset or carries another commitment (stale), when a dataset or the
model is no longer approved (withdrawn since the authorization: its debit stands, its figure is
not published); refused when the plug-in's pooled parser refuses its aggregates or its release
is not the one the pin declares. Accepted, in one transaction: the release, one
:class:`~sealbench.server.models.PooledInput` per result and the ``pooled_release.submit``
event. Nothing is debited here: the authorization was.

**Reading** (:func:`list_releases`): the releases the caller may see under the leaderboard's
rules: every one for the authority or when the benchmark publishes its leaderboard, else those
of the caller's own models. A hospital sees no pooled figure of other sites' data unless the
board is published (as on the pooled leaderboard, where its figures are pooled from its own
results only).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from pydantic import ValidationError
from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from sealbench.benchmarks.interface import BenchmarkError
from sealbench.benchmarks.pooling import parse_pooled_summary, pooled_release_spec, summary_loss
from sealbench.benchmarks.registry import load as load_plugin
from sealbench.contract.pool import PooledRelease, PoolInputs
from sealbench.contract.result import ResultFormatError
from sealbench.crypto.errors import CryptoError
from sealbench.crypto.sealing import open_sealed, pooled_release_info, public_key_to_raw
from sealbench.server.audit import append_event
from sealbench.server.auth import Principal
from sealbench.server.errors import (
    ConflictError,
    InvalidStateError,
    NotFoundError,
    ResultRejectedError,
)
from sealbench.server.models import Benchmark, Dataset, Model, PooledInput, Result
from sealbench.server.models import PoolAuthorization as AuthorizationRow
from sealbench.server.models import PooledRelease as PooledReleaseRow
from sealbench.server.schemas.pools import PooledReleaseCreate
from sealbench.server.services._common import commit, flush, get_or_404
from sealbench.server.services.associations import exact_release_consented, is_approved
from sealbench.server.services.benchmark_plugins import PluginLookup, plugin_of
from sealbench.server.services.budgets import checked_release
from sealbench.server.services.pool_authorizations import (
    anchor_of,
    authority_benchmark,
    commitment_of,
    run_id_of,
)
from sealbench.server.verification import ResultVerifier

__all__ = ["get_release", "inputs_of", "list_releases", "submit", "visible_releases"]


# -- submitting a pooled release ------------------------------------------------------------------


def _documents(body: PooledReleaseCreate) -> tuple[bytes, PoolInputs]:
    try:
        sealed = base64.b64decode(body.sealed_release_b64, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ResultRejectedError("sealed_release_b64: not base64") from exc
    try:
        inputs = PoolInputs.model_validate(body.inputs)
    except ValidationError as exc:
        raise ResultRejectedError(
            f"inputs: not a sealbench/pool-inputs document ({exc.error_count()} errors)") from None
    return sealed, inputs


def _opened(bench: Benchmark, aggregator: str, pool_key: X25519PrivateKey, sealed: bytes,
            inputs: PoolInputs) -> tuple[bytes, PooledRelease]:
    """The release inside ``sealed`` (``pooled.json``'s bytes and document), opened with the
    registry's pool-release key under the pool's, benchmark's and aggregator image's info."""
    info = pooled_release_info(inputs.pool_id, str(bench.id), aggregator)
    try:
        raw = open_sealed(sealed, pool_key, info)
    except CryptoError:
        raise ResultRejectedError(
            "the pooled release does not open under this registry's pool-release key for this "
            "pool and aggregator image (sealed to another key or pool, or altered)") from None
    try:
        return raw, PooledRelease.from_bytes(raw)
    except ResultFormatError as exc:
        raise ResultRejectedError(f"the pooled release: {exc}") from None


def _same_subject(bench: Benchmark, model: Model, release: PooledRelease,
                  inputs: PoolInputs) -> None:
    for what, doc_bench, doc_pin, doc_model, doc_digest in (
            ("release", release.benchmark_id, release.metrics_version, release.model_id,
             release.model_digest),
            ("inputs document", inputs.benchmark_id, inputs.metrics_version, inputs.model_id,
             inputs.model_digest)):
        if (doc_bench, str(doc_pin)) != (str(bench.id), str(bench.metrics_version)):
            raise ResultRejectedError(f"the {what} is of another benchmark or metrics version")
        if (doc_model, doc_digest) != (str(model.id), model.digest):
            raise ResultRejectedError(f"the {what} is of another model than {model.id}")
    if release.pool_id != inputs.pool_id:
        raise ResultRejectedError("the release is of another pool than the inputs document's")
    if release.inputs_digest != inputs.digest():
        raise ResultRejectedError(
            "the release pooled another inputs document than the one submitted (inputs digest)")


def _matched(session: Session, bench: Benchmark, model: Model, release: PooledRelease,
             inputs: PoolInputs) -> list[tuple[Result, Dataset, str]]:
    """Each authorized input as (result, dataset, commitment), checked against the stored
    results and approvals again at submit: 409 naming the run for an omitted, added or stale
    input, and for a dataset or model no longer approved (withdrawn since the authorization:
    its figure is not published, though its debit stands)."""
    asked = {i.run_id: i for i in inputs.inputs}
    used = {i.run_id: i for i in release.inputs}
    for run_id in asked:
        if run_id not in used:
            raise ConflictError(f"the pooled release omits run {run_id}, which it was "
                                "authorized to pool; nothing was stored")
    for run_id in used:
        if run_id not in asked:
            raise ConflictError(f"the pooled release adds run {run_id}, which it was not "
                                "authorized to pool; nothing was stored")
    if not is_approved(session, "model", bench.id, model.id):
        raise ConflictError(f"model {model.id} is no longer approved in benchmark {bench.id}: "
                            "its pooled release is not published; nothing was stored")
    matched = []
    for run_id, wanted in asked.items():
        result = session.scalars(select(Result).where(
            Result.benchmark_id == bench.id, Result.model_id == model.id,
            Result.dataset_id == int(wanted.dataset.asset_id)).order_by(Result.id.desc())
        ).first()
        if result is None or run_id_of(result) != run_id:
            raise ConflictError(
                f"run {run_id} is no longer the latest accepted result of model {model.id} on "
                f"dataset {wanted.dataset.asset_id}; nothing was stored")
        dataset = session.get(Dataset, result.dataset_id)
        if dataset is None or wanted.data_digest != dataset.digest:
            raise ConflictError(f"run {run_id}: the authorization names another data digest "
                                f"than dataset {result.dataset_id}'s; nothing was stored")
        if inputs.exact and not exact_release_consented(session, bench.id, dataset.id):
            raise ConflictError(
                f"dataset {dataset.id}'s owner no longer consents to exact releases in "
                f"benchmark {bench.id}; nothing was stored")
        if not is_approved(session, "dataset", bench.id, dataset.id):
            raise ConflictError(
                f"dataset {dataset.id} is no longer approved in benchmark {bench.id} (withdrawn "
                "since the pool was authorized): the pooled release is not published; nothing "
                "was stored")
        stored = commitment_of(result)
        if stored is None or wanted.commitment != stored or used[run_id].commitment != stored:
            raise ConflictError(
                f"run {run_id}: the pooled statistics' commitment is not the one its accepted "
                "result carries (stale or substituted); nothing was stored")
        if used[run_id].dataset_id != str(dataset.id):
            raise ConflictError(f"run {run_id}: the release names another dataset than its "
                                "result's; nothing was stored")
        matched.append((result, dataset, stored))
    return matched


def submit(session: Session, actor: Principal, benchmark_id: int, body: PooledReleaseCreate,
           verifier: ResultVerifier, now: datetime, *, pool_key: X25519PrivateKey,
           plugins: PluginLookup = load_plugin) -> PooledReleaseRow:
    """Verify, open and store the pooled release of an authorization (module docstring); its
    debits were charged when the pool was authorized, so nothing is debited here. ``pool_key``
    is the registry's pool-release key (:mod:`sealbench.server.poolkey`)."""
    bench = authority_benchmark(session, actor, benchmark_id)
    anchor = anchor_of(bench)
    aggregator = bench.aggregator_image_digest
    assert aggregator is not None  # authority_benchmark refuses a benchmark without one
    if base64.b64decode(anchor.recipient_key) != public_key_to_raw(pool_key.public_key()):
        raise InvalidStateError(
            f"benchmark {bench.id}'s pooled releases are sealed to another pool-release key "
            "than this registry's (the key file was replaced): they pool under a new version")
    sealed, asked = _documents(body)
    authorization = session.scalars(select(AuthorizationRow).where(
        AuthorizationRow.benchmark_id == bench.id,
        AuthorizationRow.pool_id == asked.pool_id).with_for_update()).first()
    if authorization is None:
        raise ResultRejectedError(
            f"pool {asked.pool_id} was never authorized by this registry for benchmark "
            f"{bench.id}: a pool's inputs are the registry's choice; nothing was stored")
    if asked.digest() != authorization.inputs_digest:
        raise ResultRejectedError(
            f"the inputs submitted are not the ones authorization {asked.pool_id} names; "
            "nothing was stored")
    inputs = PoolInputs.from_bytes(authorization.inputs)
    released = session.scalars(select(PooledReleaseRow.id).where(
        PooledReleaseRow.authorization_id == authorization.id)).first()
    if released is not None:
        raise ConflictError(
            f"authorization {inputs.pool_id} already produced pooled release {released} (run "
            "again, the aggregator yields that same release); nothing was stored or debited")
    model = get_or_404(session, Model, authorization.model_id, "model")
    verified = verifier.verify_pooled(
        body.attestation_token, release=sealed, aggregator_image_digest=aggregator,
        benchmark_id=str(bench.id), metrics_version=bench.metrics_version,
        model_digest=model.digest, inputs_digest=authorization.inputs_digest,
        recipient_digest=anchor.digest(),
        accept_experimental_gpu=bench.accept_experimental)
    taken = select(PooledReleaseRow.id).where(PooledReleaseRow.nonce == verified.nonce)
    if session.scalars(taken).first() is not None:
        raise ConflictError("this pooled release was already submitted (replayed token)")
    raw, release = _opened(bench, aggregator, pool_key, sealed, inputs)
    _same_subject(bench, model, release, inputs)
    matched = _matched(session, bench, model, release, inputs)
    plugin = plugin_of(bench.metrics_version, plugins)
    try:
        summary = parse_pooled_summary(plugin, release.aggregates)
    except (BenchmarkError, TypeError, ValueError) as exc:
        raise ResultRejectedError(
            f"the pooled release's aggregates do not validate against {plugin.ref}'s pooled "
            f"schema ({exc})") from None
    if summary.n_cases != release.n_cases:
        raise ResultRejectedError(
            f"the pooled release states {release.n_cases} cases and its aggregates "
            f"{summary.n_cases}")
    dp = checked_release(plugin, summary, pooled_release_spec(plugin))
    if dp is not None and summary_loss(summary) != inputs.loss:  # every release it carries
        raise ResultRejectedError(
            "the pooled release's privacy loss is not the one its authorization debited")
    row = PooledReleaseRow(
        benchmark_id=bench.id, model_id=model.id, submitted_by_id=actor.user_id,
        release=release.model_dump(mode="json"), sealed_release=sealed,
        inputs_digest=release.inputs_digest,
        attestation_token=body.attestation_token, token_issuer=verified.issuer,
        image_digest=verified.image_digest, nonce=verified.nonce, n_sites=len(matched),
        n_cases=release.n_cases, created_at=now, authorization_id=authorization.id)
    session.add(row)
    flush(session, "pooled release")
    for result, _, commitment in matched:
        session.add(PooledInput(pooled_release_id=row.id, result_id=result.id,
                                commitment=commitment))
    flush(session, "pooled release")
    append_event(
        session, actor_id=actor.user_id, action="pooled_release.submit",
        entity_type="pooled_release", entity_id=row.id,
        payload={
            "benchmark_id": bench.id,
            "model_id": model.id,
            "pool_id": release.pool_id,
            "authorization_seq": authorization.audit_seq,
            "inputs_digest": release.inputs_digest,
            "release_sha256": "sha256:" + hashlib.sha256(raw).hexdigest(),
            "sealed_sha256": "sha256:" + hashlib.sha256(sealed).hexdigest(),
            "nonce": verified.nonce,
            "issuer": verified.issuer,
            "image_digest": verified.image_digest,
            "inputs": [{"result_id": r.id, "dataset_id": d.id, "commitment": c}
                       for r, d, c in matched],
        },
        now=now)
    commit(session, "pooled release")
    return row


# -- reading ----------------------------------------------------------------------------------


def _visible(actor: Principal, bench: Benchmark) -> ColumnElement[bool]:
    if bench.owner_id == actor.user_id or bench.leaderboard_published:
        return PooledReleaseRow.benchmark_id == bench.id
    return (PooledReleaseRow.benchmark_id == bench.id) & PooledReleaseRow.model_id.in_(
        select(Model.id).where(Model.owner_id == actor.user_id))


def visible_releases(session: Session, actor: Principal, bench: Benchmark
                     ) -> list[PooledReleaseRow]:
    """The benchmark's pooled releases ``actor`` may see, oldest first."""
    return list(session.scalars(select(PooledReleaseRow).where(_visible(actor, bench))
                                .order_by(PooledReleaseRow.id)).all())


def list_releases(session: Session, actor: Principal, benchmark_id: int
                  ) -> list[PooledReleaseRow]:
    bench = get_or_404(session, Benchmark, benchmark_id, "benchmark")
    return visible_releases(session, actor, bench)


def get_release(session: Session, actor: Principal, benchmark_id: int, release_id: int
                ) -> tuple[Benchmark, PooledReleaseRow]:
    """One pooled release of the benchmark that ``actor`` may see (the leaderboard's rules);
    404 for one it may not, as for one that does not exist."""
    bench = get_or_404(session, Benchmark, benchmark_id, "benchmark")
    row = session.scalars(select(PooledReleaseRow).where(
        _visible(actor, bench), PooledReleaseRow.id == release_id)).first()
    if row is None:
        raise NotFoundError("pooled release", release_id)
    return bench, row


def inputs_of(session: Session, rows: Sequence[PooledReleaseRow]
              ) -> Mapping[int, list[dict[str, Any]]]:
    """Each release's pooled inputs: result, run, dataset and commitment."""
    ids = [r.id for r in rows]
    out: dict[int, list[dict[str, Any]]] = {i: [] for i in ids}
    if not ids:
        return out
    for link, result in session.execute(
            select(PooledInput, Result).join(Result, Result.id == PooledInput.result_id)
            .where(PooledInput.pooled_release_id.in_(ids)).order_by(Result.dataset_id)):
        out[link.pooled_release_id].append({
            "result_id": result.id, "run_id": run_id_of(result) or "", "dataset_id":
            result.dataset_id, "commitment": link.commitment})
    return out
