"""Errors raised by :mod:`sealbench.server`.

Services raise these domain errors and never ``HTTPException``; the application's exception
handlers (:mod:`sealbench.server.app`) map each class to one HTTP status and a stable ``code``.
Messages say what was received and what was expected and never contain tokens or secrets.

::

    RegistryError                      500 internal   (base; never raised for bad input)
    ├── AuthenticationError            401 unauthenticated
    ├── PermissionDeniedError          403 forbidden
    ├── NotFoundError                  404 not_found
    ├── ConflictError                  409 conflict         (uniqueness, duplicate requests)
    ├── InvalidStateError              409 invalid_state    (a transition the rules forbid)
    ├── InvalidRequestError            422 invalid_request  (well-formed but unusable input)
    ├── ResultRejectedError            422 result_rejected  (attestation did not verify)
    │   ├── PrivacyBudgetExceededError 422 privacy_budget_exceeded (the release would overspend)
    │   └── PluginNotInstalledError    422 plugin_not_installed (no plug-in here reads it)
    ├── RequestTooLargeError           413 payload_too_large
    ├── UpstreamUnavailableError       503 upstream_unavailable (a JWKS could not be fetched)
    ├── ConfigurationError             --  settings refused at startup
    └── AuditChainBrokenError          --  the audit hash chain does not verify
"""

from __future__ import annotations

__all__ = [
    "AuditChainBrokenError",
    "AuthenticationError",
    "ConfigurationError",
    "ConflictError",
    "InvalidRequestError",
    "InvalidStateError",
    "NotFoundError",
    "PermissionDeniedError",
    "PluginNotInstalledError",
    "PrivacyBudgetExceededError",
    "RegistryError",
    "RequestTooLargeError",
    "ResultRejectedError",
    "UpstreamUnavailableError",
]


class RegistryError(Exception):
    """Base class of every error raised by :mod:`sealbench.server`."""

    status_code: int = 500
    code: str = "internal"


class AuthenticationError(RegistryError):
    """No credentials, or credentials that do not identify a user."""

    status_code = 401
    code = "unauthenticated"


class PermissionDeniedError(RegistryError):
    """The caller is known but may not do this."""

    status_code = 403
    code = "forbidden"


class NotFoundError(RegistryError):
    """The entity does not exist (or is not visible to the caller)."""

    status_code = 404
    code = "not_found"

    def __init__(self, kind: str, ident: object) -> None:
        self.kind = kind
        self.ident = ident
        super().__init__(f"{kind} {ident!s} does not exist")


class ConflictError(RegistryError):
    """The change collides with an existing entity (a unique name/version, a pending request)."""

    status_code = 409
    code = "conflict"


class InvalidStateError(RegistryError):
    """The rules forbid this transition in the entity's current state."""

    status_code = 409
    code = "invalid_state"


class InvalidRequestError(RegistryError):
    """The request parsed but cannot be used (for example a reference to a missing entity)."""

    status_code = 422
    code = "invalid_request"


class ResultRejectedError(RegistryError):
    """A submitted result's attestation token did not verify against the registry's records;
    nothing was stored."""

    status_code = 422
    code = "result_rejected"


class PrivacyBudgetExceededError(ResultRejectedError):
    """A result's release would spend more than its dataset's (or budget group's) privacy
    budget has left; nothing was stored."""

    code = "privacy_budget_exceeded"


class PluginNotInstalledError(ResultRejectedError):
    """The benchmark's plug-in is not installed on this registry, so nothing can say what its
    results mean; nothing was stored. Its operator installs it; the same result can then be
    submitted again (a new run would not help)."""

    code = "plugin_not_installed"


class RequestTooLargeError(RegistryError):
    """The request body exceeds the configured cap."""

    status_code = 413
    code = "payload_too_large"


class UpstreamUnavailableError(RegistryError):
    """A key set the server must fetch (OIDC or attestation JWKS) could not be fetched."""

    status_code = 503
    code = "upstream_unavailable"


class ConfigurationError(RegistryError):
    """The server's settings are refused (for example insecure values outside local mode)."""


class AuditChainBrokenError(RegistryError):
    """The audit log's hash chain does not verify; ``seq`` names the first broken event."""

    code = "audit_chain_broken"

    def __init__(self, seq: int, reason: str) -> None:
        self.seq = seq
        self.reason = reason
        super().__init__(f"audit chain broken at event {seq}: {reason}")
