"""Whether a token service knows an owner's workload identity pool provider, asked before a
launch (:meth:`~sealbench.platforms.platform.Platform.knows_provider`).

A token exchange at Google's STS (or the mock cloud's imitation of it) with a probe token (no
secret: :data:`PROBE_TOKEN`) that any STS refuses: ``invalid_target`` when the provider is not
there (Google's and the mock's answer for a pool or provider that does not exist or is deleted),
another refusal when it is.
"""

from __future__ import annotations

import logging
from typing import Final

__all__ = ["PROBE_TOKEN", "sts_knows_provider"]

_log = logging.getLogger("sealbench.gcp")

#: The subject token of the probe: a well-formed JWT shape that no verifier issued.
PROBE_TOKEN: Final = "probe.probe.probe"  # noqa: S105 - a probe, no secret
_PROBE_TIMEOUT_S: Final = 10.0


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
