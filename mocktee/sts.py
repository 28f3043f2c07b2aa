"""The mock Security Token Service: ``POST /v1/token`` (RFC 8693 token exchange, form-encoded),
as google-auth's identity-pool credentials call it. It looks up the workload identity pool
provider named by ``audience``, verifies the attestation token against the mock verifier's JWKS
with :func:`sealbench.gcp.confidential_space.verify_token` (issuer = the provider's ``issuerUri``,
audience = one of its ``allowedAudiences``), evaluates the provider's attribute mapping and
attribute condition with cel-python, and issues an opaque, expiring access token bound to the
mapped principal and attributes. Errors use Google's OAuth error JSON
(``invalid_request``, ``invalid_grant``, ``invalid_target``, ``unauthorized_client``)."""

from __future__ import annotations

import base64
import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from sealbench.crypto.attestation import Jwks
from sealbench.crypto.errors import AttestationError, AudienceMismatchError
from sealbench.gcp.confidential_space import verify_token
from sealbench.mocktee._http import Request, Response, json_response
from sealbench.mocktee.cel import CelError, evaluate_bool, evaluate_string, explain_false
from sealbench.mocktee.identity import Identity, federated_members
from sealbench.mocktee.state import MockState

__all__ = ["GRANT_TYPE", "MockSts"]

_log = logging.getLogger("sealbench.mocktee")

GRANT_TYPE = "urn:ietf:params:oauth:grant-type:token-exchange"
_ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"  # noqa: S105 - a URN
_SUBJECT_TOKEN_TYPES = {
    "urn:ietf:params:oauth:token-type:jwt",
    "urn:ietf:params:oauth:token-type:id_token",
}
_AUDIENCE_RE = re.compile(
    r"^//iam\.googleapis\.com/(projects/([0-9]+)/locations/global/workloadIdentityPools/"
    r"([a-z0-9-]+)/providers/([a-z0-9-]+))$"
)
_MAX_SUBJECT_BYTES = 64 * 1024
_SUBJECT_MAX = 127


def _oauth_error(error: str, description: str) -> Response:
    return json_response(400, {"error": error, "error_description": description})


class MockSts:
    """``handle(request)`` serves ``POST /v1/token``."""

    def __init__(
        self,
        state: MockState,
        identity: Identity,
        jwks: Callable[[], Jwks],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._state = state
        self._identity = identity
        self._jwks = jwks
        self._clock = clock

    def handle(self, request: Request) -> Response:
        if request.path != "/v1/token" or request.method != "POST":
            return json_response(404, {"error": "not_found", "error_description": request.path})
        form = {k: v[-1] for k, v in parse_qs(request.body.decode("utf-8", "replace")).items()}
        response = self.exchange(form)
        if response.status == 200:
            _log.info("mock STS: issued a token for %s", form.get("audience"))
        else:
            # The OAuth error names the failing claim or clause, never the token.
            _log.info("mock STS: denied %s: %s", form.get("audience"), response.body.decode())
        return response

    def exchange(self, form: dict[str, str]) -> Response:
        if form.get("grant_type") != GRANT_TYPE:
            return _oauth_error("unsupported_grant_type", 'Invalid value for "grant_type".')
        if form.get("requested_token_type", _ACCESS_TOKEN_TYPE) != _ACCESS_TOKEN_TYPE:
            return _oauth_error("invalid_request", 'Invalid value for "requested_token_type".')
        if form.get("subject_token_type") not in _SUBJECT_TOKEN_TYPES:
            return _oauth_error("invalid_request", 'Invalid value for "subject_token_type".')
        subject_token = form.get("subject_token", "")
        if not subject_token:
            return _oauth_error("invalid_request", "Missing required parameter: subject_token.")
        if len(subject_token) > _MAX_SUBJECT_BYTES:
            return _oauth_error("invalid_request", "The subject token is too large.")
        match = _AUDIENCE_RE.match(form.get("audience", ""))
        if match is None:
            return _oauth_error(
                "invalid_request",
                'Invalid value for "audience". This value should be the full resource name of '
                "the Identity Provider. See https://cloud.google.com/iam/docs/reference/sts/rest"
                "/v1/TopLevel/token for the list of possible formats.",
            )
        provider_name, number, pool_id = match.group(1), match.group(2), match.group(3)
        if off := self._identity.service_disabled(number, "sts.googleapis.com"):
            return off  # the pool's project has not enabled the Security Token Service API
        doc = self._state.read()
        pool = doc["pools"].get(provider_name.split("/providers/")[0])
        provider = doc["providers"].get(provider_name)
        if (
            pool is None or provider is None or pool.get("disabled") or provider.get("disabled")
            or "DELETED" in (pool.get("state"), provider.get("state"))
        ):
            return _oauth_error(
                "invalid_target",
                'The target service indicated by the "audience" parameters is invalid. This '
                "might either be because the pool or provider is disabled or deleted or because "
                "it doesn't exist.",
            )
        oidc = provider.get("oidc") or {}
        issuer = str(oidc.get("issuerUri", "")).rstrip("/")
        audiences = list(oidc.get("allowedAudiences") or [f"https:{form['audience']}"])
        claims = self._verify(subject_token, issuer, audiences)
        if isinstance(claims, Response):
            return claims
        return self._map_and_issue(provider, claims, number, pool_id)

    def _verify(self, token: str, issuer: str, audiences: list[str]) -> dict[str, Any] | Response:
        last: AttestationError | None = None
        for audience in audiences:
            try:
                verify_token(
                    token, self._jwks(), issuer=issuer, audience=audience, now=self._clock()
                )
            except AudienceMismatchError as exc:
                last = exc
                continue
            except AttestationError as exc:
                return _oauth_error("invalid_grant", f"The given credential is invalid: {exc}")
            # CEL sees the claims exactly as signed (absent stays absent, null stays null).
            payload = token.split(".")[1]
            claims: dict[str, Any] = json.loads(
                base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
            )
            return claims
        return _oauth_error(
            "invalid_grant",
            f"The audience in the given credential is not allowed by the provider: {last}",
        )

    def _map_and_issue(
        self,
        provider: dict[str, Any],
        claims: dict[str, Any],
        number: str,
        pool_id: str,
    ) -> Response:
        mapping: dict[str, str] = provider.get("attributeMapping") or {}
        activation = {"assertion": claims}
        mapped: dict[str, str] = {}
        for key, expression in sorted(mapping.items()):
            try:
                mapped[key] = evaluate_string(expression, activation)
            except CelError as exc:
                return _oauth_error(
                    "invalid_grant",
                    f"The attribute mapping for {key!r} could not be evaluated "
                    f"(a claim it reads is missing or malformed): {exc}",
                )
        subject = mapped.get("google.subject")
        if not subject:
            return _oauth_error("invalid_grant", "The mapped google.subject is empty.")
        if len(subject.encode()) > _SUBJECT_MAX:
            return _oauth_error(
                "invalid_grant", f"The mapped google.subject exceeds {_SUBJECT_MAX} bytes."
            )
        attributes = {
            k[len("attribute.") :]: v for k, v in mapped.items() if k.startswith("attribute.")
        }
        condition = provider.get("attributeCondition")
        if condition:
            scope_vars = {
                "assertion": claims,
                "google": {"subject": subject},
                "attribute": attributes,
            }
            try:
                allowed = evaluate_bool(condition, scope_vars)
            except CelError:
                allowed = False
            if not allowed:
                return _oauth_error(
                    "unauthorized_client",
                    "The given credential is rejected by the attribute condition. "
                    f"[sealbench mock diagnosis: {explain_false(condition, scope_vars)}]",
                )
        principal, sets = federated_members(number, pool_id, subject, attributes)
        token, lifetime = self._identity.issue(principal, sets, attributes)
        return json_response(
            200,
            {
                "access_token": token,
                "issued_token_type": _ACCESS_TOKEN_TYPE,
                "token_type": "Bearer",
                "expires_in": lifetime - 1,
            },
        )
