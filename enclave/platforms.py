"""Which platform attested this run, and so where its tokens may go.

The enclave reads the issuer of the token its launcher gave it (the launcher socket is the trusted
channel inside the TEE) and asks the platform registry
(:func:`sealbench.cloud.platform.platform_for_issuer`: the installed
:class:`~sealbench.cloud.platform.Platform` implementations, found by entry point; this module
names none of them) for the one whose verifier that is. That platform maps the token's claims to
the neutral :class:`~sealbench.cloud.platform.AttestedWorkload` (:func:`evidence_of`) and names
its token destinations (:func:`resolve_platform`): None for fixed endpoints the run spec must not
override (Confidential Space: Google's), otherwise the exact URLs (the INSECURE mock: those its
verifier's discovery document names). A token of no installed platform is refused; the enclave
sends it nowhere.

:func:`sealbench.enclave.inputs.check_token_destinations` then compares the spec's endpoint
overrides with the result. This is defence in depth: the owners' key-release conditions pin the
same endpoints, so a token sent elsewhere would federate to nothing anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sealbench.cloud.platform import (
    AttestedWorkload,
    Platform,
    UnknownPlatformError,
    platform_for_issuer,
)
from sealbench.crypto.attestation import unverified_payload
from sealbench.crypto.errors import AttestationError
from sealbench.enclave.errors import AttestationUnavailable
from sealbench.enclave.spec import ServiceEndpoints

__all__ = ["PlatformResolver", "attesting_platform", "evidence_of", "resolve_platform"]

#: ``issuer → the platform's token destinations`` (None: the platform's fixed endpoints).
PlatformResolver = Callable[[str], ServiceEndpoints | None]


def attesting_platform(issuer: str, platforms: Iterable[Platform] | None = None) -> Platform:
    """The platform whose verifier is ``issuer`` (of ``platforms``, default: every installed
    one); :class:`AttestationUnavailable` when there is none."""
    try:
        return platform_for_issuer(issuer, platforms)
    except UnknownPlatformError as exc:
        raise AttestationUnavailable(
            f"the launcher's token comes from {issuer[:80]!r}, the verifier of no platform this "
            "image knows; no token is sent anywhere"
        ) from exc


def evidence_of(token: str, platforms: Iterable[Platform] | None = None) -> AttestedWorkload:
    """What a token the launcher just gave us says (read, not verified: the launcher socket is
    the trusted channel inside the TEE; key owners and the registry verify the signature), as
    mapped by the platform that issued it."""
    try:
        payload = unverified_payload(token)
    except AttestationError as exc:
        raise AttestationUnavailable("the launcher's token is not a compact JWS") from exc
    issuer = payload.get("iss")
    if not isinstance(issuer, str):
        raise AttestationUnavailable("the launcher's token names no issuer")
    platform = attesting_platform(issuer, platforms)
    try:
        return platform.evidence(payload)
    except AttestationError as exc:
        raise AttestationUnavailable("the launcher's token claims cannot be read") from exc


def resolve_platform(issuer: str) -> ServiceEndpoints | None:
    """The token destinations of the platform whose verifier is ``issuer``; raises
    :class:`AttestationUnavailable` for an issuer of no installed platform, or one that cannot
    say where its tokens may go."""
    platform = attesting_platform(issuer)
    try:
        return platform.token_destinations(issuer)
    except ValueError as exc:
        raise AttestationUnavailable(
            f"the {platform.name} platform names no token destinations for {issuer[:80]!r}: "
            f"{exc}"
        ) from exc
