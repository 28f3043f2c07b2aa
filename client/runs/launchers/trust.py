"""Before a launch: can the owners' keys reach a TEE that attests to this verifier at all?

A run's TEE attests to one verifier (its issuer: Google's Confidential Space verifier, or a mock
cloud's) and sends its token only to that platform's STS (:mod:`sealbench.contract.inputs`: the
token destinations are pinned to the attesting platform). Each owner's key is released through
its own workload identity pool provider, which trusts tokens of the issuer its owner set it up
with (``policy sync`` against Google Cloud or a mock cloud). A hospital that runs its own
``mock-tee up`` against a shared registry attests to its own mock verifier, whose STS does not
know the other owners' providers: every launch failed at key release with ``invalid_target``
while each ``doctor`` check was green.

:func:`check_owner_trust` asks the run's STS, before anything is launched, whether it knows each
owner's provider, through the platform of the run's verifier
(:meth:`~sealbench.platforms.platform.Platform.knows_provider`: on Confidential Space and the mock
cloud, a token exchange with a probe token that any STS refuses, ``invalid_target`` when the
provider is not there).
Only a definite ``invalid_target`` refuses the launch (:class:`UntrustedTeeError`); a probe that
cannot reach the STS leaves the decision to the run itself. The issuer the owner's key does
trust is named when the registry shows it: the issuer of a verified result of that asset.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from sealbench.client.errors import ConfigError
from sealbench.contract.spec import AssetLocation, RunSpec

__all__ = [
    "ProviderProbe",
    "TeeVerifier",
    "UntrustedTeeError",
    "check_owner_trust",
    "issuers_released_to",
]


#: ``(sts_url, pool provider) -> True`` (the STS knows it), ``False`` (``invalid_target``) or
#: ``None`` (no answer that says either).
ProviderProbe = Callable[[str, str], bool | None]


class UntrustedTeeError(ConfigError):
    """An owner's key can never be released to a TEE that attests to this run's verifier."""


@dataclass(frozen=True)
class TeeVerifier:
    """The verifier the run's TEE attests to (``issuer``) and how to name it to its user
    (``what``: "your own mock-tee (STATE_DIR)", "Google's Confidential Space verifier")."""

    issuer: str
    what: str


def _probe_of(issuer: str) -> ProviderProbe:
    """The probe of the platform whose verifier is ``issuer`` (one that answers nothing when no
    installed platform claims it: the run itself then decides)."""
    from sealbench.platforms.platform import UnknownPlatformError, platform_for_issuer

    try:
        return platform_for_issuer(issuer).knows_provider
    except UnknownPlatformError:
        return lambda _sts, _provider: None


def check_owner_trust(
    spec: RunSpec,
    verifier: TeeVerifier,
    *,
    probe: ProviderProbe | None = None,
    trusted_issuers: Callable[[Literal["dataset", "model"]], Iterable[str]] = lambda _k: (),
) -> None:
    """Raise :class:`UntrustedTeeError` naming the first owner whose pool provider the run's STS
    does not know. Only a run that names its STS (a platform other than Google's: a mock
    cloud) is probed. ``trusted_issuers(kind)`` are the issuers the registry shows that owner's
    key released to (its verified results'); they name the verifier its provider trusts."""
    if spec.sts_url is None:
        return  # the platform's own STS (Google's), which every provider on it is at
    sts_url = spec.sts_url
    probe = probe or _probe_of(verifier.issuer)
    owners: tuple[tuple[Literal["dataset", "model"], AssetLocation], ...] = (
        ("dataset", spec.dataset), ("model", spec.model))
    for kind, location in owners:
        if probe(sts_url, location.pool_provider) is not False:
            continue
        others = sorted({i for i in trusted_issuers(kind) if i != verifier.issuer})
        trusts = (f"its key has been released to runs attested by {' and '.join(others)}"
                  if others else "its provider trusts the verifier of the cloud its owner ran "
                  "'policy sync' against")
        raise UntrustedTeeError(
            f"the {kind} owner's key cannot be released to this run: your TEE attests to "
            f"{verifier.issuer} ({verifier.what}) and exchanges its token at {sts_url}, which "
            f"does not know the {kind} owner's pool provider {location.pool_provider} (absent "
            f"there, deleted or disabled); {trusts}",
            hint="run with the verifier the owners trust: the benchmark's shared mock-tee "
            "('sealbench run --mock-tee DIR' with the state directory of the registry's mock "
            "cloud) or Confidential Space ('--tee confidential-space' on a Google Cloud "
            "profile); a mock-tee of your own attests whatever its operator asks, so no other "
            "owner's key is released to it. If your TEE already uses that verifier, the "
            f"{kind}'s owner re-creates its provider with 'sealbench policy sync'",
        )


def issuers_released_to(
    results: Iterable[object], kind: Literal["dataset", "model"], asset_id: int
) -> list[str]:
    """The issuers of the registry's verified results of asset ``asset_id`` (``ResultPublic``:
    its ``dataset_id``/``model_id`` and ``token_issuer``): verifiers its owner's key has been
    released to."""
    return sorted({str(getattr(r, "token_issuer", "")) for r in results
                   if getattr(r, f"{kind}_id", None) == asset_id} - {""})
