"""Which platform attested this run, and so where its tokens may go.

The enclave reads the issuer of the token its launcher gave it (the launcher socket is the trusted
channel inside the TEE) and resolves it to the platform's token destinations:

- Google's Confidential Space verifier (``https://confidentialcomputing.googleapis.com``):
  Google's own HTTPS endpoints, fixed here; the run spec must not override any of them.
- the INSECURE mock verifier (an ``http://`` issuer on the loopback interface): the endpoints its
  OIDC discovery document names in ``sealbench_insecure_mock_endpoints``. A mock token proves
  nothing about hardware; the check still keeps a mock run's tokens on the mock, so the tests
  exercise the same refusal a production run makes.
- any other issuer: refused; the enclave sends its token nowhere.

:func:`sealbench.enclave.inputs.check_token_destinations` then compares the spec's endpoint
overrides with the result. This is defence in depth: the owners' key-release conditions pin the
same endpoints, so a token sent elsewhere would federate to nothing anyway.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Final

from sealbench.crypto.attestation import CONFIDENTIAL_SPACE_ISSUER
from sealbench.enclave.errors import AttestationUnavailable
from sealbench.enclave.inputs import MOCK_ENDPOINTS_MEMBER
from sealbench.enclave.spec import ServiceEndpoints

__all__ = ["DISCOVERY_TIMEOUT_S", "PlatformResolver", "resolve_platform"]

#: Seconds allowed for the mock issuer's discovery document.
DISCOVERY_TIMEOUT_S: Final = 10.0
_MAX_DISCOVERY: Final = 64 * 1024
_LOOPBACK_ISSUER: Final = re.compile(r"http://(127\.0\.0\.1|localhost):[0-9]{1,5}")

#: ``issuer → the platform's token destinations`` (None: Google's, overrides must be absent).
PlatformResolver = Callable[[str], ServiceEndpoints | None]


def resolve_platform(issuer: str) -> ServiceEndpoints | None:
    """The token destinations of the platform whose verifier is ``issuer``; raises
    :class:`AttestationUnavailable` for an issuer of no known platform."""
    if issuer == CONFIDENTIAL_SPACE_ISSUER:
        return None
    if _LOOPBACK_ISSUER.fullmatch(issuer):
        return _insecure_mock_endpoints(issuer)
    raise AttestationUnavailable(
        f"the launcher's token comes from {issuer[:80]!r}, the verifier of no platform this "
        "image knows; no token is sent anywhere"
    )


def _insecure_mock_endpoints(issuer: str) -> ServiceEndpoints:
    url = f"{issuer}/.well-known/openid-configuration"
    try:
        with urllib.request.urlopen(url, timeout=DISCOVERY_TIMEOUT_S) as response:  # noqa: S310 - loopback http checked above
            document = json.loads(response.read(_MAX_DISCOVERY))
        member = document[MOCK_ENDPOINTS_MEMBER]
        return ServiceEndpoints(
            sts_url=str(member["sts_url"]),
            kms_endpoint=str(member["kms_endpoint"]),
            storage_endpoint=str(member["storage_endpoint"]),
        )
    except (OSError, urllib.error.URLError, ValueError, KeyError, TypeError) as exc:
        raise AttestationUnavailable(
            f"the mock verifier {issuer} does not name its platform's endpoints "
            f"({type(exc).__name__})"
        ) from exc
