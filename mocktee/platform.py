"""The INSECURE mock TEE as a :class:`~sealbench.platforms.platform.Platform` of its own (entry
point ``insecure-mock``), beside Confidential Space and never a branch inside it.

The mock emulates Confidential Space: its verifier (:mod:`sealbench.mocktee.verifier`) signs the
Confidential Space claim set, its STS evaluates Google's CEL, its IAM grants ``principalSet``
members. So :class:`InsecureMockPlatform` reads and checks claims with the production schema and
rules, and renders the production condition; what is its own:

- its issuer: an ``http://`` verifier on the loopback interface (never Google's);
- its token destinations: the mock cloud's STS, KMS and storage URLs, which the verifier's OIDC
  discovery document names in ``sealbench_insecure_mock_endpoints`` (:data:`MOCK_ENDPOINTS_MEMBER`)
  and which every key-release condition must pin (the production one pins their absence);
- its attester: the mock launcher's socket in a directory the caller names, or at the real
  launcher's path (the Docker backend mounts it there);
- how the run spec reaches the workload: the mock launcher takes the env overrides as they are;
- its launchers: ``mock`` (a child process) and ``docker``.

A mock token proves nothing about hardware: whoever holds the mock's state directory decides
what it claims. The registry logs a warning whenever it picks this platform for a token
(:func:`~sealbench.platforms.platform.platform_for_issuer`); merely installing it logs nothing, so a
production enclave that lists the installed platforms stays quiet.

This module imports no mock service (no cel-python, no storage emulator): the evaluation image
finds it through the entry point without the ``mock`` extra.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pydantic import BaseModel, ConfigDict

from sealbench.contract.inputs import ConditionContext
from sealbench.contract.pool import AGGREGATE_ENV_NAMES
from sealbench.contract.spec import ENV_OVERRIDE_NAMES, ServiceEndpoints
from sealbench.crypto.attestation import Jwks
from sealbench.gcp.confidential_space import (
    AttestationPolicy,
    attested_workload,
    claims_from_payload,
    principal_set,
    render_condition,
    verify_token,
)
from sealbench.platforms.access import AssetAccess
from sealbench.platforms.account import AccountPlatform, AccountRoutes, LaunchDefaults
from sealbench.platforms.attester import Attester, LauncherAttester
from sealbench.platforms.errors import OwnerSettingsError
from sealbench.platforms.launcher import Launcher, LaunchSettingsError, check_backend
from sealbench.platforms.owner_cloud import OwnerCloud
from sealbench.platforms.platform import (
    AttestedWorkload,
    TokenDestinations,
    VerifierKeys,
    WorkloadRequirements,
    check_endpoint_pin,
)

__all__ = [
    "DISCOVERY_TIMEOUT_S",
    "MOCK_ENDPOINTS_MEMBER",
    "InsecureMockPlatform",
    "MockAccountSettings",
]

#: The member of the INSECURE mock verifier's discovery document that names the mock cloud's
#: token destinations (``sts_url``, ``kms_endpoint``, ``storage_endpoint``).
MOCK_ENDPOINTS_MEMBER: Final = "sealbench_insecure_mock_endpoints"
#: Seconds allowed for the mock issuer's discovery document.
DISCOVERY_TIMEOUT_S: Final = 10.0
_MAX_DISCOVERY: Final = 64 * 1024
#: Seconds between two polls of a mock Confidential Space VM (a local process).
MOCK_POLL_S: Final = 0.5
_LOOPBACK_ISSUER: Final = re.compile(r"http://(127\.0\.0\.1|localhost):[0-9]{1,5}")
_POOL: Final = re.compile(
    r"^projects/(?P<number>[0-9]{1,20})/locations/global/workloadIdentityPools/(?P<pool>[^/]+)$"
)


class MockAccountSettings(BaseModel):
    """An owner's account in the INSECURE mock cloud as a profile holds it: the state directory
    of the running mock (``sealbench mock-tee up --state-dir DIR``); the account in it is named
    by the owner's registry email."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    state_dir: Path


class InsecureMockPlatform:
    """The mock TEE (see the module docstring). INSECURE: its evidence proves nothing."""

    name: Final = "insecure-mock"
    insecure: Final = True
    #: Each running mock has its own verifier (its ``endpoints.json`` names it).
    verifier: Final = None
    launcher_backends: Final = ("mock", "docker")
    #: Its launchers take no options of a command's beyond the image and debug.
    launch_options: Final = None
    #: An owner's account: the running mock's state directory.
    account_settings: Final = MockAccountSettings

    def __repr__(self) -> str:
        return "InsecureMockPlatform()"

    @classmethod
    def issues(cls, issuer: str) -> bool:
        return _LOOPBACK_ISSUER.fullmatch(issuer) is not None

    def attester(self, launcher_dir: Path | None = None) -> Attester:
        """The mock launcher's socket in ``launcher_dir`` (the mock process backend), or at the
        real launcher's fixed path (``None``: the Docker backend mounts the mock's socket
        folder there)."""
        from sealbench.mocktee.launcher import SOCKET_NAME, TOKEN_FILE_NAME

        if launcher_dir is None:
            return LauncherAttester()
        return LauncherAttester(launcher_dir / SOCKET_NAME, launcher_dir / TOKEN_FILE_NAME)

    def knows_provider(self, sts_url: str, provider: str) -> bool | None:
        """The mock's STS imitates Google's: probed as Google's is."""
        from sealbench.gcp.sts_probe import sts_knows_provider

        return sts_knows_provider(sts_url, provider)

    def token_destinations(self, issuer: str) -> TokenDestinations:
        """The endpoints the mock verifier ``issuer`` names in its discovery document; raises
        :class:`ValueError` for another issuer or a document that does not name them."""
        if not self.issues(issuer):
            raise ValueError(f"{issuer[:80]!r} is not a mock verifier on the loopback interface")
        url = f"{issuer}/.well-known/openid-configuration"
        try:
            with urllib.request.urlopen(url, timeout=DISCOVERY_TIMEOUT_S) as response:  # noqa: S310 - loopback http checked above
                document = json.loads(response.read(_MAX_DISCOVERY))
            member = document[MOCK_ENDPOINTS_MEMBER]
            endpoints = ServiceEndpoints(
                sts_url=str(member["sts_url"]),
                kms_endpoint=str(member["kms_endpoint"]),
                storage_endpoint=str(member["storage_endpoint"]),
            )
        except (OSError, urllib.error.URLError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(
                f"the mock verifier {issuer} does not name its platform's endpoints "
                f"({type(exc).__name__})"
            ) from exc
        return TokenDestinations(endpoints, fixed=False)

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
            # The mock attests the production claim set; the same rules keep mock runs honest
            # (a debug launch, a shielded VM or an extra override is refused here too).
            AttestationPolicy.from_requirements(requirements).check(claims)
        return attested_workload(claims)

    def launch_environment(self, run_spec: Mapping[str, str]) -> dict[str, str]:
        """The mock launcher's ``env_overrides``: the variables themselves."""
        unknown = sorted(set(run_spec) - set(ENV_OVERRIDE_NAMES) - set(AGGREGATE_ENV_NAMES))
        if unknown:
            raise ValueError(f"not run-spec variables: {unknown}")
        return dict(sorted(run_spec.items()))

    def key_release_condition(self, context: ConditionContext) -> str:
        """The production condition with the mock cloud's endpoints pinned (required)."""
        check_endpoint_pin(context.endpoints, fixed=False, subject="a mock condition")
        return render_condition(context)

    def grantee(self, pool: str, uid: str) -> str:
        match = _POOL.fullmatch(pool)
        if match is None:
            raise ValueError(
                f"{pool[:120]!r} is not projects/NUMBER/locations/global/workloadIdentityPools/P"
            )
        return principal_set(match["number"], match["pool"], uid)

    def asset_access(self, destinations: ServiceEndpoints, attester: Attester) -> AssetAccess:
        """Google's workload identity federation, Cloud KMS and Cloud Storage (the mock
        serves the same APIs at its own endpoints)."""
        from sealbench.gcp.access import CloudAccess

        return CloudAccess(destinations, attester)

    def launcher(self, backend: str, **options: Any) -> Launcher:
        """``mock``: the enclave as a child process (options ``control_url``, ``debug``);
        ``docker``: the evaluation image on a Docker engine (options ``engine``,
        ``control_url``, ``image``, ``debug``). Both are attested by the running mock verifier
        whose control endpoint is ``control_url``."""
        check_backend(self, backend)
        from sealbench.mocktee.launcher import MockLauncher, RemoteTokenMinter

        minter = MockLauncher(RemoteTokenMinter(options.pop("control_url")))
        debug = bool(options.pop("debug", False))
        if backend == "mock":
            from sealbench.mocktee.process_launcher import MockProcessLauncher

            return MockProcessLauncher(minter, debug=debug, platform=self, **options)
        from sealbench.mocktee.docker_launcher import DockerLauncher

        engine, image = options.pop("engine"), options.pop("image")
        return DockerLauncher(engine, minter, image, debug=debug, platform=self, **options)

    def gpu_machine(self, accelerator: str) -> tuple[str, int]:
        raise LaunchSettingsError(
            f"the INSECURE mock's launchers start no {accelerator!r} machine",
            hint="a confidential GPU run needs --tee confidential-space",
        )

    # -- an owner's account (sealbench.platforms.account.AccountPlatform) --

    def account_routes(self, settings: MockAccountSettings) -> AccountRoutes:
        """Runs of a mock account: the running mock's token destinations, results handed back
        to this machine, attested by the running mock's verifier and started by its process
        and Docker launchers through its control endpoint (its ``endpoints.json``);
        :class:`OwnerSettingsError` when no mock runs in the state directory."""
        endpoints = _running_mock(settings.state_dir)
        return AccountRoutes(
            endpoints.service_endpoints(), None,
            VerifierKeys(endpoints.issuer, endpoints.jwks_uri),
            f"the mock-tee of {settings.state_dir}, yours",
            "check that 'sealbench mock-tee up' is running",
            control_url=endpoints.control,
        )

    def account_owner_cloud(
        self, settings: MockAccountSettings, *, email: Callable[[], str]
    ) -> OwnerCloud:
        """One owner's account in the mock cloud running in ``settings.state_dir``, named by
        the owner's registry email; see
        :class:`sealbench.mocktee.owner_cloud.InsecureMockOwnerCloud`."""
        from sealbench.mocktee.owner_cloud import InsecureMockOwnerCloud

        return InsecureMockOwnerCloud.connect(Path(settings.state_dir), email())

    def launch_defaults(self, settings: MockAccountSettings, cloud: OwnerCloud) -> LaunchDefaults:
        """The mock's Confidential Space VMs: processes on this machine, started by its Compute
        stand-in in the owner's mock project, in :data:`~sealbench.mocktee.constants.MOCK_ZONE`,
        as the runner account the mock provisions; polled closely, so that their serial output
        is read before it goes away with the stopped VM (Google's 10 s otherwise)."""
        from sealbench.mocktee.constants import MOCK_ZONE
        from sealbench.mocktee.provision import RUNNER_ACCOUNT_ID

        project = cloud.project_id
        return LaunchDefaults(
            project=project, zone=MOCK_ZONE,
            service_account=f"{RUNNER_ACCOUNT_ID}@{project}.iam.gserviceaccount.com",
            api_endpoint=_running_mock(settings.state_dir).compute, poll_interval_s=MOCK_POLL_S,
        )

    def account_rows(self, settings: MockAccountSettings) -> dict[str, str]:
        return {"cloud": f"INSECURE mock TEE in {settings.state_dir}"}

    def complete_account(self, settings: MockAccountSettings) -> MockAccountSettings:
        return settings


def _running_mock(state_dir: Path) -> Any:
    """The endpoints of the mock running in ``state_dir`` (its ``endpoints.json``)."""
    from sealbench.mocktee import MockEndpoints

    try:
        return MockEndpoints.load(Path(state_dir))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise OwnerSettingsError(
            f"no running mock TEE found in {state_dir}",
            hint="start it with 'sealbench mock-tee up --state-dir DIR'",
        ) from exc


if TYPE_CHECKING:  # mypy holds the platform to its account door, typed by its settings model
    _ACCOUNT_DOOR: AccountPlatform[MockAccountSettings] = InsecureMockPlatform()
