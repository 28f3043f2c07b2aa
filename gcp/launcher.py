"""The production backend (``sealbench run --tee confidential-space``): the evaluation image in a
Confidential Space VM, created with ``google-cloud-compute`` (REST transport; the endpoint and
credentials are injectable, so the same code runs against the mock's Compute stand-in).

For each run :class:`ConfidentialSpaceLauncher`:

1. refuses an image named by tag (before any API call): the key owners' policies name a digest,
   and a tag could move between approval and launch;
2. inserts a Confidential VM — SEV: ``n2d-standard-2`` with live migration (``MIGRATE``); TDX:
   ``c3-standard-4`` with ``TERMINATE`` — with Shielded VM Secure Boot, the boot image family
   ``confidential-space`` (``confidential-space-debug`` only with ``debug=True``, which every
   sealbench policy refuses: debug images are attested ``dbgstat=enabled``), the operator's
   service account with the ``cloud-platform`` scope, and metadata ``tee-image-reference``
   (``repo@sha256:…``), the run spec as its platform's
   :meth:`~sealbench.platforms.platform.Platform.launch_environment` renders it (``tee-env-<NAME>``
   per variable; the platform is the one whose ``launcher_backends`` names
   ``confidential-space``), ``tee-restart-policy=Never``
   and ``tee-container-log-redirect``; it waits for the insert operation through a
   ``ZoneOperationsClient`` built with the same endpoint (``insert(...).result()`` would poll
   through a client built without the injected ``client_options``, i.e. Google's endpoint);
3. polls the instance's status and streams its serial port (``getSerialPortOutput`` from the
   last ``next`` offset) to ``on_output`` (every :data:`FAST_POLL_S` in the first
   :data:`FAST_POLL_WINDOW_S`, then every :data:`POLL_INTERVAL_S`; each read drawn from the
   project's :class:`~sealbench.gcp._compute_reads.ReadBudget`, which every watch of the project
   in this process shares, so concurrent runs together stay under Google's per-project read
   quota; a ``rateLimitExceeded``, 5xx or timed-out read is retried with exponential backoff
   for up to :data:`WATCH_GRACE_S`) until the VM has stopped (``TERMINATED``), or, on a
   debug VM (which stays ``RUNNING``), until the launcher's exit line has appeared: in either of
   its formats, ``msg="TEE container launcher exiting" exit_code=N`` (go-tpm-tools since October
   2024, ``log/slog``) or ``TEE container launcher exiting, exit code: N`` (before);
4. decides the outcome **from the result location** once the VM has stopped (Google keeps no
   serial output to read after that, and the launcher's last lines may never have been read):
   the enclave's failure record (``failure.json``) gives the failure and its exit code, its
   result token (``result.token``, written last; the aggregator's ``pooled.token``) a success;
   only when neither is there does the serial port speak, as a hint: the enclave's ``failed`` event
   (:class:`~sealbench.contract.events.RunFailed`, read with
   :func:`~sealbench.contract.events.parse_event` like its progress events), the launcher's
   refusal before its exit line, or a VM that stopped without either
   (:class:`VmStoppedUnexpectedly`, never an unchecked success). The failure record's exit
   code and reason take the event's failure code and refused rule when the event states the
   same exit code. Without a result store
   (``result_store``), the serial port alone decides and an unreadable one is an error;
5. deletes the VM unless ``keep_vm``, for the run's own reasons only: its outcome decided
   (success or failure), the run's timeout, or :meth:`kill`. A watch that lost the VM (the
   Compute API refused or kept failing the reads: :class:`WatchInterrupted`) leaves it running
   and says how to delete it: deleting would kill a workload that may still be working.

:meth:`ConfidentialSpaceLauncher.start_aggregator` runs the benchmark's **aggregator image**
(issue 27) the same way: a launcher built on the aggregator image's ``repo@sha256:`` reference
is the aggregator launcher (:attr:`~ConfidentialSpaceLauncher.aggregator_image_digest`), the
:class:`~sealbench.contract.pool.AggregateSpec` is its ``tee-env-*`` metadata (nothing of an
evaluation), its result location the pool's folder, where ``pooled.token`` (written last) means
success and ``failure.json`` failure, as for the evaluation. The image's own command runs
(``python -m sealbench.enclave aggregate``; no ``tee-cmd``).

Confidential Space does not report the container's exit code, only the launcher's (0 success,
1 workload or launcher error, 4 debug hold).

Errors (Google API errors translated once, here, each with a ``hint`` saying what to do)::

    LaunchError
    ├── EnclaveRunFailed              the workload ran and failed
    └── ConfidentialSpaceError        the VM could not be created, watched or deleted
        ├── ImageReferenceError       the image is named by tag, not digest
        ├── ImagePullDenied           the launcher may not pull the image (repository IAM)
        ├── QuotaExceeded             CPU quota or API rate limit (403 QUOTA_EXCEEDED / 429)
        ├── CapacityUnavailable       the zone has no capacity for the machine type
        ├── ComputePermissionDenied   401/403, or no access to the service account
        ├── ComputeNotFound           project, zone, network or image does not exist
        ├── VmTimeout                 an API call, operation or the whole run took too long
        ├── WatchInterrupted          the VM could no longer be watched (left running)
        └── VmStoppedUnexpectedly     stopped with no result, failure record or exit line
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import re
import secrets
import time
from collections.abc import Callable
from typing import Final, Literal, TypeVar

from google.api_core import exceptions as gexc
from google.auth.credentials import Credentials
from google.cloud import compute_v1

from sealbench.contract.events import RunFailed, parse_event
from sealbench.contract.pool import POOLED_TOKEN_OBJECT, AggregateSpec
from sealbench.contract.result import FAILURE_OBJECT, TOKEN_OBJECT, FailureRecord
from sealbench.contract.spec import RunSpec
from sealbench.gcp._compute_reads import ReadBudget, read_budget
from sealbench.gcp._cs_resources import (
    CLOUD_PLATFORM_SCOPE,
    CS_DEBUG_IMAGE_FAMILY,
    CS_IMAGE_FAMILY,
    GPU_MACHINES,
    CapacityUnavailable,
    ComputeNotFound,
    ComputePermissionDenied,
    ComputeUnavailable,
    ConfidentialSpaceError,
    ImagePullDenied,
    ImageReferenceError,
    QuotaExceeded,
    VmSettings,
    VmStoppedUnexpectedly,
    VmTimeout,
    WatchInterrupted,
    image_digest_of,
    image_pull_denied,
    instance_resource,
    make_compute_clients,
    translate_api_error,
)
from sealbench.platforms.launcher import (
    EnclaveRunFailed,
    LaunchError,
    LaunchResult,
    LaunchSettingsError,
    OutputFn,
    check_backend,
    launch_environment,
    platform_for_backend,
)
from sealbench.platforms.platform import LaunchPlatform
from sealbench.platforms.storage import BlobStore, join_name

__all__ = [
    "API_TIMEOUT_S",
    "BACKEND",
    "CLOUD_PLATFORM_SCOPE",
    "CS_DEBUG_IMAGE_FAMILY",
    "CS_IMAGE_FAMILY",
    "DEFAULT_TIMEOUT_S",
    "OPERATION_TIMEOUT_S",
    "POLL_INTERVAL_S",
    "WATCH_GRACE_S",
    "CapacityUnavailable",
    "ComputeNotFound",
    "ComputePermissionDenied",
    "ConfidentialSpaceError",
    "ConfidentialSpaceLauncher",
    "ConfidentialSpaceVm",
    "ImagePullDenied",
    "ImageReferenceError",
    "QuotaExceeded",
    "VmSettings",
    "VmStoppedUnexpectedly",
    "VmTimeout",
    "WatchInterrupted",
    "build_launcher",
    "gpu_machine",
    "image_digest_of",
    "instance_resource",
    "make_compute_clients",
]

_log = logging.getLogger("sealbench.client")

#: The ``sealbench run --tee`` name of this launcher.
BACKEND: Final = "confidential-space"
#: Seconds allowed for each Compute API call.
API_TIMEOUT_S: Final = 60.0
#: Seconds to wait for an insert or delete operation.
OPERATION_TIMEOUT_S: Final = 600.0
#: Seconds between two polls of the VM's status and serial port.
POLL_INTERVAL_S: Final = 10.0
#: Seconds between polls in a run's first :data:`FAST_POLL_WINDOW_S` seconds (boot, image pull
#: and key release, whose lines a user waits for; the outcome itself is read from the result
#: location, so a faster poll buys nothing but reads).
FAST_POLL_S: Final = 3.0
FAST_POLL_WINDOW_S: Final = 180.0
#: Seconds a watch keeps retrying transient Compute failures (``rateLimitExceeded``, 5xx,
#: timeouts) in a row before it gives the VM up (:class:`WatchInterrupted`, VM kept).
WATCH_GRACE_S: Final = 900.0
#: The first and the longest pause after a transient failure (doubled each time, jittered).
_BACKOFF_FIRST_S: Final = 2.0
_BACKOFF_MAX_S: Final = 60.0
#: Seconds a whole run (boot, image pull, evaluation) may take before the VM is deleted.
DEFAULT_TIMEOUT_S: Final = 6 * 3600.0
# The serial port carries two voices. The enclave's is typed: its events (the ``failed`` one
# included) are read with parse_event, never its prose. The Confidential Space launcher's
# (Google's go-tpm-tools, not ours: it has no event format) is matched by pattern, below and in
# image_pull_denied: its exit line, its "workload failed" line and its refusal before exiting.
#: The launcher's last line, in its current (``msg="…" exit_code=N``) and former format.
_EXIT_LINE = re.compile(
    r'TEE container launcher exiting(?:, exit code: |"?\s.*?\bexit_code=)"?(?P<code>\d+)')
#: The launcher's line for a workload that exited non-zero.
_WORKLOAD_FAILED: Final = "workload finished with a non-zero return code"

_DONE_STATES: Final = frozenset({"TERMINATED", "STOPPED", "SUSPENDED"})
_MAX_REASON: Final = 2000
_T = TypeVar("_T")
#: Opens a result URI as ``(store, prefix)`` with the caller's credentials.
ResultStore = Callable[[str], tuple[BlobStore, str]]


def _failed(event: RunFailed) -> EnclaveRunFailed:
    """The failure the enclave's ``failed`` event states (its exit code: the launcher reports
    only its own)."""
    return EnclaveRunFailed(event.exit_code, event.reason[:_MAX_REASON], None,
                            code=event.code, rule=event.rule)


class ConfidentialSpaceVm:
    """One run's VM: watch it with :meth:`wait`, stop it with :meth:`kill`. Its workload
    succeeded when ``success_object`` (written last) is at ``result_uri``: ``result.token`` for
    an evaluation, ``pooled.token`` for the aggregator."""

    def __init__(
        self, launcher: ConfidentialSpaceLauncher, name: str, on_output: OutputFn | None,
        result_uri: str | None = None, success_object: str = TOKEN_OBJECT,
    ) -> None:
        self._launcher = launcher
        self._result_uri = result_uri
        self._success_object = success_object
        self.instance_name = name
        self._on_output = on_output
        self._started = launcher.clock()
        self._offset = 0
        self._partial = ""
        self._lines: list[str] = []
        self._serial_ok = True
        self._deleted = False
        self._result: LaunchResult | LaunchError | None = None

    @property
    def pid(self) -> int | None:
        return None

    def kill(self) -> None:
        """Delete the VM now (whatever ``keep_vm`` says: a killed run leaves nothing behind)."""
        self._delete(force=True)

    def wait(self, timeout: float | None = DEFAULT_TIMEOUT_S) -> LaunchResult:
        if self._result is None:
            try:
                self._result = self._watch(timeout)
            except LaunchError as exc:
                self._result = exc
            finally:
                if isinstance(self._result, WatchInterrupted):  # not the run's own reason
                    _log.warning("%s; %s", self._result, self._result.hint)
                else:
                    self._delete(force=False)
        if isinstance(self._result, LaunchError):
            raise self._result
        return self._result

    def _watch(self, timeout: float | None) -> LaunchResult:
        launcher, settings = self._launcher, self._launcher.settings
        deadline = None if timeout is None else self._started + timeout
        failing_since: float | None = None
        delay = _BACKOFF_FIRST_S
        while True:
            try:
                status = self._poll()
            except (QuotaExceeded, ComputeUnavailable, VmTimeout) as exc:  # transient: retry
                now = launcher.clock()
                failing_since = now if failing_since is None else failing_since
                if now - failing_since >= WATCH_GRACE_S:
                    raise self._lost(exc, f"the Compute API kept failing for "
                                          f"{now - failing_since:.0f} s") from exc
                if deadline is not None and now > deadline:
                    raise self._timed_out(timeout) from exc
                _log.warning("watching VM %s: %s; retrying in %.0f s", self.instance_name,
                             exc, delay)
                launcher.sleep(delay * random.uniform(0.5, 1.0))  # noqa: S311 - jitter only
                delay = min(delay * 2, _BACKOFF_MAX_S)
                continue
            except ComputeNotFound:
                raise  # the VM is gone: nothing left to watch or to keep
            except ConfidentialSpaceError as exc:  # refused (permission, ...): cannot watch
                raise self._lost(exc, "the Compute API refused the watch") from exc
            failing_since, delay = None, _BACKOFF_FIRST_S
            exit_code = self._launcher_exit_code()
            done = status in _DONE_STATES
            if done or (settings.debug and exit_code is not None):
                return self._decide(status, exit_code)
            if deadline is not None and launcher.clock() > deadline:
                raise self._timed_out(timeout)
            launcher.sleep(self._interval())

    def _poll(self) -> str:
        """One poll: the VM's status and its new serial output, each read drawn from the
        project's read budget."""
        launcher = self._launcher
        launcher.reads.take(launcher.clock, launcher.sleep)
        status = str(launcher.call("get the VM's status", self._get).status)
        launcher.reads.take(launcher.clock, launcher.sleep)
        self._read_serial()
        return status

    def _timed_out(self, timeout: float | None) -> VmTimeout:
        return VmTimeout(
            f"VM {self.instance_name} did not finish within {timeout or 0:.0f} s",
            hint="raise the run timeout, or look for a stuck step in the serial output",
        )

    def _lost(self, exc: ConfidentialSpaceError, why: str) -> WatchInterrupted:
        settings = self._launcher.settings
        return WatchInterrupted(
            f"stopped watching VM {self.instance_name}: {why} ({exc}); the VM was left "
            "running: its workload may still finish and write its result",
            hint=f"{exc.hint}; look for the result at the run's result location, then delete "
            f"the VM: gcloud compute instances delete {self.instance_name} "
            f"--project={settings.project} --zone={settings.zone}")

    def _interval(self) -> float:
        """Seconds to the next poll: at most :data:`FAST_POLL_S` in the run's first
        :data:`FAST_POLL_WINDOW_S` (a refused key release ends a run a minute after boot, and
        its reason is on the serial port only until the VM has stopped), then the launcher's."""
        interval = self._launcher.poll_interval
        if self._launcher.clock() - self._started < FAST_POLL_WINDOW_S:
            return min(interval, FAST_POLL_S)
        return interval

    def _get(self) -> compute_v1.Instance:
        settings = self._launcher.settings
        return self._launcher.instances.get(
            project=settings.project,
            zone=settings.zone,
            instance=self.instance_name,
            timeout=API_TIMEOUT_S,
        )

    def _read_serial(self) -> None:
        settings = self._launcher.settings
        request = compute_v1.GetSerialPortOutputInstanceRequest(
            project=settings.project,
            zone=settings.zone,
            instance=self.instance_name,
            port=1,
            start=self._offset,
        )
        instances = self._launcher.instances
        try:
            reply = instances.get_serial_port_output(request=request, timeout=API_TIMEOUT_S)
        except (gexc.BadRequest, gexc.FailedPrecondition) as exc:
            if self._serial_ok:  # e.g. the organization disables serial port logging
                _log.warning("serial port output unavailable (%s); watching the status only", exc)
            self._serial_ok = False
            return
        except gexc.GoogleAPICallError as exc:
            raise translate_api_error(exc, "read the serial port", settings) from exc
        self._serial_ok = True
        if reply.start > self._offset:
            self._emit(f"[sealbench: {reply.start - self._offset} bytes of serial output lost]")
        self._offset = int(reply.next_)
        *complete, self._partial = (self._partial + reply.contents).split("\n")
        for line in complete:
            self._emit(line.rstrip("\r"))

    def _emit(self, line: str) -> None:
        self._lines.append(line)
        if self._on_output is not None:
            self._on_output(line)

    def _failure_event(self) -> RunFailed | None:
        """The enclave's last ``failed`` event on the serial port, if any."""
        events = [e for e in map(parse_event, self._lines) if isinstance(e, RunFailed)]
        return events[-1] if events else None

    def _launcher_exit_code(self) -> int | None:
        codes = [m.group("code") for m in map(_EXIT_LINE.search, self._lines) if m]
        return int(codes[-1]) if codes else None

    def _decide(self, status: str, exit_code: int | None) -> LaunchResult:
        """The run's outcome once it is over: the result location first, the serial port as a
        hint (see the module docstring)."""
        found = self._result_state()
        if isinstance(found, FailureRecord):
            event = self._failure_event()
            if event is None or event.exit_code != found.exit_code:
                raise EnclaveRunFailed(found.exit_code, found.reason[:_MAX_REASON], None)
            raise EnclaveRunFailed(found.exit_code, found.reason[:_MAX_REASON], None,
                                   code=event.code, rule=event.rule)
        if found == "result":
            if exit_code not in (None, 0, 4):
                _log.warning("the launcher reported exit code %s but the enclave wrote its result",
                             exit_code)
            return LaunchResult(self._launcher.image_digest,
                                self._launcher.clock() - self._started, None)
        where = f" at {self._result_uri}" if self._result_uri else ""
        if exit_code is not None:
            outcome = self._outcome(exit_code)  # raises for a failure the serial port shows
            if found is None and self._launcher.result_store is not None:
                raise VmStoppedUnexpectedly(
                    f"VM {self.instance_name}: the launcher reported success but there is no "
                    f"result{where}",
                    hint="the result was deleted or written elsewhere: run again")
            return outcome
        event = self._failure_event()
        if event is not None:  # the enclave said why before the serial port went away
            raise _failed(event)
        if not self._serial_ok and found == "unreadable":
            raise VmStoppedUnexpectedly(
                f"VM {self.instance_name} is {status}; neither its result{where} nor its serial "
                "port could be read, so its outcome is unknown",
                hint="check that this account can read the result bucket and the VM's serial "
                "port (roles/compute.viewer), then run again")
        raise VmStoppedUnexpectedly(
            f"VM {self.instance_name} is {status} without a result or failure record{where}",
            hint="the VM was stopped, preempted or crashed before the enclave finished: read its "
            "serial output in Cloud Logging, then run again")

    def _result_state(self) -> FailureRecord | str | None:
        """``"result"`` (the success object is there), the failure record, None (neither) or
        ``"unreadable"`` (no store, or it could not be read)."""
        opener = self._launcher.result_store
        if opener is None or self._result_uri is None:
            return "unreadable"
        try:
            store, prefix = opener(self._result_uri)
            if store.exists(join_name(prefix, FAILURE_OBJECT)):
                return FailureRecord.from_bytes(
                    store.get_bytes(join_name(prefix, FAILURE_OBJECT), 1 << 20))
            return "result" if store.exists(join_name(prefix, self._success_object)) else None
        except Exception as exc:  # noqa: BLE001 - any read error leaves the serial port to judge
            _log.warning("could not read the run's result location (%s: %s); judging by the "
                         "serial port", type(exc).__name__, exc)
            return "unreadable"

    def _outcome(self, launcher_code: int) -> LaunchResult:
        event = self._failure_event()
        failed = (
            launcher_code not in (0, 4)
            or any(_WORKLOAD_FAILED in x for x in self._lines)
            or (launcher_code == 4 and event is not None)
        )
        if not failed:
            elapsed = self._launcher.clock() - self._started
            return LaunchResult(self._launcher.image_digest, elapsed, None)
        settings = self._launcher.settings
        denied = image_pull_denied(self._lines, settings.service_account,
                                   settings.image_reference)
        if denied is not None:  # the launcher could not pull the image
            raise denied
        if event is None:
            # the launcher refused, or the workload died without its event: the launcher's
            # exit status (1: Confidential Space reports no other) and its last word before its
            # exit line
            exits = [i for i, x in enumerate(self._lines) if _EXIT_LINE.search(x)]
            before = [
                x for x in self._lines[: exits[-1]] if x.strip() and _WORKLOAD_FAILED not in x
            ]
            reasons = before[-1:] or ["the launcher exited with an error"]
            raise EnclaveRunFailed(1, reasons[-1].strip()[:_MAX_REASON], None)
        raise _failed(event)

    def _delete(self, *, force: bool) -> None:
        settings = self._launcher.settings
        command = (
            f"gcloud compute instances delete {self.instance_name} "
            f"--project={settings.project} --zone={settings.zone}"
        )
        if self._deleted:
            return
        if settings.keep_vm and not force:
            _log.warning("keeping VM %s; delete it with: %s", self.instance_name, command)
            return
        try:
            self._launcher.delete_instance(self.instance_name)
        except ComputeNotFound:
            pass
        except ConfidentialSpaceError as exc:
            _log.error(
                "could not delete VM %s (%s; %s); it costs money until you run: %s",
                self.instance_name,
                exc,
                exc.hint,
                command,
            )
            return
        self._deleted = True


class ConfidentialSpaceLauncher:
    """:class:`~sealbench.platforms.launcher.Launcher` for Confidential Space VMs. Pass
    ``credentials`` (and ``api_endpoint`` for a stand-in), or ready ``clients``; ``sleep`` and
    ``clock`` are injectable so that polling is tested without waiting. ``platform`` (default:
    the installed one whose launchers include ``confidential-space``) renders the run spec
    into the VM's metadata."""

    def __init__(
        self,
        settings: VmSettings,
        *,
        credentials: Credentials | None = None,
        api_endpoint: str | None = None,
        clients: tuple[compute_v1.InstancesClient, compute_v1.ZoneOperationsClient] | None = None,
        poll_interval: float = POLL_INTERVAL_S,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        platform: LaunchPlatform | None = None,
        result_store: ResultStore | None = None,
        reads: ReadBudget | None = None,
    ) -> None:
        self._platform = check_backend(platform or platform_for_backend(BACKEND), BACKEND)
        #: The project's Compute read budget, shared by every watch of the project in this
        #: process (:func:`~sealbench.gcp._compute_reads.read_budget`).
        self.reads = reads if reads is not None else read_budget(settings.project)
        #: Opens a run's result location (``(store, prefix)`` of its result URI): where the
        #: outcome is decided once the VM has stopped.
        self.result_store = result_store
        self.settings = settings
        self._credentials = credentials
        self._api_endpoint = api_endpoint
        self._clients = clients
        self.poll_interval = poll_interval
        self.sleep = sleep
        self.clock = clock
        if settings.debug:
            _log.warning(
                "DEBUG Confidential Space image: the operator can reach the VM, its tokens say "
                "dbgstat=enabled, and no sealbench key owner releases keys to it"
            )

    @property
    def image_digest(self) -> str:
        return self.settings.image_digest

    @property
    def instances(self) -> compute_v1.InstancesClient:
        return self._client_pair()[0]

    def _client_pair(self) -> tuple[compute_v1.InstancesClient, compute_v1.ZoneOperationsClient]:
        if self._clients is None:
            self._clients = make_compute_clients(self._credentials, self._api_endpoint)
        return self._clients

    def call(self, action: str, fn: Callable[[], _T]) -> _T:
        """Run one API call, translating Google errors (see the module docstring)."""
        try:
            return fn()
        except (gexc.GoogleAPICallError, gexc.RetryError) as exc:
            raise translate_api_error(exc, action, self.settings) from exc

    def _wait_operation(self, op: compute_v1.Operation, action: str) -> None:
        operations = self._client_pair()[1]
        deadline = self.clock() + OPERATION_TIMEOUT_S
        while op.status != compute_v1.Operation.Status.DONE:
            self.reads.take(self.clock, self.sleep)
            if self.clock() > deadline:
                raise VmTimeout(
                    f"{action}: operation {op.name} did not finish in {OPERATION_TIMEOUT_S:.0f} s",
                    hint="look at the operation in the console (Compute Engine → Operations)",
                )
            op = self.call(action, functools.partial(self._poll_operation, operations, op.name))
        errors = list(op.error.errors) if op.error else []
        if errors or op.http_error_status_code:
            failure = gexc.from_http_status(  # type: ignore[no-untyped-call]
                op.http_error_status_code or 400,
                "; ".join(e.message for e in errors) or op.http_error_message,
                errors=[{"reason": e.code, "message": e.message} for e in errors],
            )
            raise translate_api_error(failure, action, self.settings)

    def _poll_operation(
        self, operations: compute_v1.ZoneOperationsClient, name: str
    ) -> compute_v1.Operation:
        return operations.wait(
            project=self.settings.project,
            zone=self.settings.zone,
            operation=name,
            timeout=API_TIMEOUT_S,
        )

    def delete_instance(self, name: str) -> None:
        """Delete one VM and wait until it is gone."""
        settings = self.settings
        op = self.call(
            "delete the VM",
            lambda: self.instances.delete_unary(
                project=settings.project, zone=settings.zone, instance=name, timeout=API_TIMEOUT_S
            ),
        )
        self._wait_operation(op, "delete the VM")

    @property
    def aggregator_image_digest(self) -> str:
        """The digest of the image this launcher runs: built on the aggregator image's
        reference, it is the benchmark's aggregator launcher
        (:class:`~sealbench.client.runs.pool.AggregatorLauncher`)."""
        return self.settings.image_digest

    def start(self, spec: RunSpec, *, on_output: OutputFn | None = None) -> ConfidentialSpaceVm:
        return self._start_vm(spec.run_id, launch_environment(self._platform, spec),
                              spec.result_uri, TOKEN_OBJECT, on_output)

    def start_aggregator(self, spec: AggregateSpec, *,
                         on_output: OutputFn | None = None) -> ConfidentialSpaceVm:
        """Start the benchmark's aggregator (issue 27): this launcher's image (the aggregator
        image's reference) with ``spec`` as its ``tee-env-*`` metadata; it succeeded when
        ``pooled.token`` is in the pool's folder (``spec.result_uri``)."""
        return self._start_vm(spec.run_id, launch_environment(self._platform, spec),
                              spec.result_uri, POOLED_TOKEN_OBJECT, on_output)

    def _start_vm(self, run_id: str, environ: dict[str, str], result_uri: str,
                  success_object: str, on_output: OutputFn | None) -> ConfidentialSpaceVm:
        """Insert the VM of one workload (``environ``: its launch metadata) and wait until it
        exists; the VM's outcome is read at ``result_uri`` (``success_object`` or the failure
        record)."""
        settings = self.settings
        run = re.sub(r"[^a-z0-9-]+", "-", run_id.lower()).strip("-")[:16].strip("-")
        name = f"{settings.instance_prefix}-{run or 'run'}-{secrets.token_hex(3)}"
        resource = instance_resource(settings, name, environ)
        op = self.call(
            "create the VM",
            lambda: self.instances.insert_unary(
                project=settings.project,
                zone=settings.zone,
                instance_resource=resource,
                timeout=API_TIMEOUT_S,
            ),
        )
        try:
            self._wait_operation(op, "create the VM")
        except VmTimeout:
            with contextlib.suppress(ConfidentialSpaceError):  # it may exist by now
                self.delete_instance(name)
            raise
        _log.info(
            "created Confidential Space VM %s in %s/%s", name, settings.project, settings.zone
        )
        return ConfidentialSpaceVm(self, name, on_output, result_uri, success_object)

    def launch(
        self,
        spec: RunSpec,
        *,
        on_output: OutputFn | None = None,
        timeout: float | None = DEFAULT_TIMEOUT_S,
    ) -> LaunchResult:
        return self.start(spec, on_output=on_output).wait(timeout)


def gpu_machine(accelerator: str) -> tuple[str, int]:
    """``(machine type, GPU count)`` of a confidential GPU VM for ``--accelerator``;
    :class:`LaunchSettingsError` for an accelerator sealbench does not launch."""
    if accelerator not in GPU_MACHINES:
        raise LaunchSettingsError(f"unknown accelerator {accelerator!r}",
                                  hint=f"use one of {', '.join(sorted(GPU_MACHINES))}")
    return GPU_MACHINES[accelerator]


def build_launcher(
    platform: LaunchPlatform,
    *,
    project: str,
    zone: str,
    service_account: str,
    image_reference: str,
    tee: Literal["SEV", "TDX"],
    debug: bool,
    accelerator: str | None = None,
    keep_vm: bool,
    credentials: Credentials | None,
    api_endpoint: str | None,
    result_store: ResultStore | None = None,
    poll_interval: float | None = None,
) -> ConfidentialSpaceLauncher:
    """The ``confidential-space`` backend (what
    :meth:`~sealbench.gcp.confidential_space.ConfidentialSpacePlatform.launcher` builds): a
    Confidential Space VM in ``project``/``zone``; settings that cannot work (an image named by
    tag, ...) raise :class:`LaunchSettingsError`."""
    try:
        settings = VmSettings(
            project=project,
            zone=zone,
            service_account=service_account,
            image_reference=image_reference,
            tee=tee,
            debug=debug,
            keep_vm=keep_vm,
            accelerator=accelerator,
        )
    except ConfidentialSpaceError as exc:
        raise LaunchSettingsError(str(exc), hint=exc.hint) from exc
    return ConfidentialSpaceLauncher(
        settings, credentials=credentials, api_endpoint=api_endpoint, platform=platform,
        result_store=result_store,
        poll_interval=POLL_INTERVAL_S if poll_interval is None else poll_interval,
    )
