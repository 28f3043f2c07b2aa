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
owner's provider: a token exchange with a probe token (no secret: ``probe.probe.probe``) that
any STS refuses, ``invalid_target`` when the provider is not there (Google's and the mock's
answer for a pool or provider that does not exist or is deleted), another refusal when it is.
Only a definite ``invalid_target`` refuses the launch (:class:`UntrustedTeeError`); a probe that
cannot reach the STS leaves the decision to the run itself. The issuer the owner's key does
trust is named when the registry shows it: the issuer of a verified result of that asset.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Literal

from sealbench.client.errors import ConfigError
from sealbench.contract.spec import AssetLocation, RunSpec

__all__ = [
    "PROBE_TOKEN",
    "ProviderProbe",
    "TeeVerifier",
    "UntrustedTeeError",
    "check_owner_trust",
    "issuers_released_to",
    "sts_knows_provider",
]

_log = logging.getLogger("sealbench.client")

#: The subject token of the probe: a well-formed JWT shape that no verifier issued.
PROBE_TOKEN: Final = "probe.probe.probe"  # noqa: S105 - a probe, no secret
_PROBE_TIMEOUT_S: Final = 10.0

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


def sts_knows_provider(sts_url: str, pool_provider: str) -> bool | None:
    """Ask ``sts_url`` to exchange :data:`PROBE_TOKEN` at ``pool_provider``: ``False`` for
    ``invalid_target``, ``True`` for another OAuth refusal, ``None`` for no usable answer."""
    import requests

    form = {
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
        "audience": f"//iam.googleapis.com/{pool_provider}",
        "scope": "https://www.googleapis.com/auth/cloud-platform",
        "requested_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
        "subject_token": PROBE_TOKEN,
    }
    try:
        answer = requests.post(sts_url, data=form, timeout=_PROBE_TIMEOUT_S)
        error = answer.json().get("error") if answer.status_code in (400, 401, 403) else None
    except (requests.RequestException, ValueError, AttributeError) as exc:
        _log.info("the STS probe got no answer (%s)", type(exc).__name__)
        return None
    if not isinstance(error, str):
        return None
    return error != "invalid_target"


def check_owner_trust(
    spec: RunSpec,
    verifier: TeeVerifier,
    *,
    probe: ProviderProbe = sts_knows_provider,
    trusted_issuers: Callable[[Literal["dataset", "model"]], Iterable[str]] = lambda _k: (),
) -> None:
    """Raise :class:`UntrustedTeeError` naming the first owner whose pool provider the run's STS
    does not know. Only a run that names its STS (a platform other than Google's: a mock
    cloud) is probed. ``trusted_issuers(kind)`` are the issuers the registry shows that owner's
    key released to (its verified results'); they name the verifier its provider trusts."""
    if spec.sts_url is None:
        return  # Google's STS, which every provider on Google Cloud is at
    sts_url = spec.sts_url
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
