"""Which platform attested this run, where its evidence comes from, and where its tokens may go.

**Where the evidence comes from** (:class:`EvidenceSource`, what ``python -m sealbench.enclave``
uses): the enclave does not let anyone *tell* it which platform it runs on. An operator input that
picked a platform (a flag, a variable) would let the operator pick one whose checks are weaker,
the INSECURE mock's endpoints read from a discovery document for instance. Instead each installed
platform is asked for its evidence source at the launcher location (:meth:`Platform.attester`: the
Confidential Space launcher's socket is at a fixed path and refuses any other; the mock's is
wherever ``--launcher-dir`` says, or the same fixed path when the Docker backend mounts it there),
production platforms first; the first source whose token is issued by *that same platform's*
verifier is the run's platform. So the platform is what the evidence proves, never what the
operator says: on Confidential Space the socket is the real launcher's (``--launcher-dir`` is a
command override, which the image's launch policy forbids and every key-release condition
refuses), and its token names Google's verifier, which only the Confidential Space platform owns.
A token of no installed platform, or of another platform than the source that produced it, is
refused before it is sent anywhere.

The enclave reads the issuer of the token its launcher gave it (the launcher socket is the trusted
channel inside the TEE) and asks the platform registry
(:func:`sealbench.platforms.platform.platform_for_issuer`: the installed
:class:`~sealbench.platforms.platform.Platform` implementations, found by entry point; this module
names none of them) for the one whose verifier that is. That platform maps the token's claims to
the neutral :class:`~sealbench.platforms.platform.AttestedWorkload` (:func:`evidence_of`) and names
its token destinations (:func:`resolve_platform`): fixed endpoints the run spec must not
override (Confidential Space: Google's), or exact URLs the run spec must name (the INSECURE
mock: those its verifier's discovery document names). A token of no installed platform is
refused; the enclave sends it nowhere.

:func:`sealbench.contract.inputs.check_token_destinations` then compares the spec's endpoint
overrides with the result. This is defence in depth: the owners' key-release conditions pin the
same endpoints, so a token sent elsewhere would federate to nothing anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from sealbench.contract.errors import AttestationUnavailable
from sealbench.crypto.attestation import unverified_payload
from sealbench.crypto.errors import AttestationError
from sealbench.platforms.attester import Attester
from sealbench.platforms.errors import AttesterError
from sealbench.platforms.platform import (
    AttestedWorkload,
    Platform,
    TokenDestinations,
    UnknownPlatformError,
    available_platforms,
    platform_for_issuer,
)

__all__ = [
    "Evidence",
    "EvidenceSource",
    "PlatformResolver",
    "attesting_platform",
    "destinations_of",
    "evidence_from",
    "evidence_of",
    "resolve_platform",
]

_log = logging.getLogger("sealbench.enclave")

#: ``issuer → the platform's token destinations``.
PlatformResolver = Callable[[str], TokenDestinations]


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


def destinations_of(platform: Platform, issuer: str) -> TokenDestinations:
    """``platform``'s token destinations for its verifier ``issuer``;
    :class:`AttestationUnavailable` when it cannot say where its tokens may go."""
    try:
        return platform.token_destinations(issuer)
    except ValueError as exc:
        raise AttestationUnavailable(
            f"the {platform.name} platform names no token destinations for {issuer[:80]!r}: "
            f"{exc}"
        ) from exc


def resolve_platform(issuer: str) -> TokenDestinations:
    """The token destinations of the platform whose verifier is ``issuer``; raises
    :class:`AttestationUnavailable` for an issuer of no installed platform, or one that cannot
    say where its tokens may go."""
    return destinations_of(attesting_platform(issuer), issuer)


@dataclass(frozen=True)
class Evidence:
    """The run's first token, the platform that issued it (and whose evidence source produced
    it) and what it says; ``attester`` gives the run's later tokens."""

    platform: Platform
    attester: Attester
    token: str
    workload: AttestedWorkload


def evidence_from(attester: Attester, platforms: Iterable[Platform] | None = None) -> Evidence:
    """The first token of a caller's own ``attester`` (tests, tools), its platform found by the
    token's issuer; :class:`AttestationUnavailable` when there is none."""
    try:
        token = attester.token()
    except AttesterError as exc:
        raise AttestationUnavailable(f"no attestation token: {exc}") from exc
    candidates = None if platforms is None else tuple(platforms)
    workload = evidence_of(token, candidates)
    return Evidence(attesting_platform(workload.iss, candidates), attester, token, workload)


class EvidenceSource:
    """The platforms' own evidence sources at one launcher location (see the module
    docstring): :meth:`first` finds the platform whose attester there yields a token its own
    verifier issued. ``launcher_dir`` None is the platforms' fixed location."""

    def __init__(
        self, launcher_dir: Path | None = None, platforms: Iterable[Platform] | None = None
    ) -> None:
        self._launcher_dir = launcher_dir
        self._platforms = None if platforms is None else tuple(platforms)

    def __repr__(self) -> str:
        return f"EvidenceSource(launcher_dir={self._launcher_dir!r})"

    def first(self) -> Evidence:
        platforms = available_platforms() if self._platforms is None else self._platforms
        # Production platforms first: on a real TEE the first answer is the right one, and a
        # mock never gets to ask a production launcher for a token.
        tried: list[str] = []
        for platform in sorted(platforms, key=lambda p: (p.insecure, p.name)):
            try:
                attester = platform.attester(self._launcher_dir)
            except ValueError:
                continue  # not where this platform's evidence comes from
            try:
                evidence = evidence_from(attester, [platform])
            except AttestationUnavailable as exc:
                tried.append(f"{platform.name}: {exc}")
                _log.info("no %s evidence at this launcher location", platform.name)
                continue
            return evidence
        where = "the fixed launcher location" if self._launcher_dir is None else "--launcher-dir"
        detail = "; ".join(tried) if tried else "no installed platform takes evidence there"
        raise AttestationUnavailable(
            f"no installed platform's evidence source at {where} yields a token of its own "
            f"verifier ({detail[:600]}); no token is sent anywhere"
        )
