"""Google Cloud Confidential Space, the production :class:`~sealbench.platforms.platform.Platform`
(entry point ``confidential-space``): its claim schema (:mod:`sealbench.gcp._cs_claims`), its
rules on verified claims (:class:`AttestationPolicy`), its key release in Google's terms (CEL and
``principalSet``, :mod:`sealbench.gcp._cs_cel`) and :class:`ConfidentialSpacePlatform`.

:func:`verify_token` is :func:`sealbench.crypto.attestation.verify_jwt` (signature, issuer,
audience, time: platform-neutral) followed by the typed :class:`AttestationClaims`. Only then
does :meth:`AttestationPolicy.check` look at what the claims *say* (debug state, hardware,
support attributes, image, command and environment overrides, nonce). Errors (see
:mod:`sealbench.crypto.errors`) name the claim that failed, what was expected and what was
received; they never contain the token or its signature.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from pydantic import ValidationError

from sealbench.contract.inputs import ALL_OVERRIDE_NAMES, ConditionContext
from sealbench.contract.spec import ServiceEndpoints
from sealbench.contract.workload import WorkloadIdentity
from sealbench.crypto.attestation import Jwks, show_claim, verify_jwt
from sealbench.crypto.digest import parse_digest
from sealbench.crypto.errors import PolicyViolationError, TokenInvalidError
from sealbench.gcp._cs_cel import (
    WORKLOAD_UID_ATTRIBUTE,
    env_shape_condition,
    principal_set,
    render_condition,
    uid_mapping_expression,
)
from sealbench.gcp._cs_claims import (
    CONFIDENTIAL_HWMODELS,
    CONFIDENTIAL_SPACE_ISSUER,
    CONFIDENTIAL_SPACE_JWKS_URL,
    EXPERIMENTAL_SUPPORT_ATTRIBUTE,
    GOOGLE_ENDPOINTS,
    REQUIRED_DBGSTAT,
    REQUIRED_GPU_CC_MODE,
    REQUIRED_SUPPORT_ATTRIBUTE,
    REQUIRED_SWNAME,
    STS_AUDIENCE,
    AttestationClaims,
    ConfidentialSpaceSubmod,
    ContainerSubmod,
    GceSubmod,
    ImageSignature,
    NvidiaGpuSubmod,
    Submods,
)
from sealbench.gcp.account import CsLaunchOptions, GcpSettings
from sealbench.platforms.access import AssetAccess
from sealbench.platforms.account import AccountPlatform, AccountRoutes, LaunchDefaults
from sealbench.platforms.attester import Attester, LauncherAttester
from sealbench.platforms.launcher import Launcher, check_backend
from sealbench.platforms.owner_cloud import OwnerCloud
from sealbench.platforms.platform import (
    AttestedWorkload,
    TokenDestinations,
    VerifierKeys,
    WorkloadRequirements,
    check_endpoint_pin,
)

__all__ = [
    "CONFIDENTIAL_HWMODELS",
    "CONFIDENTIAL_SPACE_ISSUER",
    "CONFIDENTIAL_SPACE_JWKS_URL",
    "LAUNCH_ENV_PREFIX",
    "REQUIRED_DBGSTAT",
    "REQUIRED_SUPPORT_ATTRIBUTE",
    "REQUIRED_SWNAME",
    "STS_AUDIENCE",
    "WORKLOAD_UID_ATTRIBUTE",
    "AttestationClaims",
    "AttestationPolicy",
    "ConfidentialSpacePlatform",
    "ConfidentialSpaceSubmod",
    "ContainerSubmod",
    "GceSubmod",
    "ImageSignature",
    "NvidiaGpuSubmod",
    "Submods",
    "attested_workload",
    "claims_from_payload",
    "env_shape_condition",
    "principal_set",
    "render_condition",
    "uid_mapping_expression",
    "verify_token",
    "workload_identity",
]

#: The instance-metadata prefix that makes the launcher set (and attest) an env override.
LAUNCH_ENV_PREFIX: Final = "tee-env-"
_POOL = re.compile(
    r"^projects/(?P<number>[0-9]{1,20})/locations/global/workloadIdentityPools/(?P<pool>[^/]+)$"
)


def claims_from_payload(payload: Mapping[str, object]) -> AttestationClaims:
    """The typed claims of a token payload; :class:`TokenInvalidError` naming only the
    locations of malformed claims (pydantic's own text would echo claim values)."""
    try:
        return AttestationClaims.model_validate(dict(payload))
    except ValidationError as exc:
        where = ", ".join(".".join(str(p) for p in err["loc"]) for err in exc.errors()[:5])
        raise TokenInvalidError(f"token claims malformed at: {where}") from None


def verify_token(
    token: str,
    jwks: Jwks,
    *,
    issuer: str,
    audience: str,
    now: float,
    leeway: float = 30.0,
) -> AttestationClaims:
    """Verify a compact RS256 JWS (:func:`~sealbench.crypto.attestation.verify_jwt`) and return
    its typed Confidential Space claims, or raise an
    :class:`~sealbench.crypto.errors.AttestationError` subclass naming what failed."""
    payload = verify_jwt(token, jwks, issuer=issuer, audience=audience, now=now, leeway=leeway)
    return claims_from_payload(payload)


def workload_identity(claims: AttestationClaims, *, require_data: bool = True) -> WorkloadIdentity:
    """The identity carried by verified claims (image digest and env overrides); see
    :meth:`~sealbench.contract.workload.WorkloadIdentity.from_env_overrides` for the errors."""
    container = claims.submods.container
    return WorkloadIdentity.from_env_overrides(
        container.image_digest, container.env_override, require_data=require_data
    )


@dataclass(frozen=True)
class AttestationPolicy:
    """What sealbench requires of verified Confidential Space claims before it trusts a workload.

    - ``swname == "CONFIDENTIAL_SPACE"`` and ``dbgstat == "disabled-since-boot"`` (no debug
      image: its operator has root in the VM);
    - ``hwmodel`` in :data:`CONFIDENTIAL_HWMODELS` (memory encrypted by the CPU, not a shielded
      VM whose host can read it) and ``secboot`` true (the measured boot chain was verified);
    - ``"STABLE"`` in ``submods.confidential_space.support_attributes`` (absent, as on debug
      images, is a violation); with ``accept_experimental_gpu`` (a benchmark's explicit opt-in)
      an ``"EXPERIMENTAL"`` preview image instead, only with ``submods.nvidia_gpu.cc_mode ==
      "ON"`` (the confidential GPU images);
    - ``submods.container.image_digest`` in ``allowed_image_digests``;
    - no ``cmd_override`` (``null`` or empty);
    - ``env_override`` holds every key of ``expected_env_overrides`` with exactly that value.
      Any *other* override is a violation too unless its name is in
      ``allowed_extra_env_overrides``: overrides change what the image does, and one the policy
      author did not name is one nobody reviewed;
    - ``expected_nonce`` (when set) is one of the token's ``eat_nonce`` values.

    Checked in that order; the first failure raises :class:`PolicyViolationError`.
    """

    allowed_image_digests: frozenset[str]
    expected_env_overrides: Mapping[str, str] = field(default_factory=dict)
    expected_nonce: str | None = None
    allowed_extra_env_overrides: frozenset[str] = frozenset()
    accept_experimental_gpu: bool = False

    def __post_init__(self) -> None:
        if not self.allowed_image_digests:
            raise ValueError("an attestation policy must allow at least one image digest")
        for digest in self.allowed_image_digests:
            parse_digest(digest)
        object.__setattr__(
            self, "expected_env_overrides", MappingProxyType(dict(self.expected_env_overrides))
        )

    @classmethod
    def from_requirements(cls, requirements: WorkloadRequirements) -> AttestationPolicy:
        """The production rules plus a relying party's platform-neutral requirements."""
        return cls(
            allowed_image_digests=requirements.allowed_image_digests,
            expected_env_overrides=requirements.expected_env_overrides,
            expected_nonce=requirements.expected_nonce,
            allowed_extra_env_overrides=requirements.allowed_extra_env_overrides,
            accept_experimental_gpu=requirements.accept_experimental_gpu,
        )

    def check(self, claims: AttestationClaims) -> None:
        if claims.swname != REQUIRED_SWNAME:
            raise PolicyViolationError("swname", repr(REQUIRED_SWNAME), show_claim(claims.swname))
        if claims.dbgstat != REQUIRED_DBGSTAT:
            raise PolicyViolationError(
                "dbgstat", repr(REQUIRED_DBGSTAT), show_claim(claims.dbgstat)
            )
        if claims.hwmodel not in CONFIDENTIAL_HWMODELS:
            raise PolicyViolationError(
                "hwmodel", f"one of {sorted(CONFIDENTIAL_HWMODELS)}", show_claim(claims.hwmodel)
            )
        if claims.secboot is not True:
            raise PolicyViolationError("secboot", "true", show_claim(claims.secboot))
        space = claims.submods.confidential_space
        support = None if space is None else space.support_attributes
        gpu = claims.submods.nvidia_gpu
        if (self.accept_experimental_gpu and support is not None
                and EXPERIMENTAL_SUPPORT_ATTRIBUTE in support
                and REQUIRED_SUPPORT_ATTRIBUTE not in support):
            if gpu is None or gpu.cc_mode != REQUIRED_GPU_CC_MODE:
                raise PolicyViolationError(
                    "submods.nvidia_gpu.cc_mode", repr(REQUIRED_GPU_CC_MODE),
                    "absent" if gpu is None else show_claim(gpu.cc_mode),
                )
        elif support is None or REQUIRED_SUPPORT_ATTRIBUTE not in support:
            raise PolicyViolationError(
                "submods.confidential_space.support_attributes",
                f"a list containing {REQUIRED_SUPPORT_ATTRIBUTE!r}",
                "absent" if support is None else show_claim(list(support)),
            )
        container = claims.submods.container
        if container.image_digest not in self.allowed_image_digests:
            raise PolicyViolationError(
                "submods.container.image_digest",
                f"one of {len(self.allowed_image_digests)} allowed digests",
                show_claim(container.image_digest),
            )
        if container.cmd_override:
            raise PolicyViolationError(
                "submods.container.cmd_override",
                "no command override",
                f"{len(container.cmd_override)} arguments",
            )
        self._check_env(container.env_override or {})
        if self.expected_nonce is not None and self.expected_nonce not in claims.eat_nonce:
            raise PolicyViolationError(
                "eat_nonce", repr(self.expected_nonce), show_claim(list(claims.eat_nonce))
            )

    def _check_env(self, env: Mapping[str, str]) -> None:
        for name, expected in sorted(self.expected_env_overrides.items()):
            claim = f"submods.container.env_override.{name}"
            if name not in env:
                raise PolicyViolationError(claim, repr(expected), "absent")
            if env[name] != expected:
                raise PolicyViolationError(claim, repr(expected), show_claim(env[name]))
        allowed = set(self.expected_env_overrides) | self.allowed_extra_env_overrides
        extra = sorted(set(env) - allowed)
        if extra:
            raise PolicyViolationError(
                "submods.container.env_override",
                f"only the overrides {sorted(allowed)}",
                f"also {show_claim(extra)}",
            )


def attested_workload(claims: AttestationClaims) -> AttestedWorkload:
    """The platform-neutral view of Confidential Space claims."""
    container = claims.submods.container
    return AttestedWorkload(
        iss=claims.iss,
        aud=claims.aud,
        image_digest=container.image_digest,
        env_override=container.env_override or {},
        eat_nonce=claims.eat_nonce,
        gpu=claims.submods.nvidia_gpu is not None,
    )


class ConfidentialSpacePlatform:
    """Google Cloud Confidential Space: Google's verifier, the launcher socket, Google's
    endpoints, ``tee-env-*`` metadata, workload identity federation (CEL + ``principalSet``)."""

    name: Final = "confidential-space"
    insecure: Final = False
    verifier: Final = VerifierKeys(CONFIDENTIAL_SPACE_ISSUER, CONFIDENTIAL_SPACE_JWKS_URL)
    launcher_backends: Final = ("confidential-space",)
    #: An owner's account: a Google Cloud project (:class:`~sealbench.gcp.account.GcpSettings`).
    account_settings: Final = GcpSettings
    #: What a command's flags say of its VM (:class:`~sealbench.gcp.account.CsLaunchOptions`).
    launch_options: Final = CsLaunchOptions

    def __repr__(self) -> str:
        return "ConfidentialSpacePlatform()"

    @classmethod
    def issues(cls, issuer: str) -> bool:
        return issuer == CONFIDENTIAL_SPACE_ISSUER

    def attester(self, launcher_dir: Path | None = None) -> Attester:
        if launcher_dir is not None:
            raise ValueError(
                "the Confidential Space launcher's socket is at a fixed path; no directory "
                "can be chosen"
            )
        return LauncherAttester()

    def knows_provider(self, sts_url: str, provider: str) -> bool | None:
        from sealbench.gcp.sts_probe import sts_knows_provider

        return sts_knows_provider(sts_url, provider)

    def token_destinations(self, issuer: str) -> TokenDestinations:
        """Google's STS, Cloud KMS and Cloud Storage, fixed: a run spec names none of them."""
        if not self.issues(issuer):
            raise ValueError(f"{issuer[:80]!r} is not Google's Confidential Space verifier")
        return TokenDestinations(GOOGLE_ENDPOINTS, fixed=True)

    def evidence(self, payload: Mapping[str, object]) -> AttestedWorkload:
        return attested_workload(claims_from_payload(payload))

    def verify(
        self,
        token: str,
        jwks: Jwks,
        *,
        issuer: str,
        audience: str,
        now: float,
        requirements: WorkloadRequirements | None = None,
    ) -> AttestedWorkload:
        claims = verify_token(token, jwks, issuer=issuer, audience=audience, now=now)
        if requirements is not None:
            AttestationPolicy.from_requirements(requirements).check(claims)
        return attested_workload(claims)

    def launch_environment(self, run_spec: Mapping[str, str]) -> dict[str, str]:
        """Instance metadata ``tee-env-<NAME>`` per variable; names outside the run spec's and
        the aggregator's spec's are refused (each image's launch policy refuses the other's
        too)."""
        unknown = sorted(set(run_spec) - set(ALL_OVERRIDE_NAMES))
        if unknown:
            raise ValueError(f"not run-spec variables: {unknown}")
        return {f"{LAUNCH_ENV_PREFIX}{name}": value for name, value in sorted(run_spec.items())}

    def key_release_condition(self, context: ConditionContext) -> str:
        check_endpoint_pin(context.endpoints, fixed=True, subject="a Confidential Space condition")
        return render_condition(context)

    def grantee(self, pool: str, uid: str) -> str:
        match = _POOL.fullmatch(pool)
        if match is None:
            raise ValueError(
                f"{pool[:120]!r} is not projects/NUMBER/locations/global/workloadIdentityPools/P"
            )
        return principal_set(match["number"], match["pool"], uid)

    def asset_access(self, destinations: ServiceEndpoints, attester: Attester) -> AssetAccess:
        """Google's workload identity federation, Cloud KMS and Cloud Storage."""
        from sealbench.gcp.access import CloudAccess

        return CloudAccess(destinations, attester)

    def launcher(self, backend: str, **options: Any) -> Launcher:
        """``confidential-space``: a Confidential Space VM on Compute Engine, from a command's
        typed ``launch`` options and its account's defaults (the options of
        :func:`sealbench.gcp.account.account_launcher`), or from the VM's settings themselves
        (those of :func:`sealbench.gcp.launcher.build_launcher`)."""
        check_backend(self, backend)
        if "launch" in options:
            from sealbench.gcp.account import account_launcher

            return account_launcher(self, **options)
        from sealbench.gcp.launcher import build_launcher

        return build_launcher(self, **options)

    def gpu_machine(self, accelerator: str) -> tuple[str, int]:
        from sealbench.gcp.launcher import gpu_machine

        return gpu_machine(accelerator)

    # -- an owner's account (sealbench.platforms.account.AccountPlatform) --

    def account_routes(self, settings: GcpSettings) -> AccountRoutes:
        """Where runs of a Google Cloud account go
        (:func:`sealbench.gcp.account.account_routes`)."""
        from sealbench.gcp.account import account_routes

        return account_routes(settings, self.verifier)

    def account_owner_cloud(self, settings: GcpSettings, *, email: Callable[[], str]) -> OwnerCloud:
        from sealbench.gcp.account import account_owner_cloud

        return account_owner_cloud(settings, email=email)

    def launch_defaults(self, settings: GcpSettings, cloud: OwnerCloud) -> LaunchDefaults:
        from sealbench.gcp.account import launch_defaults

        return launch_defaults(settings)

    def account_rows(self, settings: GcpSettings) -> dict[str, str]:
        from sealbench.gcp.account import account_rows

        return account_rows(settings)

    def complete_account(self, settings: GcpSettings) -> GcpSettings:
        from sealbench.gcp.account import complete_account

        return complete_account(settings)


if TYPE_CHECKING:  # mypy holds the platform to its account door, typed by its settings model
    _ACCOUNT_DOOR: AccountPlatform[GcpSettings] = ConfidentialSpacePlatform()
