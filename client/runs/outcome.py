"""How a launched run ended, as the client reads and reports it: the enclave's events (per-step
timings, the execution provider), its attested failure record at the result location, and the
client error a failed launch stands for (a key-release refusal with the advice its rule or the
owners' lagging grants call for).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Final, cast

from pydantic import JsonValue

from sealbench.client.errors import (
    ClientError,
    IntegrityError,
    KeyReleaseDeniedError,
    RunFailedError,
)
from sealbench.client.registry.api import RegistryClient
from sealbench.client.runs.records import RunRecord
from sealbench.contract.events import ModelLoaded, RunDone, RunEvent, parse_event
from sealbench.contract.inputs import Rule
from sealbench.server.schemas.runs import (
    EXECUTION_PROVIDERS,
    MAX_FAILURE_RECORD_BYTES,
    MAX_FAILURE_TOKEN_CHARS,
    ExecutionProvider,
)

if TYPE_CHECKING:
    from sealbench.platforms.storage import BlobStore

__all__ = [
    "attested_failure",
    "execution_provider",
    "explain_refusals",
    "provider_of",
    "recorded_failure",
    "step_timings",
    "timings_of",
    "translate_launch_error",
]

log = logging.getLogger("sealbench.client")


def recorded_failure(exc: Exception, result_uri: str) -> Exception:
    """``exc``, made precise by the enclave's failure record when the launcher only knows that
    the workload failed (Confidential Space reports exit code 1 for any failure) and the
    record lies in a local result folder."""
    from sealbench.client.runs.launchers import EnclaveRunFailed
    from sealbench.contract.result import FAILURE_OBJECT, FailureRecord
    from sealbench.platforms.storage import join_name, open_storage_uri

    if not (isinstance(exc, EnclaveRunFailed) and exc.exit_code == 1):
        return exc
    if not result_uri.startswith("file://"):
        return exc
    try:
        store, prefix = open_storage_uri(result_uri)
        raw = store.get_bytes(join_name(prefix, FAILURE_OBJECT), 1 << 20)
        failure = FailureRecord.from_bytes(raw)
    except Exception:  # noqa: BLE001 - no readable record: the launcher's account stands
        return exc
    return EnclaveRunFailed(failure.exit_code, failure.reason, exc.peak_rss_bytes)


def attested_failure(
    result_uri: str, opener: Callable[[str], tuple[BlobStore, str]] | None = None
) -> tuple[dict[str, JsonValue], str] | None:
    """The enclave's failure record and the token that attests it, at the run's result location
    (``failure.json``, ``failure.token``), for the registry to verify; None when either is
    missing, too large or unreadable (the failure is then reported as the hospital's claim). A
    local ``file://`` folder is read directly, another location through ``opener`` (the
    launcher's result store), if any."""
    from sealbench.contract.result import FAILURE_OBJECT, FAILURE_TOKEN_OBJECT, FailureRecord
    from sealbench.platforms.errors import CloudError as StorageError
    from sealbench.platforms.storage import join_name, open_storage_uri

    if result_uri.startswith("file://"):
        opener = open_storage_uri
    if opener is None:
        return None
    try:
        store, prefix = opener(result_uri)
        token_name = join_name(prefix, FAILURE_TOKEN_OBJECT)
        if not store.exists(token_name):
            return None  # a failure before attestation, or an attester that gave no token
        token = store.get_bytes(token_name, MAX_FAILURE_TOKEN_CHARS).decode("ascii").strip()
        raw = store.get_bytes(join_name(prefix, FAILURE_OBJECT), MAX_FAILURE_RECORD_BYTES)
        FailureRecord.from_bytes(raw)  # the enclave's format, nothing more
        record = json.loads(raw)
    except (StorageError, ValueError) as exc:
        log.warning("the enclave's failure record could not be read (%s): the failure is "
                    "reported as a claim", type(exc).__name__)
        return None
    return record, token


def step_timings(line: str) -> dict[str, float]:
    """The enclave's per-step totals (``{"infer": 12.3, ...}``) from its ``done`` event line
    (:mod:`sealbench.contract.events`); empty for any other line."""
    return timings_of(parse_event(line))


def timings_of(event: RunEvent | None) -> dict[str, float]:
    """The per-step totals a ``done`` event carries (rounded to 10 ms); empty for any other
    event."""
    if not isinstance(event, RunDone):
        return {}
    return {name: round(seconds, 2) for name, seconds in event.timings.items()}


def execution_provider(line: str) -> ExecutionProvider | None:
    """The execution provider the enclave names in an event line (:func:`provider_of`); None
    for any other line."""
    return provider_of(parse_event(line))


def provider_of(event: RunEvent | None) -> ExecutionProvider | None:
    """The execution provider an event names: the ``done`` event at the end of a run, or the
    ``model_loaded`` event as soon as the model is loaded (on Confidential Space the last lines
    may never be read, the serial port going away with the VM), when it is one of the known
    :data:`~sealbench.server.schemas.runs.ExecutionProvider` names; None otherwise (any other
    event, or a name outside the set: the enclave's text never reaches the registry as is)."""
    if not isinstance(event, RunDone | ModelLoaded) or event.provider not in EXECUTION_PROVIDERS:
        return None
    return cast("ExecutionProvider", event.provider)


#: The likely cause of a key-release refusal, by the rule of the key owners' condition the
#: enclave's ``failed`` event names (:class:`~sealbench.contract.events.RunFailed`: the enclave
#: reads the clause from the token exchange's error; the mock's STS names it, Google's does
#: not, and then the generic advice stands).
_REFUSAL_ADVICE: Final[Mapping[Rule, str]] = {
    Rule.PRODUCTION_IMAGE: "a debug image is refused by design (its operator has a shell in the "
    "VM): run the production image, without --insecure-debug-image or --debug",
    **dict.fromkeys(
        (Rule.HARDWARE, Rule.SECURE_BOOT),
        "the machine is not confidential hardware with secure boot: use an AMD SEV / SEV-SNP or "
        "Intel TDX confidential VM (Confidential Space sets secure boot)"),
    Rule.ENDPOINT: "the run names token endpoints the key owners did not pin: run it with the "
    "platform's own endpoints (a production run sets none)",
    Rule.NO_COMMAND: "a command override is refused by design: launch the image as it is",
    Rule.IMAGE: "the key owners have not approved this image: check that the run uses the "
    "benchmark's image digest; an owner whose grants lag syncs them with 'sealbench policy "
    "sync'",
}


#: Rules a run breaks by its own launch (the operator's), whatever the owners' grants.
_OPERATOR_RULES: Final = frozenset(
    {Rule.PRODUCTION_IMAGE, Rule.HARDWARE, Rule.SECURE_BOOT, Rule.ENDPOINT, Rule.NO_COMMAND})


def translate_launch_error(exc: Exception, *, lag: str | None = None) -> Exception:
    """The client error a failed launch stands for (by the enclave's exit code). ``lag`` names
    the owners whose grants lag the approvals (:func:`sealbench.client.assets.grants.lag_notice`): a
    key-release refusal then says whose sync is due, unless the enclave's ``failed`` event names
    a rule the run broke by its own launch (a debug image, an endpoint or command override, the
    hardware): the advice keys on the event's failure code and rule, never on the reason's
    text."""
    from sealbench.client.runs.launchers import EnclaveRunFailed
    from sealbench.contract.errors import AssetIntegrityError, KeyReleaseDenied

    if isinstance(exc, EnclaveRunFailed):
        if exc.error_class is not None and issubclass(exc.error_class, KeyReleaseDenied):
            # the rule the enclave's event names (never the reason's prose)
            rule = exc.rule if exc.code == KeyReleaseDenied.code else None
            advice = None if rule is None else _REFUSAL_ADVICE.get(rule)
            return KeyReleaseDeniedError(
                f"key release denied: {exc.reason}",
                hint=advice if rule in _OPERATOR_RULES or lag is None else lag,
            )
        if exc.error_class is not None and issubclass(exc.error_class, AssetIntegrityError):
            return IntegrityError(f"the enclave refused an asset: {exc.reason}")
        return RunFailedError(str(exc))
    return RunFailedError(
        f"the run could not be launched: {exc}", hint=getattr(exc, "hint", None)
    )


def explain_refusals(
    client: RegistryClient, errors: Sequence[Exception], records: Sequence[RunRecord]
) -> list[Exception]:
    """``errors`` of a run plan, a key-release refusal among them translated with the owners
    whose grants lag (asked of the registry for the pairs refused: ``records`` failed with
    ``key_release_denied``); the other errors as they are."""
    refused = sorted({(r.dataset_id, r.model_id) for r in records
                      if r.status == "failed" and r.reason == "key_release_denied"})
    if not refused:
        return list(errors)
    from sealbench.client.assets.grants import lag_notice, lagging_grants
    from sealbench.client.runs.launchers import EnclaveRunFailed

    try:
        lag = lag_notice(lagging_grants(client, refused), client.me().id)
    except ClientError:
        lag = None
    return [translate_launch_error(e, lag=lag) if isinstance(e, EnclaveRunFailed) else e
            for e in errors]
