"""A succeeded run's result, as the data owner handles it: fetched from its cloud destination
into a local folder, opened and verified (:mod:`sealbench.client.runs.result_open`), submitted
to the registry and linked to the run's record, and its receipt from the registry's audit log
kept.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

from pydantic import JsonValue

from sealbench.client.errors import ClientError, CloudError, ConfigError, IntegrityError
from sealbench.client.registry.api import RegistryClient
from sealbench.client.registry.audit_log import profile_monitor, receipts_of
from sealbench.client.registry.profiles import ProfileStore, ResolvedProfile
from sealbench.client.registry.receipts import Receipt, expected_digests, fetch_receipt
from sealbench.client.runs.records import RunRecord, RunStore, report_of
from sealbench.server.schemas import ResultCreate, ResultPublic

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    from sealbench.client.runs.attestation_keys import IssuerKeys
    from sealbench.client.runs.result_open import OpenedResult
    from sealbench.platforms.storage import BlobStore

__all__ = [
    "fetch_run_result",
    "keep_result_receipt",
    "link_result",
    "open_run_result",
    "result_submission",
    "submit_run_result",
]

log = logging.getLogger("sealbench.client")


def open_run_result(
    record: RunRecord,
    private_key: X25519PrivateKey,
    keys: Callable[[str], IssuerKeys] | None,
    *,
    now: Callable[[], float] = time.time,
) -> OpenedResult:
    """Download and open a succeeded run's result
    (:func:`sealbench.client.runs.result_open.open_result` checks: the token's signature and
    lifetime against the attestation verifier's key set that ``keys`` returns for the token
    (:meth:`sealbench.client.runs.attestation_keys.KeyCache.get` for the profile's platform),
    nonce binding, decryption, consistency). ``keys`` is None only on
    the user's explicit ``--unverified``: the signature is then not checked, and the opened
    result says so (``signature_verified`` False)."""
    from sealbench.client.runs.result_open import (
        ResultVerificationError,
        download_result,
        open_result,
    )

    if record.status != "succeeded":
        raise ConfigError(
            f"run {record.run_id} {record.status}; it has no result",
            hint="run it again with 'sealbench run ... --force'",
        )
    from sealbench.platforms.storage import open_storage_uri

    store, prefix = open_storage_uri(record.result_uri)
    try:
        objects = download_result(store, prefix)
        if keys is None:
            return open_result(objects, private_key)
        verifier = keys(objects.token)
        return open_result(objects, private_key, jwks=verifier.jwks, issuer=verifier.issuer,
                           now=now())
    except ResultVerificationError as exc:
        raise IntegrityError(f"the result of run {record.run_id} does not verify: {exc}") from exc


def fetch_run_result(
    record: RunRecord,
    open_store: Callable[[str], tuple[BlobStore, str]],
    results_dir: Path,
    store: RunStore,
) -> RunRecord:
    """Copy a succeeded run's result objects from its Cloud Storage destination (a
    Confidential Space VM cannot write this machine's folders) into ``results_dir/RUN_ID``,
    through ``open_store`` (the owner's own cloud), and record the local copy; the copy is
    written to a temporary folder and renamed only when complete. ``result open`` and
    ``result submit`` then work on it."""
    from sealbench.client.runs.result_open import ResultVerificationError, download_result
    from sealbench.contract.result import SEALED_OBJECT, SUMMARY_OBJECT, TOKEN_OBJECT

    if record.status != "succeeded":
        raise ConfigError(
            f"run {record.run_id} {record.status}; it has no result to fetch",
            hint="run it again with 'sealbench run ... --force'",
        )
    if record.result_uri.startswith("file://"):
        return record  # already on this machine
    remote, prefix = open_store(record.result_uri)
    try:
        objects = download_result(remote, prefix)
    except ResultVerificationError as exc:
        raise CloudError(f"cannot fetch the result of run {record.run_id}: {exc}") from exc
    target = results_dir / record.run_id
    if target.exists():
        raise ConfigError(
            f"{target} exists; it holds an earlier copy", hint=f"remove {target} and fetch again"
        )
    results_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = Path(tempfile.mkdtemp(prefix=f".{record.run_id}.partial-", dir=results_dir))
    try:
        for name, data in (
            (SUMMARY_OBJECT, objects.summary),
            (SEALED_OBJECT, objects.sealed),
            (TOKEN_OBJECT, objects.token.encode()),
        ):
            (tmp / name).write_bytes(data)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    fetched = record.model_copy(update={"result_uri": target.resolve().as_uri(),
                                        "spec_result_uri": record.result_uri})
    store.save(fetched)
    return fetched


def result_submission(record: RunRecord, opened: OpenedResult) -> ResultCreate:
    """What ``result submit`` sends: the public summary, the sealed result's digest, the
    result attestation token (the registry verifies the token before storing anything) and
    the run spec's result location (where the run left its objects)."""
    return ResultCreate(
        benchmark_id=record.benchmark_id,
        dataset_id=record.dataset_id,
        model_id=record.model_id,
        # parsed from the summary's JSON bytes, so every value is a JSON value
        summary=cast("dict[str, JsonValue]", opened.summary_json),
        sealed_result_digest=opened.sealed_result_sha256,
        attestation_token=opened.token,
        # where the run left its objects (a pooling benchmark's aggregator reads there)
        result_uri=record.spec_result_uri or record.result_uri,
    )


def submit_run_result(
    client: RegistryClient, record: RunRecord, body: ResultCreate, store: RunStore
) -> ResultPublic:
    """Send ``body`` (:func:`result_submission`) and link the accepted result to the run."""
    result = client.submit_result(body)
    link_result(client, record, result, store)
    return result


def link_result(client: RegistryClient, record: RunRecord, result: ResultPublic,
                store: RunStore) -> None:
    """Record that ``result`` holds ``record``'s run, here and on the registry (nothing to do
    when the record already says so: a submission run again)."""
    if record.result_id == result.id:
        return
    linked = record.model_copy(update={"result_id": result.id, "seq": record.seq + 1})
    store.save(linked)
    try:
        client.report_run(linked.run_id, report_of(linked))
    except ClientError as exc:  # the result is in; its link to the run can be reported later
        log.warning("could not link result %s to run %s on the registry: %s",
                    result.id, linked.run_id, exc)


def keep_result_receipt(
    client: RegistryClient, profile: ResolvedProfile, store: ProfileStore, result_id: int,
    opened: OpenedResult,
) -> tuple[Receipt, Path]:
    """After a result is submitted: fetch its receipt, check it proves exactly the result this
    machine holds (its digests) in the log this profile verified, and keep it."""
    expected = expected_digests(opened.sealed_result_sha256, opened.summary_json, opened.token)
    receipt = fetch_receipt(profile_monitor(client, profile, store),
                            client.audit_receipt(result_id), registry=profile.server,
                            expected=expected)
    return receipt, receipts_of(profile).save(receipt)
