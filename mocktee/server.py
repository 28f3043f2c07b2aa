"""The whole mock confidential cloud in one object, :class:`MockCloud`: verifier, STS, IAM, KMS
and storage (emulator + authorization proxy), each on its own loopback port, plus an INSECURE
control endpoint for what the real cloud does out of band (creating a project with an owner,
handing an owner an access token, signing a workload's attestation token for a launcher in
another process).

``endpoints.json`` in the state directory (version 1) tells launchers and tests where
everything is, and lets a restart reuse the same ports, so the issuer URL recorded in providers
stays valid::

    {"version": 1, "insecure": true, "issuer": "http://127.0.0.1:P", "jwks_uri": …,
     "sts_token_url": "http://127.0.0.1:P/v1/token", "iam": url, "kms": url, "storage": url,
     "control": url, "compute": url, "apis": url, "ports": {"verifier": P, "sts": P, "iam": P,
     "kms": P, "storage": P, "emulator": P, "control": P, "compute": P, "apis": P}}

``compute`` is the Compute Engine stand-in (:mod:`sealbench.mocktee.compute`) that the
Confidential Space launcher talks to; ``apis`` serves Service Usage, project IAM policies and the
OAuth 2.0 token endpoint (:mod:`sealbench.mocktee.apis`). An ``endpoints.json`` written before
either existed loads with it unset.

The control endpoint also injects the failures a real project produces, for tests only
(``POST /mock/v1/faults``, :meth:`MockCloud.inject`), and hands out refresh tokens for
``external_account_authorized_user`` Application Default Credentials (``POST
/mock/v1/refreshTokens``). It answers only what the mock's own clients send: a request naming
another ``Origin`` than its own (a web page's) is refused (403), and so is a POST that is not
``application/json`` (415), the kind a page may send cross-site without asking first.

IAM propagation delay. Google applies a changed IAM policy late ("typically 2 minutes,
potentially 7 minutes or longer"); the mock can too. ``iam_propagation_s`` (seconds, default 0:
at once) is the delay after a ``setIamPolicy`` on a KMS key or a bucket before permission checks
(decrypt, encrypt, object reads and writes, ``testPermissions``) see the new policy; until then
the policy it replaced still applies, so a fresh grant is refused and a revoked one still
works. ``getIamPolicy`` shows the new policy at once, as at Google. Set it with:

* ``MockCloud(state_dir, iam_propagation_s=N)``, or :meth:`MockCloud.set_iam_propagation`;
* ``sealbench mock-tee up --iam-propagation-s N`` (or ``python -m sealbench.mocktee
  --iam-propagation-s N``);
* at runtime, ``POST {control}/mock/v1/iamPropagation`` with ``{"seconds": N}`` (answers
  ``{"seconds": N}``; ``GET`` reads it). It applies to policy versions already written too: a
  delay raised later also delays the grants of the last N seconds.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from sealbench.contract.spec import ServiceEndpoints
from sealbench.crypto.attestation import Jwks
from sealbench.mocktee._http import HttpService, Request, Response, google_error, json_response
from sealbench.mocktee.apis import MockProjectApis
from sealbench.mocktee.artifacts import MockArtifacts
from sealbench.mocktee.compute import MockCompute
from sealbench.mocktee.iam import MockIam
from sealbench.mocktee.identity import Identity
from sealbench.mocktee.kms import MockKms
from sealbench.mocktee.launcher import MockLauncher
from sealbench.mocktee.platform import InsecureMockPlatform
from sealbench.mocktee.state import MockState, atomic_write
from sealbench.mocktee.storage import EmulatorProcess, StorageProxy, free_port
from sealbench.mocktee.sts import MockSts
from sealbench.mocktee.verifier import MockVerifier, WorkloadLaunch

__all__ = ["ENDPOINTS_FILE", "FAULTS", "MockCloud", "MockEndpoints", "MockPorts"]

_log = logging.getLogger("sealbench.mocktee")

ENDPOINTS_FILE = "endpoints.json"
_SERVICES = (
    "verifier", "sts", "iam", "kms", "storage", "emulator", "control", "compute", "apis"
)
#: What the control endpoint's ``POST /mock/v1/faults`` can break (see :meth:`MockCloud.inject`).
_PROPAGATION = "/mock/v1/iamPropagation"
FAULTS = ("permission-denied", "api-disabled", "key-destroyed", "bucket-missing", "quota-exceeded",
          "org-policy", "perimeter", "bucket-fine-grained", "compute-read-quota")


@dataclass(frozen=True)
class MockPorts:
    """Loopback ports of the mock's services; 0 picks a free port."""

    verifier: int = 0
    sts: int = 0
    iam: int = 0
    kms: int = 0
    storage: int = 0
    emulator: int = 0
    control: int = 0
    compute: int = 0
    apis: int = 0

    @classmethod
    def parse(cls, spec: str) -> MockPorts:
        """``"verifier=9100,sts=9101"`` (unnamed services pick free ports)."""
        values: dict[str, int] = {}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            name, _, port = item.partition("=")
            if name not in _SERVICES or not port.isdigit():
                raise ValueError(f"bad port spec {item!r}; services: {', '.join(_SERVICES)}")
            values[name] = int(port)
        return cls(**values)


@dataclass(frozen=True)
class MockEndpoints:
    """Where the running mock's services are (see the module docstring for the JSON form)."""

    issuer: str
    jwks_uri: str
    sts_token_url: str
    iam: str
    kms: str
    storage: str
    control: str
    ports: MockPorts
    compute: str | None = None
    apis: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"version": 1, "insecure": True, **asdict(self)}

    def service_endpoints(self) -> ServiceEndpoints:
        """The mock's STS, KMS and storage URLs: what a mock run's spec names and what the
        mock's key-release conditions pin (:mod:`sealbench.contract.inputs`)."""
        return ServiceEndpoints(self.sts_token_url, self.kms, self.storage)

    def trusted_issuer(self) -> dict[str, Any]:
        """This mock as an entry of the registry's ``SEALBENCH_SERVER_TRUSTED_ISSUERS``: its
        issuer, JWKS, the endpoints its genuine runs name, and its platform (the registry checks
        its tokens with :class:`~sealbench.mocktee.platform.InsecureMockPlatform`)."""
        return {
            "issuer": self.issuer,
            "jwks_url": self.jwks_uri,
            "endpoints": asdict(self.service_endpoints()),
            "platform": InsecureMockPlatform.name,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MockEndpoints:
        if data.get("version") != 1:
            raise ValueError("unsupported endpoints.json version")
        fields = {k: v for k, v in data.items() if k not in ("version", "insecure", "ports")}
        return cls(**fields, ports=MockPorts(**data["ports"]))

    @classmethod
    def load(cls, state_dir: Path) -> MockEndpoints:
        return cls.from_json(json.loads((state_dir / ENDPOINTS_FILE).read_bytes()))


class MockCloud:
    """Starts and stops every mock service over one state directory."""

    def __init__(
        self,
        state_dir: Path,
        *,
        ports: MockPorts | None = None,
        clock: Callable[[], float] = time.time,
        iam_propagation_s: float = 0.0,
    ) -> None:
        self.state_dir = state_dir
        self.state = MockState(state_dir)
        if ports is None:
            ports = self._previous_ports() or MockPorts()
        chosen = {name: getattr(ports, name) or 0 for name in _SERVICES}
        if not chosen["emulator"]:
            chosen["emulator"] = free_port()
        self.identity = Identity(self.state, clock)
        self.set_iam_propagation(iam_propagation_s)
        verifier_service = HttpService("verifier", self._verifier_handle, port=chosen["verifier"])
        self.verifier = MockVerifier(self.state, verifier_service.url, clock=clock)
        self._jwks = Jwks.from_json(self.verifier.jwks())
        self.sts = MockSts(self.state, self.identity, lambda: self._jwks, clock)
        self.iam = MockIam(self.state, self.identity, clock)
        self.kms = MockKms(self.state, self.identity, clock)
        self.artifacts = MockArtifacts(self.state, self.identity)
        self.compute = MockCompute(self.identity, self.verifier, work_root=state_dir,
                                   artifacts=self.artifacts)
        self.apis = MockProjectApis(self.state, self.identity)
        self._services = [
            verifier_service,
            HttpService("sts", self.sts.handle, port=chosen["sts"]),
            HttpService("iam", self.iam.handle, port=chosen["iam"]),
            HttpService("kms", self.kms.handle, port=chosen["kms"]),
            HttpService("control", self._control, port=chosen["control"]),
            HttpService("compute", self.compute.handle, port=chosen["compute"]),
            HttpService("apis", self.apis.handle, port=chosen["apis"]),
        ]
        self._emulator = EmulatorProcess(str(self.state.storage_dir), chosen["emulator"])
        self._proxy = StorageProxy(
            self.state, self.identity, ("127.0.0.1", chosen["emulator"]), port=chosen["storage"]
        )
        by_name = {s.name: s for s in self._services}
        self.endpoints = MockEndpoints(
            issuer=self.verifier.issuer,
            jwks_uri=f"{self.verifier.issuer}/jwks",
            sts_token_url=f"{by_name['sts'].url}/v1/token",
            iam=by_name["iam"].url,
            kms=by_name["kms"].url,
            storage=self._proxy.url,
            control=by_name["control"].url,
            compute=by_name["compute"].url,
            apis=by_name["apis"].url,
            ports=MockPorts(
                verifier=by_name["verifier"].port,
                sts=by_name["sts"].port,
                iam=by_name["iam"].port,
                kms=by_name["kms"].port,
                storage=self._proxy.port,
                emulator=chosen["emulator"],
                control=by_name["control"].port,
                compute=by_name["compute"].port,
                apis=by_name["apis"].port,
            ),
        )

        self.verifier.service_endpoints = {
            "sts_url": self.endpoints.sts_token_url,
            "kms_endpoint": self.endpoints.kms,
            "storage_endpoint": self.endpoints.storage,
        }

    def _previous_ports(self) -> MockPorts | None:
        try:
            return MockEndpoints.load(self.state_dir).ports
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _verifier_handle(self, request: Request) -> Response:
        return self.verifier.handle(request)

    def start(self) -> MockEndpoints:
        self._emulator.start()
        for service in self._services:
            service.start()
        self._proxy.start()
        atomic_write(
            self.state_dir / ENDPOINTS_FILE,
            json.dumps(self.endpoints.to_json(), indent=2).encode(),
        )
        _log.warning(
            "INSECURE mock confidential cloud running (state %s); it proves nothing about "
            "hardware and must never hold real data",
            self.state_dir,
        )
        return self.endpoints

    def stop(self) -> None:
        self.compute.stop()
        self._proxy.stop()
        for service in reversed(self._services):
            service.stop()
        self._emulator.stop()

    def __enter__(self) -> MockCloud:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- what the real cloud does out of band ----------------------------------------------

    def create_project(self, project_id: str, project_number: str, owner: str) -> None:
        """Register a project and its owner (``user:EMAIL``). A new project has only Google's
        default APIs on (:data:`~sealbench.mocktee.identity.DEFAULT_ENABLED_SERVICES`); its owner
        enables the rest (:func:`sealbench.mocktee.provision.enable_services`)."""
        if not owner.startswith("user:"):
            raise ValueError("owners are user:EMAIL members")
        self.identity.create_project(project_id, project_number, owner)

    def set_iam_propagation(self, seconds: float) -> None:
        """Delay, in seconds, before a KMS key's or bucket's new IAM policy is in effect (0: at
        once; see the module docstring)."""
        if not 0 <= seconds <= 86400:
            raise ValueError("the IAM propagation delay must be 0 to 86400 seconds")
        self.identity.iam_propagation_s = float(seconds)

    def owner_token(self, principal: str) -> str:
        """An access token for ``principal`` (``user:EMAIL``), like ``gcloud auth
        print-access-token``. INSECURE: anyone who can reach the mock may ask for one."""
        if not principal.startswith("user:"):
            raise ValueError("owner tokens are for user:EMAIL principals")
        token, _ = self.identity.issue(principal)
        return token

    def inject(self, fault: Mapping[str, Any]) -> None:
        """Break something the way a real project breaks (test-only, INSECURE control)::

            {"fault": "permission-denied", "project": P, "principal": "user:EMAIL"}
                the principal is no longer an owner of P: every call it makes there is refused
            {"fault": "api-disabled", "project": P, "service": "cloudkms.googleapis.com"}
                the API is disabled in P (403 SERVICE_DISABLED, as 'gcloud services disable')
            {"fault": "key-destroyed", "key": "projects/…/cryptoKeys/K"}
                the key's primary version is DESTROYED (its material gone)
            {"fault": "bucket-missing", "bucket": B}
                the bucket no longer exists (404)
            {"fault": "quota-exceeded", "project": P, "metric": "N2D_CPUS", "limit": 0}
                P's CPU quota of that family is ``limit`` in every region
            {"fault": "org-policy", "project": P, "constraint": C, "value": true | false | [..]}
                P's organisation policy for C (a boolean constraint's enforcement, a list
                constraint's allowed values: :mod:`sealbench.mocktee.orgpolicy`)
            {"fault": "perimeter", "project": P}
                P is inside a VPC Service Controls perimeter that refuses federated identities
            {"fault": "bucket-fine-grained", "bucket": B}
                B has fine-grained access (no uniform bucket-level access), as a bucket created
                before its organisation enforced it
            {"fault": "compute-read-quota", "project": P, "per_minute": N}
                Compute answers P's reads past N a minute with 403 ``rateLimitExceeded``
        """
        kind = fault.get("fault")
        if kind == "permission-denied":
            project, principal = str(fault["project"]), str(fault["principal"])
            with self.state.edit() as doc:
                owners = doc["projects"][project]["owners"]
                doc["projects"][project]["owners"] = [o for o in owners if o != principal]
        elif kind == "api-disabled":
            self.apis.set_service(str(fault["project"]), str(fault["service"]), enabled=False)
        elif kind == "key-destroyed":
            self.kms.destroy_primary(str(fault["key"]))
        elif kind == "bucket-missing":
            with self.state.edit() as doc:
                if doc["buckets"].pop(str(fault["bucket"]), None) is None:
                    raise ValueError(f"no bucket {fault['bucket']}")
        elif kind == "quota-exceeded":
            self.compute.set_quota(
                str(fault["project"]), str(fault["metric"]), int(fault["limit"])
            )
        elif kind == "org-policy":
            value = fault["value"]
            if not isinstance(value, bool | list):
                raise ValueError("an organisation policy's value is a boolean or a list")
            with self.state.edit() as doc:
                doc["org_policies"].setdefault(str(fault["project"]), {})[
                    str(fault["constraint"])] = value
        elif kind == "perimeter":
            with self.state.edit() as doc:
                doc["perimeters"][str(fault["project"])] = True
        elif kind == "bucket-fine-grained":
            with self.state.edit() as doc:
                if str(fault["bucket"]) not in doc["buckets"]:
                    raise ValueError(f"no bucket {fault['bucket']}")
                doc["bucket_config"].setdefault(str(fault["bucket"]), {
                    "public_access_prevention": "inherited"})["uniform"] = False
        elif kind == "compute-read-quota":
            self.compute.set_read_quota(str(fault["project"]), int(fault["per_minute"]))
        else:
            raise ValueError(f"unknown fault {kind!r}; known: {', '.join(FAULTS)}")

    def launcher(self) -> MockLauncher:
        """A launcher whose tokens this process's verifier signs."""
        return MockLauncher(self.verifier)

    def _control(self, request: Request) -> Response:
        refused = self._cross_site(request)
        if refused is not None:
            return refused
        if request.method == "GET" and request.path == "/mock/v1/endpoints":
            return json_response(200, self.endpoints.to_json())
        if request.method == "GET" and request.path == _PROPAGATION:
            return json_response(200, {"seconds": self.identity.iam_propagation_s})
        if request.method != "POST":
            return google_error(404, f"{request.method} {request.path} not found")
        try:
            body = request.json()
            if request.path == "/mock/v1/projects":
                self.create_project(
                    str(body["projectId"]), str(body["projectNumber"]), str(body["owner"])
                )
                return json_response(200, body)
            if request.path == "/mock/v1/refreshTokens":
                refresh = self.apis.issue_refresh_token(str(body["principal"]))
                return json_response(200, {"refresh_token": refresh})
            if request.path == "/mock/v1/faults":
                self.inject(body)
                return json_response(200, body)
            if request.path == _PROPAGATION:
                seconds = body["seconds"]
                if isinstance(seconds, bool) or not isinstance(seconds, int | float):
                    raise TypeError("seconds must be a number")
                self.set_iam_propagation(float(seconds))
                return json_response(200, {"seconds": self.identity.iam_propagation_s})
            if request.path == "/mock/v1/ownerTokens":
                token = self.owner_token(str(body["principal"]))
                return json_response(200, {"access_token": token, "token_type": "Bearer"})
            if request.path == "/mock/v1/attestation:mint":
                launch = WorkloadLaunch.from_json(body["launch"])
                nonces = body.get("nonces") or []
                token = self.verifier.mint(launch, str(body["audience"]), [str(n) for n in nonces])
                return json_response(200, {"token": token})
        except (KeyError, TypeError, ValueError) as exc:
            return google_error(400, f"bad control request: {type(exc).__name__}: {exc}")
        return google_error(404, f"{request.path} not found")

    def _cross_site(self, request: Request) -> Response | None:
        """A refusal for a request a web page could have sent (None for the mock's own clients):
        an ``Origin`` header other than the control endpoint's own origin (a browser names the
        page's), or a POST whose body is not ``application/json`` (a page may send a
        ``text/plain`` form body cross-site without asking first; a JSON one it may not)."""
        origin = request.headers.get("origin")
        own = self.endpoints.control.rstrip("/")
        if origin is not None and origin.rstrip("/") != own:
            return google_error(
                403, f"cross-site request refused: Origin {origin[:80]!r} is not {own}"
            )
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if request.method != "GET" and media != "application/json":
            return google_error(
                415, f"the control endpoint takes application/json, not {media[:60]!r}",
                "INVALID_ARGUMENT",
            )
        return None
