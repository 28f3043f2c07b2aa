"""TEE-pooled releases (issue 27): the registry's side of pooling inside the TEE.

**Pool inputs** (:func:`candidates`, the benchmark's authority only): one model's accepted
results not yet pooled that can be pooled: the summary carries the site's attested commitment to
its sealed statistics (``pool_statistics``) and the result says where its run left its objects
(``result_uri``). The latest such result per dataset is listed as a
:class:`~sealbench.contract.pool.PoolInputs` document, each input naming its dataset as the run
used it (the dataset's registered coordinates: sealed copy, KMS key, pool provider), its data
digest, its statistics location and commitment. Withheld results are included: pooling is
exactly for the sites too small to publish alone. Left out, and listed with the reason: results
whose dataset or model association is withdrawn, whose dataset has no coordinates, or whose
dataset's remaining privacy budget cannot pay one more release of the pin.

**Pooled releases** (:func:`submit`, the authority): the aggregator's ``pooled.sealed`` (its
exact bytes: the release sealed to the registry's pool-release key, which the authority cannot
open), ``pooled.token`` and the inputs document it was asked to pool. Verified like results
(:meth:`~sealbench.server.verification.ResultVerifier.verify_pooled`: trusted issuer, signature,
expiry, audience ``sealbench-pool``, the nonce of the sealed bytes, the benchmark's aggregator
image, the platform's production rules, the aggregate spec's uid fields (the recipient being the
benchmark's pool recipient) and the inputs digest as attested overrides) and not a replay; only
then opened with the registry's key (:mod:`sealbench.server.poolkey`); then refused, naming the
run, when its inputs are not exactly those of the
document (one omitted or added), when an input is not an accepted, unpooled result of that
model in that benchmark on the dataset it names, or carries another commitment than the stored
summary's (stale); refused when the plug-in's pooled parser refuses its aggregates or its
release is not the one the pin declares, and when it was submitted before (the nonce is
unique). Accepted, in one transaction: the release, one :class:`~sealbench.server.models.
PooledInput` per result (a result is pooled once), one debit per included dataset
(:func:`~.budgets.charge_pooled`; the whole release is refused when one of them cannot pay) and
the audit events (``pooled_release.submit``, then each ``privacy.debit``).

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
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from pydantic import ValidationError
from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from sealbench.benchmarks.interface import BenchmarkError
from sealbench.benchmarks.pooling import parse_pooled_summary, pooled_release_spec
from sealbench.benchmarks.registry import load as load_plugin
from sealbench.contract.pool import (
    MAX_POOL_INPUTS,
    PooledRelease,
    PoolInputs,
    pool_recipient_digest,
)
from sealbench.contract.result import ResultFormatError
from sealbench.crypto.errors import CryptoError
from sealbench.crypto.sealing import open_sealed, pooled_release_info, public_key_to_raw
from sealbench.server.audit import append_event
from sealbench.server.auth import Principal
from sealbench.server.errors import (
    ConflictError,
    InvalidStateError,
    NotFoundError,
    PermissionDeniedError,
    ResultRejectedError,
)
from sealbench.server.models import (
    Benchmark,
    Dataset,
    DatasetCoordinates,
    Model,
    PooledInput,
    Result,
)
from sealbench.server.models import PooledRelease as PooledReleaseRow
from sealbench.server.schemas.pools import PooledReleaseCreate
from sealbench.server.services._common import commit, flush, get_or_404
from sealbench.server.services.associations import exact_release_consented, is_approved
from sealbench.server.services.benchmark_plugins import PluginLookup, declared_release, plugin_of
from sealbench.server.services.budgets import (
    charge_pooled,
    checked_release,
    ledger_of,
    lock_ledger,
)
from sealbench.server.verification import ResultVerifier

__all__ = ["Candidates", "LeftOut", "candidates", "inputs_of", "list_releases", "submit",
           "visible_releases"]


@dataclass(frozen=True)
class LeftOut:
    result_id: int
    dataset_id: int
    run_id: str | None
    reason: str


@dataclass(frozen=True)
class Candidates:
    benchmark_id: int
    model_id: int
    inputs: PoolInputs | None
    left_out: tuple[LeftOut, ...]


def _authority(session: Session, actor: Principal, benchmark_id: int) -> Benchmark:
    bench = get_or_404(session, Benchmark, benchmark_id, "benchmark")
    if bench.owner_id != actor.user_id:
        raise PermissionDeniedError("only the benchmark's authority pools its results")
    if bench.state != "approved":
        raise InvalidStateError(f"benchmark {bench.id} is {bench.state}, not approved")
    if bench.aggregator_image_digest is None:
        raise InvalidStateError(
            f"benchmark {bench.id} does not pool in the TEE (it names no aggregator image)")
    return bench


def _run_id(result: Result) -> str | None:
    run = result.summary.get("run_id") if isinstance(result.summary, dict) else None
    return run if isinstance(run, str) else None


def _commitment(result: Result) -> str | None:
    found = result.summary.get("pool_statistics") if isinstance(result.summary, dict) else None
    return found if isinstance(found, str) else None


def _unpooled(session: Session, benchmark_id: int, model_id: int) -> list[Result]:
    """The model's accepted results in the benchmark that no pooled release used, by id."""
    pooled = select(PooledInput.result_id)
    return list(session.scalars(
        select(Result).where(Result.benchmark_id == benchmark_id, Result.model_id == model_id,
                             Result.id.not_in(pooled))
        .order_by(Result.id)).all())


def candidates(session: Session, actor: Principal, benchmark_id: int, model_id: int, *,
               plugins: PluginLookup = load_plugin) -> Candidates:
    """The model's pool inputs and the results left out (module docstring)."""
    bench = _authority(session, actor, benchmark_id)
    model = get_or_404(session, Model, model_id, "model")
    if not is_approved(session, "model", bench.id, model.id):
        raise InvalidStateError(f"model {model.id} is not approved in benchmark {bench.id}")
    spec = declared_release(bench.metrics_version, plugins)
    rho = None if spec is None else spec.rho
    latest: dict[int, Result] = {}
    left_out: list[LeftOut] = []
    for result in _unpooled(session, bench.id, model.id):
        if _commitment(result) is None or result.result_uri is None:
            continue  # sealed no statistics, or said not where: nothing a pool can read
        older = latest.get(result.dataset_id)
        if older is not None:
            left_out.append(LeftOut(older.id, older.dataset_id, _run_id(older),
                                    "a later result of the same dataset is pooled instead"))
        latest[result.dataset_id] = result
    inputs: list[dict[str, Any]] = []
    for dataset_id in sorted(latest):
        result = latest[dataset_id]
        run_id = _run_id(result)

        def leave(reason: str, result: Result = result, run_id: str | None = run_id) -> None:
            left_out.append(LeftOut(result.id, result.dataset_id, run_id, reason))

        dataset = session.get(Dataset, dataset_id)
        coords = session.scalars(select(DatasetCoordinates).where(
            DatasetCoordinates.asset_id == dataset_id)).first()
        if dataset is None or run_id is None:
            leave("the result's summary names no run")
            continue
        if not is_approved(session, "dataset", bench.id, dataset_id):
            leave(f"dataset {dataset_id} is no longer approved in the benchmark")
            continue
        if coords is None:
            leave(f"dataset {dataset_id} has no registered coordinates (sealed copy and key)")
            continue
        if rho is not None and ledger_of(session, dataset).ledger.releases_left(rho) < 1:
            leave(f"dataset {dataset_id}'s remaining privacy budget cannot pay this "
                  "benchmark's release")
            continue
        if len(inputs) >= MAX_POOL_INPUTS:
            leave(f"a pool reads at most {MAX_POOL_INPUTS} results; pool again for the rest")
            continue
        inputs.append({
            "run_id": run_id,
            "dataset": {"asset_id": str(dataset_id), "uri": coords.storage_uri,
                        "kms_key": coords.kms_key_name, "pool_provider": coords.wip_provider},
            "data_digest": dataset.digest,
            "statistics_uri": result.result_uri,
            "commitment": _commitment(result),
        })
    document = None
    if inputs:
        try:
            document = PoolInputs.model_validate({
                "pool_id": f"pool-{bench.id}-{model.id}-{secrets.token_hex(8)}",
                "benchmark_id": str(bench.id),
                "metrics_version": str(bench.metrics_version),
                "model_id": str(model.id),
                "model_digest": model.digest,
                "inputs": inputs,
            })
        except ValidationError as exc:
            raise InvalidStateError(
                f"the pool inputs of model {model.id} do not form a valid document "
                f"({exc.error_count()} errors: a stored location is malformed)") from None
    return Candidates(bench.id, model.id, document,
                      tuple(sorted(left_out, key=lambda lo: (lo.dataset_id, lo.result_id))))


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
    """Each input as (result, dataset, commitment), checked against the stored results; 409
    naming the run for an omitted, added, unknown, already pooled or stale input."""
    asked = {i.run_id: i for i in inputs.inputs}
    used = {i.run_id: i for i in release.inputs}
    for run_id in asked:
        if run_id not in used:
            raise ConflictError(f"the pooled release omits run {run_id}, which it was asked to "
                                "pool; nothing was stored")
    for run_id in used:
        if run_id not in asked:
            raise ConflictError(f"the pooled release adds run {run_id}, which it was not asked "
                                "to pool; nothing was stored")
    candidates: dict[str, Result] = {}
    for stored_result in _unpooled(session, bench.id, model.id):
        stored_run = _run_id(stored_result)
        if stored_run is not None and stored_run in asked:
            candidates[stored_run] = stored_result  # the latest result of a run (ids ascend)
    matched = []
    for run_id, wanted in asked.items():
        result = candidates.get(run_id)
        if result is None:
            raise ConflictError(
                f"run {run_id} is not an accepted, unpooled result of model {model.id} in "
                f"benchmark {bench.id}; nothing was stored")
        dataset = session.get(Dataset, result.dataset_id)
        if dataset is None or str(dataset.id) != wanted.dataset.asset_id:
            raise ConflictError(f"run {run_id}: its result is of another dataset than the "
                                "inputs name; nothing was stored")
        if wanted.data_digest != dataset.digest:
            raise ConflictError(f"run {run_id}: the inputs name another data digest than "
                                f"dataset {dataset.id}'s; nothing was stored")
        stored = _commitment(result)
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
    """Verify, open and store a pooled release, debiting every included dataset (module
    docstring). ``pool_key`` is the registry's pool-release key
    (:mod:`sealbench.server.poolkey`)."""
    bench = _authority(session, actor, benchmark_id)
    aggregator, recipient = bench.aggregator_image_digest, bench.pool_recipient_key
    assert aggregator is not None  # _authority refuses a benchmark without one
    if recipient is None or base64.b64decode(recipient) != public_key_to_raw(
            pool_key.public_key()):
        raise InvalidStateError(
            f"benchmark {bench.id}'s pooled releases are sealed to another pool-release key "
            "than this registry's (the key file was replaced): they pool under a new version")
    sealed, inputs = _documents(body)
    try:
        model_id = int(inputs.model_id)
    except ValueError:
        raise ResultRejectedError("the inputs name no registered model") from None
    model = session.get(Model, model_id)
    if model is None:
        raise NotFoundError("model", inputs.model_id)
    verified = verifier.verify_pooled(
        body.attestation_token, release=sealed, aggregator_image_digest=aggregator,
        benchmark_id=str(bench.id), metrics_version=bench.metrics_version,
        model_digest=model.digest, inputs_digest=inputs.digest(),
        recipient_digest=pool_recipient_digest(recipient),
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
    if dp is not None and dp.exact:
        for _, dataset, _ in matched:
            if not exact_release_consented(session, bench.id, dataset.id):
                raise ResultRejectedError(
                    f"an exact (non-private) pooled release including dataset {dataset.id}, "
                    f"whose owner has not consented to exact releases in benchmark {bench.id}")
    # every ledger locked and checked before anything is written: one dataset that cannot pay
    # refuses the whole release
    if dp is not None:
        for _, dataset, _ in matched:
            lock_ledger(session, dataset).after(dp)
    row = PooledReleaseRow(
        benchmark_id=bench.id, model_id=model.id, submitted_by_id=actor.user_id,
        release=release.model_dump(mode="json"), sealed_release=sealed,
        inputs_digest=release.inputs_digest,
        attestation_token=body.attestation_token, token_issuer=verified.issuer,
        image_digest=verified.image_digest, nonce=verified.nonce, n_sites=len(matched),
        n_cases=release.n_cases, created_at=now)
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
    if dp is not None:
        # each dataset once; datasets of one budget group read the group's spend after the
        # debits written before them (autoflush), so the group pays for each of them, and one
        # that no longer fits refuses the whole release (nothing is committed)
        for _, dataset, _ in matched:
            charge_pooled(session, actor, lock_ledger(session, dataset), row, dp, now)
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
            "result_id": result.id, "run_id": _run_id(result) or "", "dataset_id":
            result.dataset_id, "commitment": link.commitment})
    return out
