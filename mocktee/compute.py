"""The mock Compute Engine API: the ``instances`` and ``zoneOperations`` REST endpoints that the
Confidential Space launcher (``sealbench.client.launchers.confidential_space``) calls, each
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

Insert validates what the API validates: the name; machine type vs. confidential instance type
(SEV: N2D/C2D/C3D; TDX: C3; anything but SEV on N2D needs ``onHostMaintenance: TERMINATE``);
the boot image (only the ``confidential-space`` and ``confidential-space-debug`` families of
``confidential-space-images`` exist here); that the caller may use the service account (one of
the project's own); the per-family CPU quota, whose excess fails the *operation* with
``QUOTA_EXCEEDED`` as GCP reports it. Three rules are the mock's own and say so: the VM must be
confidential, Shielded VM Secure Boot must be on, and ``tee-image-reference`` must name a digest
(``repo@sha256:…``; the mock has no registry to resolve tags). Errors have Compute's JSON shape
(``errors[].reason``, an ``ErrorInfo`` detail for quota and rate limits);
:meth:`MockCompute.fail_next` makes the next call of a kind fail (a test hook). Instances live
in memory only: a restarted mock has none.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sealbench.mocktee._compute_vm import (
    DIGEST_REFERENCE,
    ImagePolicy,
    MockVm,
    boot,
    metadata_items,
)
from sealbench.mocktee._http import Request, Response, json_response
from sealbench.mocktee.identity import Caller, Identity
from sealbench.mocktee.verifier import TokenMinter

__all__ = ["CS_IMAGE_PROJECT", "ComputeFault", "ImagePolicy", "Method", "MockCompute"]

CS_IMAGE_PROJECT = "confidential-space-images"
_FAMILIES = {"confidential-space": False, "confidential-space-debug": True}
_IMAGE = re.compile(
    r"^(?:https://(?:www|compute)\.googleapis\.com/compute/v1/)?"
    r"projects/(?P<project>[^/]+)/global/images/family/(?P<family>[^/]+)$"
)
_MACHINE = re.compile(r"^(?:.*/)?zones/(?P<zone>[^/]+)/machineTypes/(?P<type>[a-z0-9-]+)$")
_MACHINE_TYPE = re.compile(r"^(?P<family>n2d|c2d|c3d|c3)-(standard|highmem|highcpu)-(?P<cpus>\d+)$")
_CONFIDENTIAL = {"SEV": ("n2d", "c2d", "c3d"), "TDX": ("c3",)}
_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_ROUTE = re.compile(
    r"^/compute/v1/projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/"
    r"(?P<kind>instances|operations)(?:/(?P<name>[^/]+)(?P<sub>/serialPort|/wait)?)?$"
)
_REGION_ROUTE = re.compile(
    r"^/compute/v1/projects/(?P<project>[^/]+)/regions/(?P<region>[a-z0-9-]+)$"
)
_QUOTA_METRICS = ("N2D_CPUS", "C2D_CPUS", "C3D_CPUS", "C3_CPUS")
_API = "https://www.googleapis.com/compute/v1"
Method = Literal["insert", "get", "serialPort", "delete", "operations"]
_VERBS = {"insert": "create", "serialPort": "getSerialPortOutput"}


@dataclass(frozen=True)
class ComputeFault:
    """An error in Compute's JSON shape, for :meth:`MockCompute.fail_next`."""

    code: int
    message: str
    reason: str
    error_info_reason: str | None = None

    @classmethod
    def rate_limited(cls) -> ComputeFault:
        return cls(429, "Rate Limit Exceeded", "rateLimitExceeded", "RATE_LIMIT_EXCEEDED")

    @classmethod
    def quota_exceeded(cls, metric: str, limit: float, region: str) -> ComputeFault:
        message = f"Quota '{metric}' exceeded.  Limit: {limit:.1f} in region {region}."
        return cls(403, message, "quotaExceeded", "QUOTA_EXCEEDED")

    @classmethod
    def permission_denied(cls, permission: str, resource: str) -> ComputeFault:
        return cls(403, f"Required '{permission}' permission for '{resource}'", "forbidden")

    def response(self) -> Response:
        error: dict[str, Any] = {
            "code": self.code,
            "message": self.message,
            "errors": [{"message": self.message, "domain": "global", "reason": self.reason}],
        }
        if self.error_info_reason:
            error["details"] = [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": self.error_info_reason,
                    "domain": "compute.googleapis.com",
                }
            ]
        return json_response(self.code, {"error": error})


def _error(code: int, message: str, reason: str = "invalid") -> Response:
    return ComputeFault(code, message, reason).response()


def _validate(
    body: dict[str, Any], project_id: str, project_number: str, zone: str
) -> tuple[int, str, bool] | Response:
    """``(cpus, quota metric, debug image)`` of a valid insert body, else Compute's 4xx."""
    if not isinstance(body.get("name"), str) or not _NAME.match(body["name"]):
        return _error(400, "Invalid value for field 'resource.name'")
    machine = _MACHINE.match(str(body.get("machineType", "")))
    machine_type = _MACHINE_TYPE.match(machine.group("type")) if machine else None
    if machine is None or machine_type is None or machine.group("zone") != zone:
        return _error(400, "Invalid value for field 'resource.machineType'")
    confidential = (body.get("confidentialInstanceConfig") or {}).get("confidentialInstanceType")
    if confidential not in _CONFIDENTIAL:
        return _error(
            400,
            "the sealbench mock runs only Confidential VMs: set "
            "confidentialInstanceConfig.confidentialInstanceType to SEV or TDX",
        )
    family = machine_type.group("family")
    if family not in _CONFIDENTIAL[confidential]:
        return _error(
            400,
            f"Confidential instance type {confidential} is not supported for machine type "
            f"'{machine.group('type')}'",
        )
    maintenance = (body.get("scheduling") or {}).get("onHostMaintenance", "MIGRATE")
    if maintenance != "TERMINATE" and (confidential != "SEV" or family != "n2d"):
        return _error(
            400,
            f"Instances with confidential type {confidential} on {family} must set "
            "scheduling.onHostMaintenance to TERMINATE",
        )
    if not (body.get("shieldedInstanceConfig") or {}).get("enableSecureBoot"):
        return _error(400, "the sealbench mock requires Shielded VM Secure Boot (enableSecureBoot)")
    boot_disks = [d for d in body.get("disks") or [] if d.get("boot")]
    params = (boot_disks[0].get("initializeParams") or {}) if len(boot_disks) == 1 else {}
    source = str(params.get("sourceImage", ""))
    image = _IMAGE.match(source)
    if image is None or (image["project"], image["family"] in _FAMILIES) != (
        CS_IMAGE_PROJECT,
        True,
    ):
        return _error(404, f"The resource '{source}' was not found", "notFound")
    accounts = body.get("serviceAccounts") or []
    email = str(accounts[0].get("email", "")) if len(accounts) == 1 else ""
    if not email.endswith(
        (
            f"@{project_id}.iam.gserviceaccount.com",
            f"{project_number}-compute@developer.gserviceaccount.com",
        )
    ):
        return _error(
            400,
            f"The user does not have access to service account '{email}'. Ask a project owner "
            "to grant you the iam.serviceAccountUser role on the service account",
        )
    try:
        metadata = metadata_items(body)
    except ValueError as exc:
        return _error(400, str(exc))
    if not DIGEST_REFERENCE.match(metadata.get("tee-image-reference", "")):
        return _error(
            400,
            "tee-image-reference must name the image by digest (repo@sha256:<64 hex>); the "
            "sealbench mock has no registry to resolve tags",
        )
    return int(machine_type["cpus"]), f"{family.upper()}_CPUS", _FAMILIES[image["family"]]


class MockCompute:
    """The Compute stand-in. ``minter`` signs the VMs' attestation tokens; ``python`` runs
    ``-m sealbench.enclave``; ``cpu_quota`` is each project's CPU limit per machine family."""

    def __init__(
        self,
        identity: Identity,
        minter: TokenMinter,
        *,
        python: str = sys.executable,
        image_policy: ImagePolicy | None = None,
        cpu_quota: int = 64,
        work_root: Path | None = None,
    ) -> None:
        self._identity = identity
        self._minter = minter
        self._python = python
        self.image_policy = image_policy or ImagePolicy()
        self.cpu_quota = cpu_quota
        self._work_root = work_root
        self._lock = threading.Lock()
        self._vms: dict[tuple[str, str, str], MockVm] = {}
        self._operations: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._faults: dict[str, list[ComputeFault]] = {}
        self._quota_overrides: dict[tuple[str, str], int] = {}
        self._threads: list[threading.Thread] = []

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
        """Set ``project_id``'s limit of quota ``metric`` (e.g. ``N2D_CPUS``) in every region
        (what a quota decrease, or an unmet increase request, leaves)."""
        with self._lock:
            self._quota_overrides[(project_id, metric)] = limit

    def _limit(self, project_id: str, metric: str) -> int:
        return self._quota_overrides.get((project_id, metric), self.cpu_quota)

    def _usage(self, project_id: str, metric: str) -> int:
        return sum(  # stopped (TERMINATED) instances hold no CPU quota
            v.cpus
            for v in self._vms.values()
            if (v.project_id, v.quota_metric) == (project_id, metric) and v.status != "TERMINATED"
        )

    def _region(self, project_id: str, region: str) -> Response:
        """``regions.get``: the region with its CPU quotas per confidential machine family."""
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

    def handle(self, request: Request) -> Response:
        match = _ROUTE.match(request.path)
        region = _REGION_ROUTE.match(request.path)
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
        checked = _validate(body, project_id, project_number, zone)
        if isinstance(checked, Response):
            return checked
        cpus, metric, debug = checked
        key = (project_id, zone, str(body["name"]))
        with self._lock:
            if key in self._vms:
                resource = f"projects/{project_id}/zones/{zone}/instances/{key[2]}"
                return _error(409, f"The resource '{resource}' already exists", "alreadyExists")
            used, limit = self._usage(project_id, metric), self._limit(project_id, metric)
            if used + cpus > limit:
                fault = ComputeFault.quota_exceeded(metric, limit, zone.rsplit("-", 1)[0])
                error = {
                    "httpErrorStatusCode": 403,
                    "httpErrorMessage": "FORBIDDEN",
                    "error": {"errors": [{"code": "QUOTA_EXCEEDED", "message": fault.message}]},
                }
            else:
                error = None
                instance_id = str(secrets.randbelow(9 * 10**18) + 10**18)
                vm = MockVm(
                    project_id, project_number, zone, key[2], instance_id, body, cpus, metric, debug
                )
                self._vms[key] = vm
                thread = threading.Thread(
                    target=boot,
                    args=(vm, self.image_policy, self._minter, self._python, self._work_root),
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
