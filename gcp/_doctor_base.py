"""The pieces every ``sealbench doctor`` check is made of (for :mod:`sealbench.gcp.doctor`
and its ``_doctor_*`` modules): :class:`Check`, :class:`RunnerSettings`, :func:`run_check`,
which turns a probe and its failure into a check, and :func:`http_get` for the REST calls no
client library makes."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from sealbench.gcp.failures import api_disabled, perimeter_violation
from sealbench.platforms.errors import OwnerCloudError
from sealbench.platforms.owner_cloud import Check, RunnerSettings

__all__ = [
    "PERIMETER_FIX",
    "Check",
    "ProbeRefused",
    "RunnerSettings",
    "enable_command",
    "http_get",
    "run_check",
]

_TIMEOUT_S: Final = 30.0
#: What to do about a VPC Service Controls refusal (docs/gcp-setup.md says more).
PERIMETER_FIX: Final = (
    "the perimeter's administrator adds ingress rules for you and for the runners' workload "
    "identity pool to Cloud KMS and Cloud Storage (docs/gcp-setup.md, 'Inside a VPC Service "
    "Controls perimeter'); the identifier finds the refusal in the perimeter's audit log")


class ProbeRefused(OwnerCloudError):  # noqa: N818 - reads as what happened
    """A check found the resource but not what a run needs; ``fix`` overrides the check's."""

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.fix = fix


def enable_command(service: str, project: str) -> str:
    return f"gcloud services enable {service} --project {project}"


def run_check(
    name: str, probe: Callable[[], str | tuple[str, str]], fix: str, project: str,
    denied: str | None = None,
) -> Check:
    """``probe`` as a check: its failure with ``fix`` (``denied`` when the caller was refused,
    the enabling command when an API is disabled). A probe returning ``(detail, fix)`` passed
    unverified."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

    from sealbench.platforms.errors import CloudError

    try:
        found = probe()
    except ProbeRefused as exc:
        return Check(name, False, str(exc), exc.fix or fix)
    except (gexc.GoogleAPIError, auth_exc.GoogleAuthError, CloudError) as exc:
        reference = perimeter_violation(exc)
        if reference is not None:  # a perimeter, not a grant: say so, never "permission denied"
            return Check(name, False, f"a VPC Service Controls perimeter around project "
                         f"{project} refused the request (vpcServiceControlsUniqueIdentifier "
                         f"{reference})", PERIMETER_FIX)
        service = api_disabled(exc)
        if service is not None:
            return Check(name, False, f"the {service} API is disabled in project {project}",
                         enable_command(service, project))
        if isinstance(exc, gexc.NotFound):
            return Check(name, False, f"not found: {reason(exc.message)}", fix)
        if isinstance(exc, gexc.Forbidden):
            return Check(name, False, f"permission denied: {reason(exc.message)}",
                         denied or fix)
        return Check(name, False, f"{_shown_type(exc)}: {str(exc)[:300]}", fix)
    if isinstance(found, tuple):
        return Check(name, True, found[0], found[1], verified=False)
    return Check(name, True, found)


def _shown_type(exc: BaseException) -> str:
    """The failure's type as doctor names it: an owner-cloud error under the name the client
    shows it by (``CloudError``, ``ConfigError``)."""
    from sealbench.platforms.errors import OwnerSettingsError

    if isinstance(exc, OwnerSettingsError):
        return "ConfigError"
    if isinstance(exc, OwnerCloudError):
        return "CloudError"
    return type(exc).__name__


def reason(message: object) -> str:
    """Google's error message without the ``METHOD URL:`` prefix the REST clients add."""
    return re.sub(r"^(GET|POST|PUT|PATCH|DELETE) \S+: ", "", str(message))[:300]


def http_get(session: Any, url: str, what: str, **kwargs: Any) -> dict[str, Any]:
    """GET (or POST with ``json=``) ``url`` through the authorized session; Google's error
    as a google-api-core exception (so :func:`run_check` reads it as it reads the client
    libraries'). ``what`` names the resource for the reader of the code only."""
    from google.api_core import exceptions as gexc

    method = session.post if "json" in kwargs else session.get
    reply = method(url, timeout=_TIMEOUT_S, **kwargs)
    if reply.status_code != 200:
        raise gexc.from_http_response(reply)  # type: ignore[no-untyped-call]
    answer: dict[str, Any] = reply.json()
    return answer
