"""The results of this machine's runs, as the data owner: open one (its signature checked
against the profile's attestation verifier, :func:`open_local_result`) and submit its public
summary to the registry (:func:`submit_local_result`). ``sealbench result open|submit`` and the
demo call these; they only render."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from sealbench.client.assets.accounts import profile_account
from sealbench.client.assets.result_key import load_result_private_key
from sealbench.client.registry.api import RegistryClient
from sealbench.client.registry.profiles import ResolvedProfile
from sealbench.client.runs.attestation_keys import (
    KEYS_DIR,
    AttestationKeysUnavailableError,
    HttpxKeySetFetcher,
    KeyCache,
    KeySource,
    token_kid,
)
from sealbench.client.runs.records import RunRecord, RunStore
from sealbench.client.runs.result_open import OpenedResult
from sealbench.client.runs.submit import (
    link_result,
    open_run_result,
    result_submission,
    submit_run_result,
)
from sealbench.server.schemas import ResultCreate, ResultPublic

__all__ = [
    "Submission",
    "SubmissionDeclined",
    "open_local_result",
    "run_store",
    "submit_local_result",
    "verifier_key_source",
]

log = logging.getLogger("sealbench.client")


def run_store(profile: ResolvedProfile) -> RunStore:
    """The profile's record of the runs launched from this machine."""
    return RunStore(profile.data_dir / "runs")


def verifier_key_source(profile: ResolvedProfile) -> KeySource:
    """The attestation verifier of the profile's account, as its platform names it (the
    running mock's, Google's or the profile's ``attestation`` override, another platform's:
    its key set found by OpenID discovery when no URL is named)."""
    account = profile_account(profile)
    if account is not None:
        routes = account.routes()
        return KeySource(routes.verifier.issuer, routes.verifier.jwks_url, hint=routes.key_hint)
    raise AttestationKeysUnavailableError(
        f"profile {profile.name} names no cloud, so no attestation verifier to check the "
        "result's signature with",
        hint="add the profile again with --cloud gcp --project P or --mock-tee DIR, or pass "
        "--unverified",
    )


def open_local_result(
    profile: ResolvedProfile, run_id: str, *, unverified: bool = False, lenient: bool = False
) -> tuple[RunRecord, OpenedResult]:
    """Open a run's result, its token's signature checked against the keys of the profile's
    attestation verifier (fetched, or cached in the profile's data directory); not checked only
    with ``unverified`` (the user's ``--unverified``) or, with ``lenient`` (submit: the
    registry checks it), when the keys cannot be had."""
    record = run_store(profile).get(run_id)
    private_key = load_result_private_key(profile.secrets_dir)
    if unverified:
        log.warning("opening run %s without checking its signature (--unverified)", run_id)
        return record, open_run_result(record, private_key, None)
    cache = KeyCache(profile.data_dir / KEYS_DIR, HttpxKeySetFetcher())
    try:
        source = verifier_key_source(profile)
        return record, open_run_result(
            record, private_key, lambda token: cache.get(source, token_kid(token))
        )
    except AttestationKeysUnavailableError as exc:
        if not lenient:
            raise
        log.warning("%s; the registry checks the signature", exc)
        return record, open_run_result(record, private_key, None)


class SubmissionDeclined(Exception):  # noqa: N818 - the user's answer, not a failure
    """The ``confirm`` callback of :func:`submit_local_result` said no: nothing was sent."""


@dataclass(frozen=True)
class Submission:
    """A submitted run: its record, its opened result, the registry's result, the results the
    registry held before for the same (dataset, model), and whether the run was already that
    result (nothing sent)."""

    record: RunRecord
    opened: OpenedResult
    result: ResultPublic
    earlier: tuple[ResultPublic, ...]
    already_submitted: bool

    @property
    def superseded(self) -> ResultPublic | None:
        """The latest earlier result of the pair, which this one replaces on the leaderboard
        (None: the first, or already submitted)."""
        if self.already_submitted or not self.earlier:
            return None
        return max(self.earlier, key=lambda r: r.id)


def submit_local_result(
    profile: ResolvedProfile,
    client: RegistryClient,
    run_id: str,
    *,
    confirm: Callable[[ResultCreate], bool] | None = None,
) -> Submission:
    """Send the run's public summary, sealed-result digest and attestation token (the registry
    verifies the attestation). A run whose sealed result the registry already holds is linked
    to it and nothing is sent; otherwise ``confirm(body)`` decides (None: send), and
    :class:`SubmissionDeclined` when it says no."""
    record, opened = open_local_result(profile, run_id, lenient=True)
    earlier = tuple(
        r for r in client.list_results(record.benchmark_id)
        if (r.dataset_id, r.model_id) == (record.dataset_id, record.model_id)
    )
    twin = next((r for r in earlier if r.sealed_result_digest == opened.sealed_result_sha256),
                None)
    if twin is not None:
        link_result(client, record, twin, run_store(profile))
        return Submission(record, opened, twin, earlier, already_submitted=True)
    body = result_submission(record, opened)
    if confirm is not None and not confirm(body):
        raise SubmissionDeclined(f"run {run_id}: not sent")
    result = submit_run_result(client, record, body, run_store(profile))
    return Submission(record, opened, result, earlier, already_submitted=False)
