"""The mock Compute Engine API: the ``instances`` and ``zoneOperations`` REST endpoints that the
Confidential Space launcher (``sealbench.gcp.launcher``) calls, each
instance a mock Confidential Space VM (:mod:`sealbench.mocktee._compute_vm`). INSECURE BY
DESIGN: the "VM" is a child process on this machine, its tokens are signed by the mock verifier.

Routes (``/compute/v1/projects/{project}/zones/{zone}/…``, bearer token of a project owner)::

    POST   instances                      insert → Operation (DONE, or DONE with an error)
    GET    instances/{name}               status PROVISIONING → STAGING → RUNNING → STOPPING →
                                          TERMINATED (a debug-image VM stays RUNNING)
    GET    instances/{name}/serialPort    getSerialPortOutput: ``start`` offset in, ``contents``,
                                          ``start``, ``next`` out; the last 1 MiB is kept
    DELETE instances/{name}               kills the workload if it still runs → Operation
    GET    operations/{op}, POST operations/{op}/wait
    GET    /compute/v1/projects/{project}/regions/{region}   regions.get, with the CPU quotas
                                          and the confidential GPU quota
    GET    /compute/v1/projects/{project}  projects.get, with ``GPUS_ALL_REGIONS`` (0 unless
                                          raised: ``gpus_all_regions``, :meth:`set_quota`)
    GET    …/zones/{zone}/machineTypes/{name}, …/zones/{zone}/acceleratorTypes/{name},
           …/aggregated/acceleratorTypes   the zone catalogue
                                          (:mod:`sealbench.mocktee._compute_catalog`)

Given a :class:`~sealbench.mocktee.artifacts.MockArtifacts`, this port also serves Artifact
Registry's ``/v1/projects/…/repositories`` routes, and a VM's boot pulls its image through it:
an image in a repository that does not let the VM's service account download is refused as
the launcher's pull is (serial line, launcher exit 1).

The image catalogue (``images``, by digest; :class:`MockImageEntry`): by default the mock's
aggregator image (:func:`~sealbench.mocktee.image.aggregator_image_digest`, issue 27) runs its
own command, ``python -m sealbench.enclave aggregate``, under its own launch policy (the names
of :data:`~sealbench.contract.pool.AGGREGATE_ENV_NAMES`, no command override: the mock process
launcher's); every other digest is the evaluation image, ``python -m sealbench.enclave`` under
``image_policy``. Referenced as ``<repo>@<digest>``, whatever the repository.

Insert validates what the API validates (:mod:`sealbench.mocktee._compute_request`, where the
rules and the mock's own ones are listed): the name; machine type vs. confidential instance
type; live migration; the boot image (the ``confidential-space``, ``confidential-space-debug``
and confidential-GPU ``…-preview-cgpu`` families of ``confidential-space-images``); the
confidential GPU request (``a3-highgpu-1g``, TDX, one ``nvidia-h100-80gb`` in the zone,
``TERMINATE``, ``SPOT``); the service account; the per-family CPU quota and the
``NVIDIA_H100_GPUS`` quota, whose excess fails the *operation* with ``QUOTA_EXCEEDED`` as GCP
reports it. Reads past the project's per-minute read quota (:meth:`MockCompute.set_read_quota`,
1,500 by default as at Google) are answered 403 ``rateLimitExceeded``. Errors have Compute's
JSON shape (``errors[].reason``, an ``ErrorInfo`` detail for
quota and rate limits); :meth:`MockCompute.fail_next` makes the next call of a kind fail (a
test hook). A GPU VM has no GPU here: its workload runs on this machine's CPU, and only its
token says what the preview GPU image attests (``EXPERIMENTAL``, ``nvidia_gpu.cc_mode: ON``;
see :mod:`sealbench.mocktee._compute_vm`). Instances live
in memory only: a restarted mock has none.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import secrets
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from sealbench.mocktee import _compute_catalog as catalog
from sealbench.mocktee._compute_request import (
    CPU_QUOTA_METRICS,
    CS_IMAGE_PROJECT,
    GPU_QUOTA_METRIC,
    PROJECT_GPU_METRIC,
    ComputeFault,
    validate_insert,
)
from sealbench.mocktee._compute_request import error as _error
from sealbench.mocktee._compute_vm import (
    AGGREGATOR_ARGS,
    ImagePolicy,
    MockImageEntry,
    MockVm,
    boot,
)
from sealbench.mocktee._http import Request, Response, json_response
from sealbench.mocktee.artifacts import MockArtifacts
from sealbench.mocktee.constants import COMPUTE_API
from sealbench.mocktee.identity import Caller, Identity
from sealbench.mocktee.image import aggregator_image_digest
from sealbench.mocktee.process_launcher import AGGREGATOR_POLICY
from sealbench.mocktee.verifier import TokenMinter

__all__ = [
    "CS_IMAGE_PROJECT",
    "READ_QUOTA_PER_MINUTE",
    "ComputeFault",
    "ImagePolicy",
    "Method",
    "MockCompute",
    "MockImageEntry",
    "ReadQuota",
    "mock_image_catalogue",
]

_ROUTE = re.compile(
    r"^/compute/v1/projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/"
    r"(?P<kind>instances|operations)(?:/(?P<name>[^/]+)(?P<sub>/serialPort|/wait)?)?$"
)
_REGION_ROUTE = re.compile(
    r"^/compute/v1/projects/(?P<project>[^/]+)/regions/(?P<region>[a-z0-9-]+)$"
)
#: The read-only catalogue and project routes: ``projects.get`` (kind None), a zone's machine
#: or accelerator type, and the aggregated list of accelerator types.
_CATALOG_ROUTE = re.compile(
    r"^/compute/v1/projects/(?P<project>[^/]+)"
    r"(?:/zones/(?P<zone>[a-z0-9-]+)/(?P<kind>machineTypes|acceleratorTypes)/(?P<name>[a-z0-9-]+)"
    r"|/aggregated/(?P<aggregated>acceleratorTypes))?$"
)
_QUOTA_METRICS = (*CPU_QUOTA_METRICS, GPU_QUOTA_METRIC)
_API = COMPUTE_API
Method = Literal["insert", "get", "serialPort", "delete", "operations"]
_VERBS = {"insert": "create", "serialPort": "getSerialPortOutput"}


def mock_image_catalogue() -> dict[str, MockImageEntry]:
    """The catalogue of the mock's aggregator image (of the installed code): its own command
    under its own launch policy, the mock process launcher's."""
    return {aggregator_image_digest(): MockImageEntry(AGGREGATOR_ARGS, AGGREGATOR_POLICY)}


#: Google's default ``Read requests per minute`` of ``compute.googleapis.com``, per project.
READ_QUOTA_PER_MINUTE = 1500


class ReadQuota:
    """Compute's per-project read quota: ``per_minute`` reads in any ``window_s`` (60 s, a
    sliding window, as Google's per-minute quota; tests may shorten it to scale the minute
    down), past which a read is answered 403 ``rateLimitExceeded``. Thread-safe."""

    def __init__(self, per_minute: int = READ_QUOTA_PER_MINUTE,
                 clock: Callable[[], float] = time.monotonic, window_s: float = 60.0) -> None:
        self.per_minute = per_minute
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._reads: dict[str, collections.deque[float]] = {}
        self._limits: dict[str, int] = {}
        #: Reads answered 403 rateLimitExceeded, and reads served, per project.
        self.refused: collections.Counter[str] = collections.Counter()
        self.served: collections.Counter[str] = collections.Counter()

    def set_limit(self, project_id: str, per_minute: int) -> None:
        if per_minute < 0:
            raise ValueError("a read quota is 0 or more")
        with self._lock:
            self._limits[project_id] = per_minute

    def count(self, project_id: str, project_number: str) -> Response | None:
        """Count one read of ``project_id``: None if within its quota, else Compute's 403."""
        now = self._clock()
        with self._lock:
            limit = self._limits.get(project_id, self.per_minute)
            window = self._reads.setdefault(project_id, collections.deque())
            while window and window[0] <= now - self.window_s:
                window.popleft()
            if len(window) >= limit:
                self.refused[project_id] += 1
                return ComputeFault.read_rate_exceeded(project_number, limit).response()
            window.append(now)
            self.served[project_id] += 1
        return None


class MockCompute:
    """The Compute stand-in. ``minter`` signs the VMs' attestation tokens; ``python`` runs
    ``-m sealbench.enclave``; ``images`` is the image catalogue (default
    :func:`mock_image_catalogue`; any other digest runs the evaluation under
    ``image_policy``); ``cpu_quota`` is each project's CPU limit per machine family,
    ``gpu_quota`` its limit of confidential H100 GPUs (``NVIDIA_H100_GPUS``), per region.
    ``serial_after_stop``: as on Google Cloud (the default, False), a TERMINATED VM's serial
    port can no longer be read (400); True keeps it readable, as the mock used to.
    ``shutdown_s``: how long a VM stays STOPPING after its launcher exits (serial still
    readable), as a real shutdown takes a few seconds. ``read_quota``: each project's read
    requests per minute (every GET of an instance, its serial port or an operation, and an
    operation's ``wait``), past which a read is answered 403 ``rateLimitExceeded`` as Google's
    ``Read requests per minute`` quota (1,500 by default) answers; ``clock`` measures its
    minute (a sliding 60 s window)."""

    def __init__(
        self,
        identity: Identity,
        minter: TokenMinter,
        *,
        python: str = sys.executable,
        image_policy: ImagePolicy | None = None,
        images: Mapping[str, MockImageEntry] | None = None,
        cpu_quota: int = 64,
        gpu_quota: int = 8,
        gpus_all_regions: int = 0,
        artifacts: MockArtifacts | None = None,
        work_root: Path | None = None,
        serial_after_stop: bool = False,
        shutdown_s: float = 2.0,
        read_quota: int = READ_QUOTA_PER_MINUTE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        #: Each project's read requests per minute (:class:`ReadQuota`).
        self.reads = ReadQuota(read_quota, clock)
        self._serial_after_stop = serial_after_stop
        self._shutdown_s = shutdown_s
        self._identity = identity
        self._minter = minter
        self._python = python
        self.image_policy = image_policy or ImagePolicy()
        self.images = dict(mock_image_catalogue() if images is None else images)
        self.cpu_quota = cpu_quota
        self.gpu_quota = gpu_quota
        self.gpus_all_regions = gpus_all_regions
        self._artifacts = artifacts
        self._work_root = work_root
        self._lock = threading.Lock()
        self._vms: dict[tuple[str, str, str], MockVm] = {}
        self._operations: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._faults: dict[str, list[ComputeFault]] = {}
        self._quota_overrides: dict[tuple[str, str], int] = {}
        self._threads: list[threading.Thread] = []

    def image_entry(self, digest: str) -> MockImageEntry:
        """What a VM of image ``digest`` runs: its catalogue entry, else the evaluation."""
        return self.images.get(digest) or MockImageEntry((), self.image_policy)

    def fail_next(self, method: Method, fault: ComputeFault) -> None:
        """Answer the next ``method`` call (after authentication) with ``fault`` (test hook)."""
        with self._lock:
            self._faults.setdefault(method, []).append(fault)

    def status_history(self, project_id: str, zone: str, name: str) -> tuple[str, ...]:
        """Every status the live instance has had, in order."""
        vm = self._vms[(project_id, zone, name)]
        with vm.lock:
            return tuple(vm.history)

    def stop(self) -> None:
        """Kill every running workload (the mock is shutting down) and wait for the VMs."""
        with self._lock:
            vms, threads = list(self._vms.values()), list(self._threads)
        for vm in vms:
            with vm.lock:
                vm.deleted = True  # a VM still booting starts no workload
            _kill(vm)
        for thread in threads:
            thread.join(timeout=30)

    def set_quota(self, project_id: str, metric: str, limit: int) -> None:
        """Set ``project_id``'s limit of quota ``metric`` (e.g. ``N2D_CPUS``,
        ``NVIDIA_H100_GPUS``) in every region
        (what a quota decrease, or an unmet increase request, leaves)."""
        with self._lock:
            self._quota_overrides[(project_id, metric)] = limit

    def set_read_quota(self, project_id: str, per_minute: int) -> None:
        """Set ``project_id``'s read requests per minute (see the class docstring)."""
        self.reads.set_limit(project_id, per_minute)

    def _limit(self, project_id: str, metric: str) -> int:
        default = (self.gpu_quota if metric == GPU_QUOTA_METRIC
                   else self.gpus_all_regions if metric == PROJECT_GPU_METRIC
                   else self.cpu_quota)
        return self._quota_overrides.get((project_id, metric), default)

    def _usage(self, project_id: str, metric: str) -> int:
        return sum(  # stopped (TERMINATED) instances hold no quota
            v.quota.get(metric, 0)
            for v in self._vms.values()
            if v.project_id == project_id and v.status != "TERMINATED"
        )

    def _region(self, project_id: str, region: str) -> Response:
        """``regions.get``: the region with its CPU quotas per confidential machine family and
        its confidential GPU quota."""
        with self._lock:
            quotas = [
                {"metric": metric, "limit": float(self._limit(project_id, metric)),
                 "usage": float(self._usage(project_id, metric))}
                for metric in _QUOTA_METRICS
            ]
        return json_response(200, {
            "kind": "compute#region", "name": region, "status": "UP", "quotas": quotas,
            "selfLink": f"{_API}/projects/{project_id}/regions/{region}",
        })

    def _project(self, project_id: str, project_number: str) -> Response:
        """``projects.get``: the project with its project-wide quotas (``GPUS_ALL_REGIONS``,
        0 in a new project unless raised, as on Google Cloud)."""
        with self._lock:
            limit = self._limit(project_id, PROJECT_GPU_METRIC)
            usage = self._usage(project_id, PROJECT_GPU_METRIC)
        return json_response(200, {
            "kind": "compute#project", "name": project_id, "id": project_number,
            "quotas": [{"metric": PROJECT_GPU_METRIC, "limit": float(limit),
                        "usage": float(usage)}],
            "selfLink": f"{_API}/projects/{project_id}",
        })

    def _catalog(self, request: Request, found: re.Match[str], project: tuple[str, str]
                 ) -> Response:
        """``projects.get``, ``machineTypes.get``, ``acceleratorTypes.get`` and
        ``acceleratorTypes.aggregatedList`` (see :mod:`sealbench.mocktee._compute_catalog`)."""
        project_id, number = project
        if found["aggregated"]:
            return json_response(200, catalog.accelerator_zones(
                project_id, request.query.get("filter", "")))
        if found["kind"] is None:
            return self._project(project_id, number)
        zone, kind, name = found.group("zone", "kind", "name")
        body = (catalog.machine_type if kind == "machineTypes" else catalog.accelerator_type)(
            project_id, zone, name)
        if body is None:
            return _error(404, f"The resource 'projects/{project_id}/zones/{zone}/{kind}/"
                          f"{name}' was not found", "notFound")
        return json_response(200, body)

    def handle(self, request: Request) -> Response:
        if self._artifacts is not None and self._artifacts.handles(request.path):
            return self._artifacts.handle(request)
        match = _ROUTE.match(request.path)
        region = _REGION_ROUTE.match(request.path)
        listed = _CATALOG_ROUTE.match(request.path)
        if listed is not None and request.method == "GET":
            return self._read_only(request, listed, listed.group("project"))
        if match is None and region is None:
            return _error(404, f"{request.method} {request.path} not found", "notFound")
        caller = self._identity.authenticate(request)
        if isinstance(caller, Response):
            return caller
        project = (match or region).group("project")  # type: ignore[union-attr]
        resolved = self._identity.resolve_project(project)
        if resolved is None:
            return _error(404, f"The resource 'projects/{project}' was not found", "notFound")
        off = self._identity.service_disabled(project, "compute.googleapis.com")
        if off is not None:
            return off
        if region is not None:
            if request.method != "GET":
                return _error(404, f"{request.method} {request.path} not found", "notFound")
            if not self._identity.is_owner(caller, resolved[0]):
                resource = f"projects/{resolved[0]}/regions/{region.group('region')}"
                return ComputeFault.permission_denied("compute.regions.get", resource).response()
            return self._region(resolved[0], region.group("region"))
        assert match is not None
        return self._instances(request, caller, match, resolved)

    def _read_only(self, request: Request, listed: re.Match[str], project: str) -> Response:
        caller = self._identity.authenticate(request)
        if isinstance(caller, Response):
            return caller
        resolved = self._identity.resolve_project(project)
        if resolved is None:
            return _error(404, f"The resource 'projects/{project}' was not found", "notFound")
        off = self._identity.service_disabled(project, "compute.googleapis.com")
        if off is not None:
            return off
        if not self._identity.is_owner(caller, resolved[0]):
            kind = listed["kind"] or listed["aggregated"]
            permission = ("compute.projects.get" if kind is None
                          else f"compute.{kind}.{'list' if listed['aggregated'] else 'get'}")
            return ComputeFault.permission_denied(permission, f"projects/{resolved[0]}").response()
        return self._catalog(request, listed, resolved)

    def _instances(self, request: Request, caller: Caller, match: re.Match[str],
                   resolved: tuple[str, str]) -> Response:
        zone, kind, name, sub = match.group("zone", "kind", "name", "sub")
        project_id, project_number = resolved
        method: Method = (
            "operations"
            if kind == "operations"
            else "insert"
            if name is None
            else "serialPort"
            if sub
            else "delete"
            if request.method == "DELETE"
            else "get"
        )
        resource = f"projects/{project_id}/zones/{zone}/{kind}/{name or ''}".rstrip("/")
        if not self._identity.is_owner(caller, project_id):
            permission = f"compute.instances.{_VERBS.get(method, method)}"
            if kind == "operations":
                permission = "compute.zoneOperations.get"
            return ComputeFault.permission_denied(permission, resource).response()
        with self._lock:
            if self._faults.get(method):
                return self._faults[method].pop(0).response()
        if method in ("get", "serialPort", "operations") and (
                over := self.reads.count(project_id, project_number)):
            return over
        if method == "insert" and request.method == "POST":
            return self._insert(request, caller, project_id, project_number, zone)
        if method == "operations" and name is not None:
            op = self._operations.get((project_id, zone, name))
            allowed = request.method == ("POST" if sub == "/wait" else "GET")
            if op is None or not allowed or sub == "/serialPort":
                return _error(404, f"The resource '{resource}' was not found", "notFound")
            return json_response(200, op)
        vm = self._vms.get((project_id, zone, name or ""))
        if vm is None or vm.deleted or kind != "instances":
            return _error(404, f"The resource '{resource}' was not found", "notFound")
        if method == "serialPort" and sub == "/serialPort" and request.method == "GET":
            return self._serial(request, vm)
        if method == "delete":
            return self._delete(vm, caller)
        if method == "get" and request.method == "GET":
            return json_response(200, self._instance_json(vm))
        return _error(404, f"{request.method} {request.path} not found", "notFound")

    def _operation(
        self, vm_key: tuple[str, str, str], kind: str, caller: Caller, error: dict[str, Any] | None
    ) -> Response:
        project_id, zone, name = vm_key
        op_name = f"operation-{int(time.time() * 1000)}-{secrets.token_hex(6)}"
        base = f"{_API}/projects/{project_id}/zones/{zone}"
        op: dict[str, Any] = {
            "kind": "compute#operation",
            "id": str(secrets.randbelow(10**18)),
            "name": op_name,
            "zone": base,
            "operationType": kind,
            "targetLink": f"{base}/instances/{name}",
            "status": "DONE",
            "user": caller.principal.removeprefix("user:"),
            "progress": 100,
            "selfLink": f"{base}/operations/{op_name}",
            **(error or {}),
        }
        with self._lock:
            self._operations[(project_id, zone, op_name)] = op
        return json_response(200, op)

    @staticmethod
    def _instance_json(vm: MockVm) -> dict[str, Any]:
        base = f"{_API}/projects/{vm.project_id}/zones/{vm.zone}"
        with vm.lock:
            status = vm.status
        return {
            **vm.body,
            "kind": "compute#instance",
            "id": vm.instance_id,
            "status": status,
            "zone": base,
            "selfLink": f"{base}/instances/{vm.name}",
            "creationTimestamp": vm.created,
        }

    def _serial(self, request: Request, vm: MockVm) -> Response:
        try:
            port, start = int(request.query.get("port", "1")), int(request.query.get("start", "0"))
        except ValueError:
            return _error(400, "Invalid value for field 'port' or 'start'")
        if not 1 <= port <= 4 or start < 0:
            return _error(400, "Invalid value for field 'port' or 'start'")
        with vm.lock:
            stopped = vm.status == "TERMINATED"
        if stopped and not self._serial_after_stop:
            return _error(400, f"The serial port output of instance {vm.name} is not available: "
                          "the instance is not running")
        contents, begin, end = vm.serial.read(start) if port == 1 else ("", start, start)
        return json_response(
            200,
            {
                "kind": "compute#serialPortOutput",
                "contents": contents,
                "start": str(begin),
                "next": str(end),
                "selfLink": self._instance_json(vm)["selfLink"] + "/serialPort",
            },
        )

    def _delete(self, vm: MockVm, caller: Caller) -> Response:
        with self._lock:
            self._vms.pop((vm.project_id, vm.zone, vm.name), None)
        with vm.lock:
            vm.deleted = True
        _kill(vm)
        return self._operation((vm.project_id, vm.zone, vm.name), "delete", caller, None)

    def _insert(
        self, request: Request, caller: Caller, project_id: str, project_number: str, zone: str
    ) -> Response:
        try:
            body = request.json()
        except (UnicodeDecodeError, json.JSONDecodeError):
            body = None
        if not isinstance(body, dict):
            return _error(400, "Invalid JSON payload received", "parseError")
        checked = validate_insert(body, project_id, project_number, zone)
        if isinstance(checked, Response):
            return checked
        key = (project_id, zone, str(body["name"]))
        with self._lock:
            if key in self._vms:
                resource = f"projects/{project_id}/zones/{zone}/instances/{key[2]}"
                return _error(409, f"The resource '{resource}' already exists", "alreadyExists")
            exceeded = [
                (metric, self._limit(project_id, metric))
                for metric, amount in sorted(checked.quota.items())
                if self._usage(project_id, metric) + amount > self._limit(project_id, metric)
            ]
            if exceeded:
                metric, limit = exceeded[0]
                fault = ComputeFault.quota_exceeded(
                    metric, limit, None if metric == PROJECT_GPU_METRIC else zone.rsplit("-", 1)[0])
                error: dict[str, Any] | None = {
                    "httpErrorStatusCode": 403,
                    "httpErrorMessage": "FORBIDDEN",
                    "error": {"errors": [{"code": "QUOTA_EXCEEDED", "message": fault.message}]},
                }
            else:
                error = None
                instance_id = str(secrets.randbelow(9 * 10**18) + 10**18)
                vm = MockVm(
                    project_id, project_number, zone, key[2], instance_id, body,
                    dict(checked.quota), checked.debug, gpu=checked.gpu,
                    shutdown_s=self._shutdown_s,
                )
                self._vms[key] = vm
                thread = threading.Thread(
                    target=boot,
                    args=(vm, self.image_entry, self._minter, self._python, self._work_root,
                          self._artifacts.pull_refusal if self._artifacts else None),
                    name=f"mocktee-vm-{vm.name}",
                    daemon=True,
                )
                self._threads = [t for t in self._threads if t.is_alive()] + [thread]
                thread.start()
        return self._operation(key, "insert", caller, error)


def _kill(vm: MockVm) -> None:
    with vm.lock:
        process = vm.process
    if process is not None and process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
