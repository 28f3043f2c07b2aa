"""The platform seam: what differs between one TEE platform and another, behind one interface.

A :class:`Platform` knows how its workload gets evidence (:meth:`~Platform.attester`), how that
evidence is verified and mapped to the platform-neutral :class:`AttestedWorkload`
(:meth:`~Platform.evidence`, :meth:`~Platform.verify`, with the platform's own rules: debug
state, hardware, image, overrides), how the run spec reaches the workload
(:meth:`~Platform.launch_environment`), how an owner's key-release policy is written
(:meth:`~Platform.key_release_condition`, :meth:`~Platform.grantee`), where a workload it
attests may send tokens to reach assets and keys (:meth:`~Platform.token_destinations`),
and which client launchers start its workloads (:attr:`~Platform.launcher_backends`). What a
client profile holds of an account on it, typed, and the answers it gives about one (the asset
owner's cloud account the client seals into and writes policies in among them), are
:class:`~sealbench.platforms.account.AccountPlatform`'s.

The interface is cut by caller, four doors behind one entry point: :class:`VerifierPlatform`
(a relying party: the registry, a client opening a result, the enclave reading its evidence),
:class:`EnclavePlatform` (the workload inside the TEE), :class:`OwnerPlatform` (an asset
owner's policy) and :class:`LaunchPlatform` (the client starting a workload); a
caller that needs one door takes that protocol, and :class:`Platform` is all four.

Implementations declare themselves as entry points of the group ``sealbench.platforms`` (as
``keyring`` backends do) and are found by name (:func:`load_platform`) or by the issuer of a
token (:func:`platform_for_issuer`); the cores (``crypto``, ``enclave``, ``server``, ``client``)
take a platform as an argument or ask this registry, and never import an implementation (a test
scans them). The two shipped ones:

- ``confidential-space`` → :class:`sealbench.gcp.confidential_space.ConfidentialSpacePlatform`
- ``insecure-mock`` → :class:`sealbench.mocktee.platform.InsecureMockPlatform` (its own issuer;
  proves nothing about hardware)

Errors: :class:`UnknownPlatformError` (a :class:`~sealbench.platforms.errors.CloudError`) when no
platform has the name or issues the token; verification raises
:class:`~sealbench.crypto.errors.AttestationError` subclasses.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from pydantic import BaseModel

from sealbench.contract.inputs import ConditionContext, ConditionInputError
from sealbench.contract.spec import ServiceEndpoints
from sealbench.crypto.attestation import Jwks
from sealbench.crypto.digest import parse_digest
from sealbench.platforms.access import AssetAccess
from sealbench.platforms.attester import Attester
from sealbench.platforms.errors import CloudError

if TYPE_CHECKING:
    from sealbench.platforms.launcher import Launcher

__all__ = [
    "PLATFORM_GROUP",
    "AttestedWorkload",
    "EnclavePlatform",
    "LaunchPlatform",
    "OwnerPlatform",
    "Platform",
    "TokenDestinations",
    "UnknownPlatformError",
    "VerifierKeys",
    "VerifierPlatform",
    "WorkloadRequirements",
    "attests_hardware",
    "available_platforms",
    "check_endpoint_pin",
    "installed_launcher_backends",
    "load_platform",
    "platform_for_issuer",
    "platforms_for_backend",
]

#: The entry-point group implementations register under (``name = "module:Class"``).
PLATFORM_GROUP: Final = "sealbench.platforms"

_log = logging.getLogger("sealbench.platforms")


class UnknownPlatformError(CloudError):
    """No registered platform has that name, or issues that token."""


@dataclass(frozen=True)
class AttestedWorkload:
    """What every platform's evidence says about a workload, in the JWT/EAT claim names
    (RFC 7519 ``iss``/``aud``, RFC 9711 ``eat_nonce``): who attested it, for whom, the image
    that runs (``image_digest``, a sha256 digest) and the environment the operator passed
    (``env_override``, the run spec: see :meth:`Platform.launch_environment`), and whether the
    evidence attests an accelerator attached to the VM (``gpu``: Confidential Space's
    ``submods.nvidia_gpu``)."""

    iss: str
    aud: str
    image_digest: str
    env_override: Mapping[str, str] = field(default_factory=dict)
    eat_nonce: tuple[str, ...] = ()
    gpu: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "env_override", MappingProxyType(dict(self.env_override)))


@dataclass(frozen=True)
class VerifierKeys:
    """Where a platform's attestation verifier publishes the keys its tokens are signed with:
    ``issuer`` is the ``iss`` its tokens carry, ``jwks_url`` the key set (None: named by the
    issuer's OpenID discovery document)."""

    issuer: str
    jwks_url: str | None = None


@dataclass(frozen=True)
class TokenDestinations:
    """Where a workload attested by one verifier may send tokens (STS, KMS, storage), and how
    its run spec must say so: ``fixed`` is the platform's own endpoints, which the run spec must
    not name (Confidential Space: Google's; its endpoint overrides absent); otherwise the run
    spec must name exactly ``endpoints`` (the INSECURE mock's)."""

    endpoints: ServiceEndpoints
    fixed: bool

    @property
    def spec_overrides(self) -> ServiceEndpoints | None:
        """The endpoint overrides a run spec must carry: None when they must be absent."""
        return None if self.fixed else self.endpoints


def check_endpoint_pin(endpoints: ServiceEndpoints | None, *, fixed: bool, subject: str) -> None:
    """The endpoint rule, written once: a key-release condition for a verifier whose token
    destinations are ``fixed`` (the platform's own, Google's for Confidential Space) pins them by
    the endpoint overrides' *absence*, so it takes no ``endpoints``; for any other verifier (the
    INSECURE mock's) it pins exactly the ``endpoints`` its workloads may send tokens to, which
    must be named (see :class:`TokenDestinations`, the same rule seen from the enclave).
    ``subject`` names the condition in the :class:`ConditionInputError` raised otherwise."""
    if fixed and endpoints is not None:
        raise ConditionInputError(
            f"{subject} pins the platform's own endpoints (overrides absent); it takes no endpoints"
        )
    if not fixed and endpoints is None:
        raise ConditionInputError(
            f"{subject} must pin the endpoints its workloads may send tokens to (name them)"
        )


@dataclass(frozen=True)
class WorkloadRequirements:
    """What a relying party requires of an attested workload beyond the platform's own rules:

    - the image digest is one of ``allowed_image_digests`` (at least one; each a digest);
    - the env overrides hold every key of ``expected_env_overrides`` with exactly that value,
      and no other name unless it is in ``allowed_extra_env_overrides`` (an override nobody
      named is one nobody reviewed);
    - ``expected_nonce`` (when set) is one of the evidence's nonces.
    """

    allowed_image_digests: frozenset[str]
    expected_env_overrides: Mapping[str, str] = field(default_factory=dict)
    expected_nonce: str | None = None
    allowed_extra_env_overrides: frozenset[str] = frozenset()
    #: The benchmark accepts confidential-GPU preview images (issue 18): the platform may then
    #: accept its preview attestation (Confidential Space: EXPERIMENTAL with GPU cc_mode ON).
    accept_experimental_gpu: bool = False

    def __post_init__(self) -> None:
        if not self.allowed_image_digests:
            raise ValueError("the requirements must allow at least one image digest")
        for digest in self.allowed_image_digests:
            parse_digest(digest)
        object.__setattr__(
            self, "expected_env_overrides", MappingProxyType(dict(self.expected_env_overrides))
        )


@runtime_checkable
class VerifierPlatform(Protocol):
    """What a relying party asks of a platform (the registry checking a result, a client
    opening one, the enclave reading its own evidence): whose verifier issued a token, and what
    the token says and is worth."""

    @property
    def name(self) -> str:
        """The entry-point name (``confidential-space``, ``insecure-mock``)."""
        ...

    @property
    def insecure(self) -> bool:
        """True when its evidence proves nothing about hardware (a mock)."""
        ...

    @property
    def verifier(self) -> VerifierKeys | None:
        """Its attestation verifier, where that is one service for every deployment (Google's
        for Confidential Space: what a registry trusts by default and a client checks results
        against); None where each deployment runs its own (the mock's, named by its endpoints
        file)."""
        ...

    @classmethod
    def issues(cls, issuer: str) -> bool:
        """Whether ``issuer`` is this platform's attestation verifier: known to the class, so
        that finding the platform of an issuer constructs no other platform (a production
        client or enclave never constructs the mock's)."""
        ...

    def evidence(self, payload: Mapping[str, object]) -> AttestedWorkload:
        """Map a token payload (verified, or read over the TEE's trusted channel) to the
        neutral view; raises :class:`~sealbench.crypto.errors.TokenInvalidError` when it does
        not follow the platform's claim schema. Applies no rule."""
        ...

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
        """Verify the token (signature, time, audience, issuer), map it to the claim schema,
        and, when ``requirements`` is given, apply the platform's production rules and then
        ``requirements``; raises :class:`~sealbench.crypto.errors.AttestationError`."""
        ...

    def token_destinations(self, issuer: str) -> TokenDestinations:
        """Where a workload attested by ``issuer`` may send tokens to reach assets and keys,
        fixed (the platform's own: no run-spec override allowed) or named exactly by the run
        spec; :class:`ValueError` for an issuer not its own. May do I/O (the mock reads its
        issuer's discovery document)."""
        ...


@runtime_checkable
class EnclavePlatform(Protocol):
    """What the workload inside the TEE asks of its platform: its evidence source and its
    access to each owner's storage and key."""

    @property
    def name(self) -> str:
        """The entry-point name (``confidential-space``, ``insecure-mock``)."""
        ...

    def attester(self, launcher_dir: Path | None = None) -> Attester:
        """The evidence source inside the TEE (Confidential Space: the launcher socket)."""
        ...

    def asset_access(self, destinations: ServiceEndpoints, attester: Attester) -> AssetAccess:
        """Inside the TEE: how the attested workload opens each owner's storage and key,
        acting through ``attester`` (its later tokens) against ``destinations`` (the token
        destinations the run spec names, checked against this platform's)."""
        ...


@runtime_checkable
class OwnerPlatform(Protocol):
    """What an asset owner's side asks of a platform: its key-release condition and the
    principal it grants to. The owner's cloud account is built from the account's typed
    settings (:meth:`~sealbench.platforms.account.AccountPlatform.account_owner_cloud`)."""

    @property
    def name(self) -> str:
        """The entry-point name (``confidential-space``, ``insecure-mock``)."""
        ...

    def key_release_condition(self, context: ConditionContext) -> str:
        """An owner's key-release condition, rendered from
        :data:`~sealbench.contract.inputs.OPERATOR_INPUTS` for ``context`` in the platform's
        policy language."""
        ...

    def grantee(self, pool: str, uid: str) -> str:
        """The principal an owner grants its key and bucket to, for the workloads whose
        :meth:`~sealbench.contract.workload.WorkloadIdentity.uid` is ``uid`` and whose tokens are
        exchanged at ``pool``."""
        ...


@runtime_checkable
class LaunchPlatform(Protocol):
    """What the client starting a workload asks of a platform: its launchers, how the run spec
    reaches the workload, its GPU machines, and whether a run's token service knows an owner."""

    @property
    def name(self) -> str:
        """The entry-point name (``confidential-space``, ``insecure-mock``)."""
        ...

    @property
    def launcher_backends(self) -> tuple[str, ...]:
        """The client's launcher backends (``sealbench run --tee``) that start its workloads."""
        ...

    @property
    def launch_options(self) -> type[BaseModel] | None:
        """The model of what a command's flags say to its launchers (Confidential Space: the
        VM's project, zone, TEE, accelerator, ...), handed to :meth:`launcher` as ``launch``;
        None when its launchers take no such options."""
        ...

    def launcher(self, backend: str, **options: Any) -> Launcher:
        """On the client: the :class:`~sealbench.platforms.launcher.Launcher` of one of its
        :attr:`launcher_backends`, built from the backend's ``options`` (keyword settings each
        backend documents); a :class:`~sealbench.platforms.launcher.LaunchError` for a backend
        not its own, a :class:`~sealbench.platforms.launcher.LaunchSettingsError` for settings
        that cannot work. ``sealbench run`` builds a backend it does not ship with these
        options only: ``image_reference`` and ``image_digest`` (the benchmark's pinned image),
        ``account`` (the profile's account on this platform as its typed
        :attr:`~sealbench.platforms.account.AccountPlatform.account_settings`, ``profile add
        --cloud NAME --setting KEY=VALUE``; None without one), ``launch`` (its
        :attr:`launch_options`, defaults unless a command filled them) and ``debug``."""
        ...

    def launch_environment(self, run_spec: Mapping[str, str]) -> dict[str, str]:
        """How the run spec (``SEALBENCH_*`` variables) reaches the workload: the launch
        settings that make the platform attest exactly these variables."""
        ...

    def gpu_machine(self, accelerator: str) -> tuple[str, int]:
        """``(machine type, accelerator count)`` of the confidential GPU machine its launchers
        start for ``accelerator``; :class:`~sealbench.platforms.launcher.LaunchSettingsError`
        for one it does not launch."""
        ...

    def knows_provider(self, sts_url: str, provider: str) -> bool | None:
        """On the client, before a launch: whether the token service at ``sts_url`` (a run's
        STS override) knows an owner's federation ``provider`` (True), refuses it as unknown
        (False: no key of that owner can be released to the run), or gave no usable answer
        (None: the run decides). Asked with a probe that carries no secret; does I/O."""
        ...


@runtime_checkable
class Platform(VerifierPlatform, EnclavePlatform, OwnerPlatform, LaunchPlatform, Protocol):
    """One TEE platform (see the module docstring), the one entry point an implementation
    registers: the four doors above, each cut for the caller that uses it. Every method is pure
    unless it says otherwise; verification raises, it never returns a bool."""


@functools.cache
def _registered() -> Mapping[str, EntryPoint]:
    """The group's entry points by name, read once per process (scanning every installed
    distribution's metadata costs tens of milliseconds)."""
    return MappingProxyType({ep.name: ep for ep in entry_points(group=PLATFORM_GROUP)})


def load_platform(name: str) -> Platform:
    """The registered platform called ``name`` (a fresh instance)."""
    ep = _registered().get(name)
    if ep is None:
        known = ", ".join(sorted(_registered())) or "none"
        raise UnknownPlatformError(
            f"no TEE platform named {name!r} is installed (installed: {known})"
        )
    platform = ep.load()()
    if not isinstance(platform, Platform) or platform.name != name:
        raise UnknownPlatformError(f"entry point {name!r} ({ep.value}) is not a sealbench Platform")
    return platform


def available_platforms() -> tuple[Platform, ...]:
    """Every registered platform, by name."""
    return tuple(load_platform(name) for name in sorted(_registered()))


def installed_launcher_backends() -> Mapping[str, tuple[str, ...]]:
    """Each registered platform's launcher backends, by platform name, read from each class's
    ``launcher_backends`` without constructing any platform (a production run never constructs
    the mock's); a class that computes the attribute per instance is constructed to read it."""
    found: dict[str, tuple[str, ...]] = {}
    for name, ep in sorted(_registered().items()):
        backends = inspect.getattr_static(ep.load(), "launcher_backends", None)
        if not isinstance(backends, tuple):
            backends = load_platform(name).launcher_backends
        found[name] = tuple(str(b) for b in backends)
    return MappingProxyType(found)


def platforms_for_backend(backend: str) -> tuple[str, ...]:
    """The names of the registered platforms whose launcher backends include ``backend``
    (constructing none, see :func:`installed_launcher_backends`)."""
    return tuple(n for n, b in installed_launcher_backends().items() if backend in b)


def attests_hardware(issuer: str) -> bool:
    """Whether ``issuer`` is the verifier of an installed platform whose evidence is about
    confidential hardware: False for a mock's issuer (``insecure``) and for an issuer no
    installed platform claims. Constructs no platform unless its class computes ``insecure``
    per instance (see :func:`installed_launcher_backends`)."""
    for name, ep in sorted(_registered().items()):
        cls = ep.load()
        if cls.issues(issuer):
            insecure = inspect.getattr_static(cls, "insecure", None)
            if not isinstance(insecure, bool):
                insecure = load_platform(name).insecure
            return not insecure
    return False


def platform_for_issuer(issuer: str, platforms: Iterable[Platform] | None = None) -> Platform:
    """The one platform (of ``platforms``, default: every registered one) whose verifier is
    ``issuer``; :class:`UnknownPlatformError` when none or several claim it."""
    if platforms is None:
        classes = {name: ep.load() for name, ep in sorted(_registered().items())}
        owners = [load_platform(name) for name, cls in classes.items() if cls.issues(issuer)]
    else:
        owners = [p for p in platforms if p.issues(issuer)]
    if len(owners) != 1:
        what = "no platform" if not owners else f"{len(owners)} platforms"
        raise UnknownPlatformError(
            f"the issuer {issuer[:80]!r} is the verifier of {what} known here"
        )
    if owners[0].insecure:
        _log.warning("INSECURE platform %s attests this token", owners[0].name)
    return owners[0]
