"""Mock Cloud Storage: ``gcp-storage-emulator`` keeping its objects on disk in the state
directory, behind a small authorization proxy. The emulator itself has no authentication at all
(bearer tokens are ignored, its IAM endpoints are stubs), so the proxy checks every request's
bearer token against bucket IAM policies that it keeps itself (``GET``/``PUT
/storage/v1/b/{bucket}/iam``), then streams the request to the emulator and the answer back.

Only the JSON-API routes that ``google-cloud-storage`` uses for buckets and objects are
forwarded; anything else is refused. The emulator listens on an internal loopback port that is
not advertised: a process on this machine that connects to it directly bypasses all checks
(INSECURE BY DESIGN, like the rest of the mock).

The bucket's ``iamConfiguration`` (which the emulator ignores) is the proxy's, kept in
``state.json`` ``bucket_config`` and shown in every bucket resource it returns: uniform
bucket-level access (``uniformBucketLevelAccess.enabled``) and public access prevention, set on
create and by ``PATCH b/{bucket}`` (``gcloud storage buckets update
--uniform-bucket-level-access``). As at Google ("Identity federation: products and
limitations"), a federated identity (``principal://``, with its ``principalSet://`` sets) is
refused every object and bucket permission on a bucket **without** uniform bucket-level access,
whatever the bucket's policy grants it; the project's organisation policies
(:mod:`sealbench.mocktee.orgpolicy`) refuse a bucket created without it (412) and public members
on a project that enforces public access prevention (412); a project inside a VPC Service
Controls perimeter refuses federated identities (403 ``vpcServiceControls``).
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import re
import socket
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from sealbench.mocktee._http import POLL_INTERVAL_S, Request
from sealbench.mocktee.identity import (
    Caller,
    Identity,
    condition_refusal,
    has_role,
    version_refusal,
)
from sealbench.mocktee.orgpolicy import (
    PUBLIC_ACCESS_PREVENTION,
    UNIFORM_ACCESS,
    enforced,
    perimeter_refusal,
    violation,
)
from sealbench.mocktee.state import MockState

__all__ = ["ROLE_PERMISSIONS", "EmulatorProcess", "StorageProxy", "free_port", "roles_granting"]

_log = logging.getLogger("sealbench.mocktee")

#: Seconds the proxy waits on the emulator for one request.
EMULATOR_TIMEOUT_S = 120.0
_COPY = 1 << 20
_MAX_POLICY_BYTES = 256 * 1024
_OBJECTS_ALL = frozenset({
    "storage.objects.get", "storage.objects.list", "storage.objects.create",
    "storage.objects.delete", "storage.objects.update", "storage.objects.getIamPolicy",
    "storage.objects.setIamPolicy",
})
_BUCKETS_ALL = frozenset({
    "storage.buckets.get", "storage.buckets.update", "storage.buckets.getIamPolicy",
    "storage.buckets.setIamPolicy", "storage.buckets.delete",
})
#: Google's predefined Cloud Storage roles and the permissions (of those the mock serves) each
#: grants, as Google's "IAM roles for Cloud Storage" lists them. Note what they do NOT grant:
#: ``objectViewer``, ``objectAdmin`` and ``objectUser`` never ``storage.buckets.get`` (bucket
#: metadata); ``objectCreator`` neither reads, lists nor deletes, so it cannot replace an
#: existing object (an overwrite needs ``storage.objects.delete`` too).
ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    "roles/storage.objectViewer": frozenset({"storage.objects.get", "storage.objects.list"}),
    "roles/storage.objectCreator": frozenset({"storage.objects.create"}),
    "roles/storage.objectUser": frozenset({
        "storage.objects.get", "storage.objects.list", "storage.objects.create",
        "storage.objects.delete", "storage.objects.update",
    }),
    "roles/storage.objectAdmin": _OBJECTS_ALL,
    "roles/storage.admin": _OBJECTS_ALL | _BUCKETS_ALL,
    "roles/storage.legacyBucketReader": frozenset({
        "storage.buckets.get", "storage.objects.list",
    }),
    "roles/storage.legacyBucketWriter": frozenset({
        "storage.buckets.get", "storage.objects.list", "storage.objects.create",
        "storage.objects.delete",
    }),
    "roles/storage.legacyBucketOwner": frozenset({
        "storage.buckets.get", "storage.buckets.update", "storage.buckets.getIamPolicy",
        "storage.buckets.setIamPolicy", "storage.objects.list", "storage.objects.create",
        "storage.objects.delete",
    }),
    "roles/storage.legacyObjectReader": frozenset({"storage.objects.get"}),
    "roles/storage.legacyObjectOwner": frozenset({
        "storage.objects.get", "storage.objects.update", "storage.objects.getIamPolicy",
        "storage.objects.setIamPolicy",
    }),
}


def roles_granting(permission: str) -> tuple[str, ...]:
    """The predefined roles that grant ``permission``."""
    return tuple(role for role, held in ROLE_PERMISSIONS.items() if permission in held)


_B = r"(?P<bucket>[-.\w]+)"
_ROUTES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("GET", re.compile(rf"^/storage/v1/b/{_B}$"), "storage.buckets.get"),
    ("GET", re.compile(rf"^/storage/v1/b/{_B}/o$"), "storage.objects.list"),
    ("GET", re.compile(rf"^/storage/v1/b/{_B}/o/.+$"), "storage.objects.get"),
    ("GET", re.compile(rf"^/download/storage/v1/b/{_B}/o/.+$"), "storage.objects.get"),
    ("POST", re.compile(rf"^/upload/storage/v1/b/{_B}/o$"), "storage.objects.create"),
    ("PUT", re.compile(rf"^/upload/storage/v1/b/{_B}/o$"), "storage.objects.create"),
    ("DELETE", re.compile(rf"^/storage/v1/b/{_B}/o/.+$"), "storage.objects.delete"),
    ("PATCH", re.compile(rf"^/storage/v1/b/{_B}/o/.+$"), "storage.objects.update"),
)
_UPLOAD = re.compile(rf"^/upload/storage/v1/b/{_B}/o$")
_BUCKET_RESOURCE = re.compile(rf"^/storage/v1/b/{_B}$")
_PUBLIC_MEMBERS = frozenset({"allUsers", "allAuthenticatedUsers"})
_BUCKET_PATH = re.compile(rf"^/(?:upload/|download/)?storage/v1/b/{_B}(?:/.*)?$")
_BUCKET_IAM = re.compile(rf"^/storage/v1/b/{_B}/iam$")
_TEST_PERMISSIONS = re.compile(rf"^/storage/v1/b/{_B}/iam/testPermissions$")
#: The most of an upload's body the proxy reads to learn the object's name (a multipart upload
#: carries it in its first part; larger objects go resumable, whose first request is metadata).
_MAX_INSPECTED_BODY = 64 * 1024 * 1024


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _gcs_error(code: int, message: str, reason: str) -> tuple[int, bytes]:
    body = {
        "error": {
            "code": code,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": reason}],
        }
    }
    return code, json.dumps(body).encode()


def _upload_name(body: bytes, content_type: str) -> str | None:
    """The object name an upload's first request names in its metadata: the JSON body of a
    resumable upload's start, or the JSON first part of a ``multipart/related`` upload."""
    metadata = body
    if content_type.startswith("multipart/"):
        boundary = content_type.partition("boundary=")[2].strip().strip('"').encode()
        if not boundary:
            return None
        parts = body.split(b"--" + boundary)
        if len(parts) < 2:
            return None
        metadata = parts[1].partition(b"\r\n\r\n")[2]
    try:
        parsed = json.loads(metadata or b"{}")
    except ValueError:
        return None
    name = parsed.get("name") if isinstance(parsed, dict) else None
    return name if isinstance(name, str) else None


def _iam_configuration(
    requested: object, current: Mapping[str, Any] | None
) -> dict[str, Any]:
    """A bucket's access settings: ``current`` (none: fine-grained, public access prevention
    inherited, as Google creates a bucket whose request names neither) updated with the
    ``iamConfiguration`` of a request."""
    config: dict[str, Any] = dict(current or {"uniform": False,
                                              "public_access_prevention": "inherited"})
    if isinstance(requested, dict):
        for key in ("uniformBucketLevelAccess", "bucketPolicyOnly"):
            given = requested.get(key)
            if isinstance(given, dict) and "enabled" in given:
                config["uniform"] = bool(given["enabled"])
        prevention = requested.get("publicAccessPrevention")
        if prevention in ("enforced", "inherited"):
            config["public_access_prevention"] = prevention
    return config


def _uniform(doc: Mapping[str, Any], bucket: str) -> bool:
    return bool(doc["bucket_config"].get(bucket, {}).get("uniform"))


def _public(bindings: object) -> bool:
    return isinstance(bindings, list) and any(
        isinstance(b, dict) and _PUBLIC_MEMBERS & set(b.get("members") or ()) for b in bindings)


def _prevents_public(doc: dict[str, Any], bucket: str) -> bool:
    config = doc["bucket_config"].get(bucket, {})
    return config.get("public_access_prevention") == "enforced" or enforced(
        doc, doc["buckets"].get(bucket, ""), PUBLIC_ACCESS_PREVENTION)


def _etag(serial: int) -> str:
    return base64.b64encode(serial.to_bytes(8, "big")).decode()


class StorageProxy:
    """Authorizes and forwards Cloud Storage JSON-API requests to the emulator."""

    def __init__(
        self,
        state: MockState,
        identity: Identity,
        emulator: tuple[str, int],
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._state = state
        self._identity = identity
        self._emulator = emulator
        proxy = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in separate writes; with Nagle's algorithm on, the body
            # waits for the client's delayed ACK (about 40 ms on Linux loopback), which made
            # every object request cost ~100 ms (569 small objects: about a minute).
            disable_nagle_algorithm = True

            def _dispatch(self) -> None:
                proxy._serve(self)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch  # noqa: N815

            def log_message(self, format: str, *args: object) -> None:
                _log.debug("mock storage: %s", format % args)

        self._server = ThreadingHTTPServer((host, port), _Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": POLL_INTERVAL_S},
            name="mocktee-storage",
            daemon=True,
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- authorization ---------------------------------------------------------------------

    def _holds(self, caller: Caller, bucket: str, permission: str) -> bool:
        """Whether ``caller`` holds ``permission`` on ``bucket``: an owner of its project
        (``roles/owner`` grants every storage permission), or a binding of the bucket's policy
        in effect whose role grants it."""
        doc = self._state.read()
        project = doc["buckets"].get(bucket)
        if project is not None and self._identity.is_owner(caller, project):
            return True
        if caller.principal.startswith("principal://") and not _uniform(doc, bucket):
            return False  # federated identities only on buckets with uniform access
        return has_role(self._policy(doc, bucket), caller, roles_granting(permission))

    def _policy(self, doc: dict[str, Any], bucket: str) -> Mapping[str, Any] | None:
        """The bucket's IAM policy as permission checks see it now (propagation delay)."""
        return self._identity.policy_in_effect(doc["iam"].get(f"buckets/{bucket}"))

    @staticmethod
    def _denial(caller: Caller, permission: str, bucket: str) -> str:
        return (
            f"{caller.describe()} does not have {permission} access to the Google Cloud "
            f"Storage bucket {bucket}. Permission '{permission}' denied on resource "
            "(or it may not exist)."
        )

    def _authorize(
        self, method: str, path: str, query: dict[str, str], caller: Caller
    ) -> str | None:
        """None if allowed, else the reason for a 403."""
        if path == "/storage/v1/b" and method == "POST":
            project = query.get("project", "")
            if self._identity.is_owner(caller, project):
                return None
            return (
                f"{caller.describe()} does not have storage.buckets.create access to "
                f"project {project}."
            )
        if method == "PATCH" and (m := _BUCKET_RESOURCE.match(path)):
            bucket = m.group("bucket")
            if self._holds(caller, bucket, "storage.buckets.update"):
                return None
            return self._denial(caller, "storage.buckets.update", bucket)
        for route_method, pattern, permission in _ROUTES:
            match = pattern.match(path)
            if match and route_method == method:
                bucket = match.group("bucket")
                if self._holds(caller, bucket, permission):
                    return None
                return self._denial(caller, permission, bucket)
        return f"{method} {path} is not served by the sealbench mock storage proxy."

    def _overwrite_refusal(
        self, bucket: str, name: str | None, caller: Caller
    ) -> str | None:
        """Cloud Storage's rule that replacing an existing object needs
        ``storage.objects.delete`` as well as ``storage.objects.create``."""
        if not name or self._holds(caller, bucket, "storage.objects.delete"):
            return None
        if not self._object_exists(bucket, name):
            return None
        return (
            f"{caller.describe()} does not have storage.objects.delete access to the Google "
            f"Cloud Storage object. Permission 'storage.objects.delete' denied on resource "
            f"(or it may not exist): replacing the existing object {name} needs it."
        )

    def _object_exists(self, bucket: str, name: str) -> bool:
        conn = http.client.HTTPConnection(*self._emulator, timeout=EMULATOR_TIMEOUT_S)
        try:
            conn.request("GET", f"/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}")
            response = conn.getresponse()
            response.read()
            return response.status == 200
        finally:
            conn.close()

    # -- serving ---------------------------------------------------------------------------

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        path = unquote(parts.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        headers = {k.lower(): v for k, v in handler.headers.items()}
        caller = self._identity.authenticate(
            Request(handler.command, path, parts.path, query, headers, b"")
        )
        length = int(handler.headers.get("Content-Length") or 0)
        if not isinstance(caller, Caller):
            handler.rfile.read(length)
            self._reply(
                handler, *_gcs_error(401, "Anonymous caller does not have access.", "required")
            )
            return
        refusal = self._bucket_refusal(handler.command, path, query) or self._perimeter(
            path, query, caller)
        if refusal is not None:
            handler.rfile.read(length)
            self._reply(handler, *refusal)
            return
        if m := _TEST_PERMISSIONS.match(path):
            handler.rfile.read(length)
            asked = parse_qs(parts.query).get("permissions", [])
            self._reply(handler, *self._test_permissions(m.group("bucket"), caller, asked))
            return
        if m := _BUCKET_IAM.match(path):
            body = handler.rfile.read(min(length, _MAX_POLICY_BYTES))
            requested = parse_qs(parts.query).get("optionsRequestedPolicyVersion", ["0"])[0]
            self._reply(
                handler, *self._bucket_iam(handler.command, m.group("bucket"), caller, body,
                                           int(requested) if requested.isdigit() else -1)
            )
            return
        reason = self._authorize(handler.command, path, query, caller)
        inspected: bytes | None = None
        if reason is None and handler.command == "POST" and (m := _UPLOAD.match(path)):
            name = query.get("name")
            if name is None and length <= _MAX_INSPECTED_BODY:
                inspected = handler.rfile.read(length)
                name = _upload_name(inspected, headers.get("content-type", ""))
            reason = self._overwrite_refusal(m.group("bucket"), name, caller)
        if reason is not None:
            if inspected is None:
                handler.rfile.read(length)
            _log.info("mock storage: denied %s %s to %s", handler.command, path, caller.describe())
            self._reply(handler, *_gcs_error(403, reason, "forbidden"))
            return
        if path == "/storage/v1/b" and handler.command == "POST":
            body = handler.rfile.read(min(length, _MAX_POLICY_BYTES))
            self._reply(handler, *self._create_bucket(handler, query.get("project", ""), body))
            return
        if (m := _BUCKET_RESOURCE.match(path)) and handler.command in ("GET", "PATCH"):
            body = handler.rfile.read(min(length, _MAX_POLICY_BYTES))
            self._reply(handler, *self._bucket_resource(handler, m.group("bucket"), body))
            return
        self._forward(handler, length, inspected)

    # -- bucket resources (iamConfiguration is the proxy's) ----------------------------------

    def _create_bucket(
        self, handler: BaseHTTPRequestHandler, project: str, body: bytes
    ) -> tuple[int, bytes]:
        """``buckets.insert``: refused (412) where the project's organisation enforces uniform
        access and the request does not ask for it; its ``iamConfiguration`` kept."""
        try:
            requested = json.loads(body or b"{}")
        except ValueError:
            return _gcs_error(400, "Invalid JSON payload received.", "invalid")
        config = _iam_configuration(requested.get("iamConfiguration"), None)
        bucket = str(requested.get("name", ""))
        with self._state.edit() as doc:
            if not config["uniform"] and enforced(doc, project, UNIFORM_ACCESS):
                return violation(UNIFORM_ACCESS)
            if bucket in doc["buckets"]:
                return _gcs_error(
                    409, "Your previous request to create the named bucket succeeded and you "
                    "already own it.", "conflict")
            status, answer = self._exchange(handler, body)
            if status == 200:
                doc["buckets"][bucket] = project
                doc["bucket_config"][bucket] = config
        return status, self._shown(answer, config, status)

    def _bucket_resource(
        self, handler: BaseHTTPRequestHandler, bucket: str, body: bytes
    ) -> tuple[int, bytes]:
        """``buckets.get`` and ``buckets.patch``, with the proxy's ``iamConfiguration``."""
        config = self._state.read()["bucket_config"].get(bucket)
        if handler.command == "PATCH":
            try:
                patch = json.loads(body or b"{}")
            except ValueError:
                return _gcs_error(400, "Invalid JSON payload received.", "invalid")
            with self._state.edit() as doc:
                config = _iam_configuration(patch.get("iamConfiguration"),
                                            doc["bucket_config"].get(bucket))
                project = doc["buckets"].get(bucket, "")
                if not config["uniform"] and enforced(doc, project, UNIFORM_ACCESS):
                    return violation(UNIFORM_ACCESS)
                doc["bucket_config"][bucket] = config
            body = json.dumps({k: v for k, v in patch.items()
                               if k != "iamConfiguration"}).encode()
        status, answer = self._exchange(handler, body if handler.command == "PATCH" else None)
        return status, self._shown(answer, config or _iam_configuration(None, None), status)

    @staticmethod
    def _shown(answer: bytes, config: Mapping[str, Any], status: int) -> bytes:
        if status != 200:
            return answer
        resource = json.loads(answer or b"{}")
        resource["iamConfiguration"] = {
            "bucketPolicyOnly": {"enabled": bool(config["uniform"])},
            "uniformBucketLevelAccess": {"enabled": bool(config["uniform"])},
            "publicAccessPrevention": config["public_access_prevention"],
        }
        return json.dumps(resource).encode()

    def _exchange(
        self, handler: BaseHTTPRequestHandler, body: bytes | None
    ) -> tuple[int, bytes]:
        """Send the request (with ``body``) to the emulator; its status and whole answer."""
        conn = http.client.HTTPConnection(*self._emulator, timeout=EMULATOR_TIMEOUT_S)
        try:
            headers = {"Content-Type": "application/json"}
            conn.request(handler.command, handler.path, body=body, headers=headers)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def _perimeter(
        self, path: str, query: dict[str, str], caller: Caller
    ) -> tuple[int, bytes] | None:
        """VPC Service Controls' refusal of a federated caller in a perimeter's project."""
        doc = self._state.read()
        if path == "/storage/v1/b":
            project: str | None = query.get("project", "")
        elif m := _BUCKET_PATH.match(path):
            project = doc["buckets"].get(m.group("bucket"))
        else:
            return None
        return perimeter_refusal(doc, project, caller.principal, "storage.googleapis.com")

    def _bucket_refusal(
        self, method: str, path: str, query: dict[str, str]
    ) -> tuple[int, bytes] | None:
        """Cloud Storage's answer before any permission check: the API is disabled in the
        bucket's project (403 ``SERVICE_DISABLED``), or the bucket does not exist (404)."""
        doc = self._state.read()
        if path == "/storage/v1/b" and method == "POST":
            project = query.get("project", "")
        elif m := _BUCKET_PATH.match(path):
            project = doc["buckets"].get(m.group("bucket"))
            if project is None:
                return _gcs_error(404, "The specified bucket does not exist.", "notFound")
        else:
            return None
        off = self._identity.service_disabled(project, "storage.googleapis.com")
        return None if off is None else (off.status, off.body)

    def _test_permissions(
        self, bucket: str, caller: Caller, asked: list[str]
    ) -> tuple[int, bytes]:
        """``GET b/{bucket}/iam/testPermissions``: the subset of ``asked`` the caller holds (as
        Cloud Storage answers it; unknown permissions are simply not held)."""
        doc = self._state.read()
        if bucket not in doc["buckets"]:
            return _gcs_error(404, "The specified bucket does not exist.", "notFound")
        held = [p for p in asked if self._holds(caller, bucket, p)]
        answer: dict[str, Any] = {"kind": "storage#testIamPermissionsResponse"}
        if held:
            answer["permissions"] = held
        return 200, json.dumps(answer).encode()

    def _bucket_iam(
        self, method: str, bucket: str, caller: Caller, body: bytes, requested: int = 0
    ) -> tuple[int, bytes]:
        permission = "storage.buckets.setIamPolicy" if method == "PUT" else (
            "storage.buckets.getIamPolicy"
        )
        if not self._holds(caller, bucket, permission):
            return _gcs_error(
                403,
                f"{caller.describe()} does not have {permission} access to bucket {bucket}.",
                "forbidden",
            )
        resource = f"buckets/{bucket}"
        with self._state.edit() as doc:
            if bucket not in doc["buckets"]:
                return _gcs_error(404, "The specified bucket does not exist.", "notFound")
            current = doc["iam"].get(resource) or {"bindings": [], "serial": 0, "etag": _etag(0)}
            if method == "PUT":
                policy: dict[str, Any] = json.loads(body or b"{}")
                if policy.get("etag") and policy["etag"] != current["etag"]:
                    return _gcs_error(412, "Precondition Failed", "conditionNotMet")
                bindings = policy.get("bindings", [])
                refusal = condition_refusal(bindings, policy.get("version"))
                if refusal:
                    return _gcs_error(400, refusal, "invalid")
                if _public(bindings) and _prevents_public(doc, bucket):
                    return violation(PUBLIC_ACCESS_PREVENTION)
                serial = int(current["serial"]) + 1
                current = {
                    "bindings": bindings, "serial": serial, "etag": _etag(serial),
                    "history": self._identity.policy_history(doc["iam"].get(resource), bindings),
                }
                doc["iam"][resource] = current
            elif method != "GET":
                return _gcs_error(405, "method not allowed", "invalid")
            else:
                refusal = version_refusal(current["bindings"], requested)
                if refusal:
                    return _gcs_error(400, refusal, "invalid")
        conditional = any("condition" in b for b in current["bindings"])
        public = {
            "kind": "storage#policy",
            "resourceId": f"projects/_/buckets/{bucket}",
            "version": 3 if conditional else 1,
            "etag": current["etag"],
            "bindings": current["bindings"],
        }
        return 200, json.dumps(public).encode()

    def _reply(self, handler: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json; charset=UTF-8")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def _forward(self, handler: BaseHTTPRequestHandler, length: int, body: bytes | None) -> None:
        conn = http.client.HTTPConnection(*self._emulator, timeout=EMULATOR_TIMEOUT_S)
        try:
            conn.putrequest(
                handler.command, handler.path, skip_host=True, skip_accept_encoding=True
            )
            for key, value in handler.headers.items():
                if key.lower() not in ("authorization", "connection", "transfer-encoding"):
                    conn.putheader(key, value)
            conn.putheader("Connection", "close")
            conn.endheaders()
            if body is not None:
                conn.send(body)
            else:
                remaining = length
                while remaining > 0:
                    chunk = handler.rfile.read(min(_COPY, remaining))
                    if not chunk:
                        break
                    conn.send(chunk)
                    remaining -= len(chunk)
            response = conn.getresponse()
            handler.send_response(response.status)
            payload_length = response.getheader("Content-Length")
            for key, value in response.getheaders():
                if key.lower() not in ("connection", "transfer-encoding", "server", "date"):
                    handler.send_header(key, value)
            data = b""
            if payload_length is None:
                data = response.read()
                handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            if payload_length is None:
                handler.wfile.write(data)
            else:
                while chunk := response.read(_COPY):
                    handler.wfile.write(chunk)
        finally:
            conn.close()


class EmulatorProcess:
    """``gcp-storage-emulator`` in this process, storing objects under ``data_dir`` on disk."""

    def __init__(self, data_dir: str, port: int, project_number: str | None = None) -> None:
        from gcp_storage_emulator.server import create_server  # type: ignore[import-untyped]

        logging.getLogger("gcp_storage_emulator").setLevel(logging.WARNING)
        self.port = port
        self._server = create_server(
            "127.0.0.1", port, in_memory=False, data_dir=data_dir, project_number=project_number
        )

    def start(self) -> None:
        self._server.start()

    def stop(self) -> None:
        self._server.stop()
