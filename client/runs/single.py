"""Confidential runs as the data owner operates them: build the run specification from the
registry's records, launch it on a TEE backend, keep a local record of every run, and open and
submit its result.

Run records (``runs/<run id>.json`` in the profile's data directory, version 2; version 1
records, without the fields marked below, are read as they are) say which benchmark, dataset
and model a run evaluated, where its result lies and how it ended; a pair with a succeeded run
of the current image is not run again unless asked (``--force``). The record holds no secret
and no per-case value. Version 2 adds ``owner_pid`` and ``owner_started`` (the process that
drives the run, and its start time in clock ticks since boot, so a reused pid is not taken for
the owner), ``reason`` (the failure class or interrupt reason the registry is told),
``attempts``, ``seq`` (the number of the latest status report), ``metrics_version`` and
``workload`` (the VM instance or container the backend started); ``execution_provider`` (the
ONNX Runtime provider the enclave said ran the model, one of a known set) is optional, and so
are ``failure_record`` and ``failure_token`` (the enclave's failure record of a failed run and
the token it attested it with, read from the result location; they hold nothing secret and no
case data, and go to the registry, which verifies the token). A
record left ``planned``, ``launching`` or ``running`` by a process that is gone is stale:
:meth:`RunStore.repair_stale` marks it ``interrupted`` (reason ``owner_died``).

With the mock backend the result destination is a ``file://`` directory under the profile's
data directory: the enclave runs on this machine, and a Cloud Storage destination would need an
``objectCreator`` grant that the policy writer does not manage yet.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, cast

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

from sealbench.client.assets.prepare import recipient_of
from sealbench.client.assets.result_key import ResultKey
from sealbench.client.errors import (
    ClientError,
    CloudError,
    ConfigError,
    IntegrityError,
    KeyReleaseDeniedError,
    NotAllowedError,
    NotFoundError,
    RunFailedError,
)
from sealbench.client.registry.api import AssetKind, RegistryClient
from sealbench.contract.events import ModelLoaded, RunDone, RunEvent, parse_event
from sealbench.contract.inputs import Rule
from sealbench.server.schemas import ResultCreate, ResultPublic
from sealbench.server.schemas.runs import (
    EXECUTION_PROVIDERS,
    MAX_FAILURE_RECORD_BYTES,
    MAX_FAILURE_TOKEN_CHARS,
    ExecutionProvider,
    RunReport,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    from sealbench.client.runs.attestation_keys import IssuerKeys
    from sealbench.client.runs.result_open import OpenedResult
    from sealbench.contract.spec import RunSpec
    from sealbench.mocktee import MockEndpoints
    from sealbench.platforms.storage import BlobStore

__all__ = [
    "RunRecord",
    "RunStatus",
    "RunStore",
    "approved_models",
    "approved_pairs",
    "attested_failure",
    "build_spec",
    "execution_provider",
    "explain_refusals",
    "fetch_run_result",
    "link_result",
    "new_run_id",
    "not_approved",
    "open_run_result",
    "owner_alive",
    "process_identity",
    "provider_of",
    "recorded_failure",
    "report_of",
    "result_submission",
    "step_timings",
    "submit_run_result",
    "timings_of",
    "translate_launch_error",
]

log = logging.getLogger("sealbench.client")

_MAX_RECORD: Final = 1 << 20
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class RunRecord(BaseModel):
    """One run as this data owner launched it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["sealbench/run-record"] = "sealbench/run-record"
    version: Literal[1, 2] = 2
    run_id: str
    benchmark_id: int
    dataset_id: int
    model_id: int
    tee: str
    image_digest: str
    result_uri: str
    status: RunStatus
    started_at: datetime
    finished_at: datetime | None = None
    wall_seconds: float | None = None
    peak_rss_bytes: int | None = None
    error: str | None = None
    result_id: int | None = None
    step_seconds: dict[str, float] | None = None
    owner_pid: int | None = None
    owner_started: int | None = None
    reason: str | None = None
    attempts: int = 0
    seq: int = 0
    metrics_version: str | None = None
    #: The backend's name of the started workload (a VM instance, a container), so that a
    #: repaired record says what may still be running.
    workload: str | None = None
    #: The ONNX Runtime execution provider the enclave ran the model on (absent: not said).
    execution_provider: ExecutionProvider | None = None
    #: A failed run's ``failure.json`` as the enclave wrote it, and its ``failure.token`` (both
    #: or neither; absent: the enclave attested no failure, or none could be read).
    failure_record: dict[str, JsonValue] | None = None
    failure_token: str | None = None
    #: The run spec's result location when ``result_uri`` now names a local copy of the
    #: objects (``result fetch``): where the run left them, and where a benchmark's aggregator
    #: reads the site's sealed statistics (issue 27). None: ``result_uri`` is that location.
    spec_result_uri: str | None = None

    @property
    def active(self) -> bool:
        """Not finished: planned, launching or running."""
        return self.status in _ACTIVE


RunStatus = Literal["planned", "launching", "running", "succeeded", "failed", "interrupted"]
_ACTIVE: Final = frozenset({"planned", "launching", "running"})


def process_identity(pid: int | None = None) -> tuple[int, int | None]:
    """``(pid, start time in clock ticks since boot)`` of a process (this one by default); the
    start time is None where ``/proc`` does not say it."""
    pid = os.getpid() if pid is None else pid
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return pid, None
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        return pid, int(fields[19])  # field 22, starttime
    except (IndexError, ValueError):
        return pid, None


def owner_alive(pid: int, started: int | None) -> bool:
    """Whether the process that owned a run is still the one running as ``pid``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: alive, but not ours unless the start time matches
    if started is None:
        return True
    return process_identity(pid)[1] in (started, None)


class RunStore:
    """The run records of one profile, one JSON file per run."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, run_id: str) -> Path:
        if not _RUN_ID.match(run_id):
            raise ConfigError(f"{run_id[:70]!r} is not a run id")
        return self.root / f"{run_id}.json"

    def save(self, record: RunRecord) -> None:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        target = self.path(record.run_id)
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
        tmp.write_text(record.model_dump_json(indent=2))
        tmp.replace(target)

    def get(self, run_id: str) -> RunRecord:
        try:
            raw = self.path(run_id).read_bytes()[:_MAX_RECORD]
        except FileNotFoundError:
            raise ConfigError(
                f"no run {run_id!r} on this machine for this profile",
                hint="list runs with 'sealbench result ls'",
            ) from None
        try:
            return RunRecord.model_validate_json(raw)
        except ValidationError as exc:
            raise ConfigError(
                f"run record {run_id} is damaged ({exc.error_count()} errors)"
            ) from exc

    def all(self) -> list[RunRecord]:
        if not self.root.is_dir():
            return []
        records = [self.get(p.stem) for p in sorted(self.root.glob("*.json"))]
        return sorted(records, key=lambda r: r.started_at)

    def succeeded(
        self,
        benchmark_id: int,
        dataset_id: int,
        model_id: int,
        *,
        image_digest: str | None = None,
        metrics_version: str | None = None,
    ) -> RunRecord | None:
        """The latest succeeded run of this triple, if any; with ``image_digest`` (and
        ``metrics_version``), only a run of that image (and metrics version; a version 1
        record, which does not say, counts as any)."""
        done = [
            r for r in self.all()
            if (r.benchmark_id, r.dataset_id, r.model_id) == (benchmark_id, dataset_id, model_id)
            and r.status == "succeeded"
            and (image_digest is None or r.image_digest == image_digest)
            and (metrics_version is None or r.metrics_version in (None, metrics_version))
        ]
        return done[-1] if done else None

    def repair_stale(
        self,
        now: datetime,
        alive: Callable[[int, int | None], bool] = owner_alive,
    ) -> list[RunRecord]:
        """Mark ``interrupted`` (reason ``owner_died``) every unfinished record whose owner
        process is gone (a version 1 record names no owner: its process is gone too, since
        that version ran one pair at a time in the foreground). Returns the repaired records."""
        repaired = []
        for record in self.all():
            if not record.active:
                continue
            if record.owner_pid is not None and alive(record.owner_pid, record.owner_started):
                continue
            fixed = record.model_copy(update={
                "status": "interrupted", "reason": "owner_died", "finished_at": now,
                "seq": record.seq + 1, "version": 2,
                "error": "the process that ran it ended before it finished" + (
                    "" if record.workload is None
                    else f"; its workload {record.workload} may still exist: check it and "
                    "delete it if so (a VM costs money until deleted)"
                ),
            })
            self.save(fixed)
            repaired.append(fixed)
        return repaired


def new_run_id(now: datetime, token: Callable[[int], str] = secrets.token_hex) -> str:
    """A new run's id: ``run-<UTC day>-<8 random hex digits>``. The day only: the id travels
    to the registry (its reports, the enclave's token and summary), and a start time to the
    second beside the result's arrival would tell everyone how long the model took on the
    cases (issue 40). The record keeps the start to the second (``started_at``), here."""
    return f"run-{now.astimezone(UTC).strftime('%Y%m%d')}-{token(4)}"


def approved_models(
    client: RegistryClient, benchmark_id: int, dataset_id: int, model_id: int | None
) -> tuple[int, ...]:
    """The models to evaluate ``dataset_id`` with: ``model_id``, or every approved model; the
    dataset and each model must be approved in the benchmark."""
    datasets = {a.asset_id for a in client.list_associations("dataset", benchmark_id, "approved")}
    if dataset_id not in datasets:
        raise not_approved(client, "dataset", benchmark_id, dataset_id)
    models = tuple(
        sorted(a.asset_id for a in client.list_associations("model", benchmark_id, "approved"))
    )
    if model_id is None:
        if not models:
            raise NotAllowedError(f"no model is approved in benchmark {benchmark_id} yet")
        return models
    if model_id not in models:
        raise not_approved(client, "model", benchmark_id, model_id)
    return (model_id,)


def approved_pairs(
    client: RegistryClient, benchmark_id: int, dataset_id: int | None, model_id: int | None
) -> tuple[tuple[int, int], ...]:
    """The (dataset, model) pairs to evaluate: ``dataset_id`` (None: each of the caller's
    datasets approved in the benchmark) with ``model_id`` (None: every approved model). A
    dataset of another owner is refused here, before any run is recorded: only its owner
    releases its key, so the run could only fail."""
    if dataset_id is not None:
        owner_id = client.get_dataset(dataset_id).owner_id
        if owner_id != client.me().id:
            raise NotAllowedError(
                f"dataset {dataset_id} is not yours (user {owner_id} registered it): a run "
                "evaluates one of your own datasets, whose key only you release; nothing was "
                "run or recorded",
                hint="'sealbench dataset ls --mine' lists yours; a model owner's results come "
                "from the hospitals that run their datasets with its model")
        return tuple((dataset_id, m) for m in approved_models(client, benchmark_id, dataset_id,
                                                               model_id))
    me = client.me().id
    mine = {d.id for d in client.list_datasets(owner_id=me)}
    approved = sorted(
        a.asset_id for a in client.list_associations("dataset", benchmark_id, "approved")
        if a.asset_id in mine
    )
    if not approved:
        raise NotAllowedError(
            f"none of your datasets is approved in benchmark {benchmark_id}",
            hint=f"see 'sealbench association ls --benchmark {benchmark_id}'",
        )
    return tuple(
        (d, m) for d in approved for m in approved_models(client, benchmark_id, d, model_id)
    )


def not_approved(
    client: RegistryClient, kind: AssetKind, benchmark_id: int, asset_id: int
) -> NotAllowedError:
    """Why ``kind`` ``asset_id`` may not run in the benchmark, from its link's current state
    (never linked, pending, rejected or withdrawn), and what can be done about it."""
    current = {a.asset_id: a for a in client.list_associations(kind, benchmark_id)}
    link = current.get(asset_id)
    listing = f"'sealbench association ls --benchmark {benchmark_id}'"
    if link is None:
        return NotAllowedError(
            f"{kind} {asset_id} is not associated with benchmark {benchmark_id}",
            hint=f"its owner asks to join with 'sealbench {kind} associate --{kind} {asset_id} "
            f"--benchmark {benchmark_id}'",
        )
    if link.status == "withdrawn":
        return NotAllowedError(
            f"{kind} {asset_id} was withdrawn from benchmark {benchmark_id} by its owner "
            f"(user {link.actor_id}, {link.created_at:%Y-%m-%d}); no new run is allowed on it",
            hint="results verified before the withdrawal stay, marked; its owner can ask to "
            f"join again with 'sealbench {kind} associate'",
        )
    if link.status == "pending":
        return NotAllowedError(
            f"{kind} {asset_id} is still pending in benchmark {benchmark_id}",
            hint=f"the other side approves it (see {listing}, or 'sealbench inbox' as them)",
        )
    return NotAllowedError(
        f"{kind} {asset_id} is {link.status} in benchmark {benchmark_id}",
        hint=f"check {listing}; its owner can ask to join again",
    )


def build_spec(
    client: RegistryClient,
    *,
    run_id: str,
    benchmark_id: int,
    dataset_id: int,
    model_id: int,
    recipient: ResultKey,
    result_dir: Path,
    endpoints: MockEndpoints | None,
    result_uri: str | None = None,
) -> RunSpec:
    """The :class:`~sealbench.contract.spec.RunSpec` of one evaluation, from the registry's
    records (digests, coordinates) and the owner's result key; ``endpoints`` are the mock
    cloud's (STS, KMS, storage), None for Google's. The result goes to ``result_uri`` when
    given (a VM in the cloud cannot write this machine's folders), else to ``result_dir``."""
    from sealbench.contract.spec import AssetLocation, RunSpec

    benchmark = client.get_benchmark(benchmark_id)
    dataset = client.get_dataset(dataset_id)
    model = client.get_model(model_id)
    if recipient_of(dataset) != recipient.digest:
        raise ConfigError(
            f"dataset {dataset_id} was registered with another result key than this profile's",
            hint="run with the profile that registered the dataset",
        )
    locations = {}
    for kind, asset_id in (("dataset", dataset_id), ("model", model_id)):
        try:
            coords = client.get_coordinates(kind, asset_id)  # type: ignore[arg-type]
        except NotFoundError as exc:
            owner = "you have" if kind == "dataset" else "its owner has"
            raise ConfigError(
                f"{kind} {asset_id} has no sealed copy yet ({owner} not run "
                f"'sealbench {kind} seal')",
                hint="run it once the asset is sealed",
            ) from exc
        locations[kind] = AssetLocation(
            asset_id=str(asset_id),
            uri=coords.storage_uri,
            kms_key=coords.kms_key_name,
            pool_provider=coords.wip_provider,
        )
    if result_uri is None:
        result_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    cloud = {} if endpoints is None else asdict(endpoints.service_endpoints())
    return RunSpec(
        run_id=run_id,
        benchmark_id=str(benchmark_id),
        metrics_version=benchmark.metrics_version,
        dataset=locations["dataset"],
        model=locations["model"],
        result_uri=result_uri or result_dir.resolve().as_uri(),
        recipient_public_key=recipient.public_b64,
        data_digest=dataset.digest,
        model_digest=model.digest,
        recipient_digest=recipient.digest,
        **cloud,
    )


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


def report_of(record: RunRecord) -> RunReport:
    """The registry's view of ``record``: state, failure class, image; no free text (the local
    ``error`` stays here) and no timing: how long the enclave took varies with the cases, so
    the step timings stay in this record, the hospital's own (issue 40)."""
    reason = record.reason
    evidence = _failure_evidence(record)
    if record.status == "failed" and reason is None:
        reason = "launch"  # a version 1 record does not say
    if record.status == "interrupted" and reason is None:
        reason = "owner_died"
    return RunReport(
        benchmark_id=record.benchmark_id,
        dataset_id=record.dataset_id,
        model_id=record.model_id,
        state=record.status,
        seq=record.seq,
        reason=reason if record.status in ("failed", "interrupted") else None,  # type: ignore[arg-type]
        image_digest=record.image_digest,
        tee=record.tee,
        attempts=min(record.attempts, 100),
        execution_provider=(record.execution_provider
                            if record.execution_provider in EXECUTION_PROVIDERS else None),
        result_id=record.result_id if record.status == "succeeded" else None,
        failure_record=evidence[0] if evidence else None,
        failure_token=evidence[1] if evidence else None,
    )


def _failure_evidence(record: RunRecord) -> tuple[dict[str, JsonValue], str] | None:
    """The failure record and token a failed run's report carries, when both fit the report's
    bounds (else none: the failure is reported as a claim rather than not at all)."""
    if record.status != "failed" or record.failure_record is None or record.failure_token is None:
        return None
    from sealbench.crypto.canonical import canonical_json

    try:
        size = len(canonical_json(record.failure_record))
    except (TypeError, ValueError):
        return None
    if size > MAX_FAILURE_RECORD_BYTES or len(record.failure_token) > MAX_FAILURE_TOKEN_CHARS:
        return None
    return record.failure_record, record.failure_token
