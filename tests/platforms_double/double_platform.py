"""A third TEE platform for tests: neither Google's nor the mock, installed only by entry point
(tests/integration/test_third_platform.py writes its ``*.dist-info`` into a temporary folder on
``sys.path``). It implements every member of :class:`sealbench.platforms.platform.Platform` in the
smallest way that lets a test see which adapter the cores reached: it records, it attests
nothing. The cores must reach it through the registry alone: no module of theirs names it.

The file is copied next to the ``*.dist-info`` as the module ``sealbench_double_platform`` (the
entry point's target), so it imports nothing from the tests.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final

from pydantic import BaseModel, ConfigDict

from sealbench.contract.inputs import ConditionContext
from sealbench.contract.spec import AssetLocation, RunSpec, ServiceEndpoints
from sealbench.contract.workload import WorkloadIdentity
from sealbench.crypto.attestation import Jwks
from sealbench.crypto.envelope import InsecureInMemoryKeyWrapper, KeyWrapper
from sealbench.platforms.access import AssetAccess
from sealbench.platforms.account import AccountRoutes
from sealbench.platforms.attester import Attester
from sealbench.platforms.errors import OwnerCloudError
from sealbench.platforms.launcher import (
    Launcher,
    LaunchError,
    LaunchResult,
    LaunchSettingsError,
    OutputFn,
    RunningWorkload,
    check_backend,
)
from sealbench.platforms.owner_cloud import AssetCoordinates, Check, Coordinates, OwnerCloud
from sealbench.platforms.platform import (
    AttestedWorkload,
    TokenDestinations,
    VerifierKeys,
    WorkloadRequirements,
    check_endpoint_pin,
)
from sealbench.platforms.storage import BlobStore, LocalBlobStore

NAME: Final = "double"
BACKEND: Final = "double-enclave"
ISSUER: Final = "https://verifier.double.invalid"
IMAGE: Final = "sha256:" + "d" * 64
ENDPOINTS: Final = ServiceEndpoints(
    "https://sts.double.invalid/token", "https://kms.double.invalid", "https://blob.double.invalid"
)


def token(payload: Mapping[str, object]) -> str:
    """An unsigned compact JWS with ``payload`` (the double's evidence proves nothing)."""
    def part(value: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none'})}.{part(dict(payload))}.c2ln"


@dataclass
class DoubleAttester:
    """Hands out the double's tokens."""

    def token(self, audience: str | None = None, nonces: Sequence[str] = ()) -> str:
        return token({"iss": ISSUER, "aud": audience or "double", "image": IMAGE})


@dataclass
class DoubleAccess:
    """The double's :class:`AssetAccess`: a local folder per owner; records each call."""

    destinations: ServiceEndpoints
    attester: Attester
    root: Path = field(default_factory=lambda: Path("."))
    calls: list[str] = field(default_factory=list)

    def store(self, uri: str, pool_provider: str) -> tuple[BlobStore, str]:
        self.calls.append(f"store {uri}")
        return LocalBlobStore(self.root), ""

    def key_wrapper(self, owner: AssetLocation) -> KeyWrapper:
        self.calls.append(f"key {owner.kms_key}")
        raise NotImplementedError("the double releases no key")


class DoubleAccountSettings(BaseModel):
    """An account on the double, as a profile holds it (``--setting account=... root=...``):
    its name and the local folder standing for its bucket."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    account: str
    root: Path = Path(".")


class DoubleLaunchOptions(BaseModel):
    """What a command may say to the double's launcher, typed as Google's launch options are."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    region: str | None = None


@dataclass
class DoubleLauncher:
    """The double's :class:`Launcher`: starts nothing."""

    platform: DoublePlatform
    options: Mapping[str, Any]

    @property
    def image_digest(self) -> str:
        return IMAGE

    def start(self, spec: RunSpec, *, on_output: OutputFn | None = None) -> RunningWorkload:
        self.platform.started.append(spec)
        raise LaunchError("the double starts no workload")

    def launch(
        self, spec: RunSpec, *, timeout: float | None = None, on_output: OutputFn | None = None
    ) -> LaunchResult:
        self.platform.started.append(spec)
        raise LaunchError("the double starts no workload")


@dataclass(frozen=True)
class DoubleChanges:
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed)


@dataclass(frozen=True)
class DoublePolicyReport:
    """What the double's policy sync wrote: the condition its platform rendered."""

    provider: str
    condition: str
    key: DoubleChanges
    pool_created: bool = False
    bucket: DoubleChanges | None = None
    result_bucket: DoubleChanges | None = None

    @property
    def changed(self) -> bool:
        return self.key.changed


@dataclass
class DoubleOwnerCloud:
    """The double's :class:`OwnerCloud`: one account named by its settings (``account``,
    ``root``: a local folder standing for its bucket); records each policy it is asked to sync
    (in :attr:`DoublePlatform.synced`), rendered by its platform."""

    platform: DoublePlatform
    account: str
    root: Path

    # The run spec's asset locations still take the first platform's resource shapes (a
    # Cloud KMS key name, a pool provider name, gs:// or file:/// storage): the double's fit
    # them, its "bucket" being the local folder ``root``.
    project_id = property(lambda self: self.account)
    project_number = property(lambda self: "42")
    key_name = property(lambda self: f"projects/{self.account}/locations/double/keyRings/"
                        f"double/cryptoKeys/{self.account}")
    bucket = property(lambda self: f"{self.account}-bucket")
    result_prefix = property(lambda self: f"{self.root.resolve().as_uri()}/results")
    issuer_uri = property(lambda self: f"{ISSUER}/")
    pinned_endpoints = property(lambda self: ENDPOINTS)

    def credentials(self) -> Any:
        return None

    def names(self) -> dict[str, str]:
        return {"key": self.key_name, "bucket": self.bucket}

    def default_coordinates(self, kind: str, asset_id: int) -> AssetCoordinates:
        return AssetCoordinates(
            self.key_name, f"{self.root.resolve().as_uri()}/{kind}s/{asset_id}",
            "projects/42/locations/global/workloadIdentityPools/double/providers/double")

    def ensure_key_and_bucket(self, *, key: bool = True, bucket: bool = True) -> list[str]:
        return []

    def key_wrapper(self, key_name: str) -> KeyWrapper:
        """A key held in this process (the double has no key service)."""
        return InsecureInMemoryKeyWrapper(key_name)

    def blob_store(self, uri: str) -> tuple[BlobStore, str]:
        return LocalBlobStore(self.root), uri.rsplit("/", 1)[-1]

    def failure(self, exc: BaseException, doing: str, *, bucket: str | None = None
                ) -> OwnerCloudError:
        return OwnerCloudError(f"double: {doing}: {exc}")

    def sync_policy(
        self,
        coordinates: Coordinates,
        workloads: frozenset[WorkloadIdentity],
        *,
        include_data: bool,
        result_bucket: str | None = None,
        experimental_gpu_images: frozenset[str] = frozenset(),
        experimental_benchmark_ids: frozenset[str] = frozenset(),
        undelete: bool = False,
    ) -> DoublePolicyReport:
        """``undelete`` as the shipped platforms take it: the double soft-deletes nothing, so
        there is nothing to undelete."""
        condition = self.platform.key_release_condition(ConditionContext(
            frozenset(w.image_digest for w in workloads), include_data, ENDPOINTS))
        report = DoublePolicyReport(
            coordinates.wip_provider, condition,
            DoubleChanges(added=tuple(sorted(
                self.platform.grantee(coordinates.wip_provider, w.uid()) for w in workloads))),
        )
        self.platform.synced.append(report)
        return report

    def doctor_checks(self, runner: Any = None, image_reference: str | None = None
                      ) -> list[Check]:
        runs = [] if runner is None else [Check("double VMs", True, str(runner.zone))]
        return [Check("double account", True, self.account), *runs]

    def probe_condition(self, coordinates: Coordinates, workloads: frozenset[WorkloadIdentity],
                        **_: Any) -> Check:
        condition = self.platform.key_release_condition(ConditionContext(
            frozenset(w.image_digest for w in workloads), True, ENDPOINTS))
        return Check("double condition", True, condition)


class DoublePlatform:
    """A third platform (see the module docstring)."""

    name: Final = NAME
    insecure: Final = True
    verifier: Final = VerifierKeys(ISSUER)
    launcher_backends: Final = (BACKEND,)
    account_settings: Final = DoubleAccountSettings
    launch_options: Final = DoubleLaunchOptions

    #: The run specs its launchers were asked to start (across instances: the client builds
    #: a fresh platform per lookup).
    started: ClassVar[list[RunSpec]] = []
    #: The policies its owner clouds synced.
    synced: ClassVar[list[DoublePolicyReport]] = []

    @classmethod
    def issues(cls, issuer: str) -> bool:
        return issuer == ISSUER

    def attester(self, launcher_dir: Path | None = None) -> Attester:
        if launcher_dir is not None:
            raise ValueError("the double's evidence comes from nowhere in particular")
        return DoubleAttester()

    def token_destinations(self, issuer: str) -> TokenDestinations:
        if not self.issues(issuer):
            raise ValueError(f"{issuer!r} is not the double's verifier")
        return TokenDestinations(ENDPOINTS, fixed=False)

    def evidence(self, payload: Mapping[str, object]) -> AttestedWorkload:
        return AttestedWorkload(
            iss=str(payload["iss"]), aud=str(payload["aud"]), image_digest=str(payload["image"])
        )

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
        raise NotImplementedError("the double verifies nothing")

    def knows_provider(self, sts_url: str, provider: str) -> bool | None:
        return None  # the double has no token service to ask

    def launch_environment(self, run_spec: Mapping[str, str]) -> dict[str, str]:
        return {f"double-{k}": v for k, v in run_spec.items()}

    def key_release_condition(self, context: ConditionContext) -> str:
        check_endpoint_pin(context.endpoints, fixed=False, subject="a double condition")
        return f"double: images {sorted(context.image_digests)}"

    def grantee(self, pool: str, uid: str) -> str:
        return f"principalSet://iam.googleapis.com/{pool}/attribute.workload_uid/{uid}"

    def asset_access(self, destinations: ServiceEndpoints, attester: Attester) -> AssetAccess:
        return DoubleAccess(destinations, attester)

    def launcher(self, backend: str, **options: Any) -> Launcher:
        check_backend(self, backend)
        return DoubleLauncher(self, options)

    def gpu_machine(self, accelerator: str) -> tuple[str, int]:
        raise LaunchSettingsError("the double has no GPU", hint="none")

    def _owner_cloud(self, settings: DoubleAccountSettings) -> DoubleOwnerCloud:
        return DoubleOwnerCloud(self, settings.account, Path(settings.root))

    def account_routes(self, settings: DoubleAccountSettings) -> AccountRoutes:
        cloud = self._owner_cloud(settings)
        return AccountRoutes(cloud.pinned_endpoints, cloud.result_prefix, self.verifier,
                             "the double verifier your profile names",
                             f"check that {ISSUER} answers, or pass --unverified")

    def account_owner_cloud(
        self, settings: DoubleAccountSettings, *, email: Callable[[], str]
    ) -> OwnerCloud:
        return self._owner_cloud(settings)

    def launch_defaults(self, settings: DoubleAccountSettings, cloud: OwnerCloud) -> None:
        return None  # the double starts no confidential VM

    def account_rows(self, settings: DoubleAccountSettings) -> dict[str, str]:
        cloud = self._owner_cloud(settings)
        return {"cloud": f"an account on the {NAME} platform", **cloud.names(),
                "attestation issuer": cloud.issuer_uri}

    def complete_account(self, settings: DoubleAccountSettings) -> DoubleAccountSettings:
        return settings
