"""A platform account, typed: what a profile holds, and where that account's runs go.

Each platform declares the settings of an owner's account on it as a pydantic model of its own
(:attr:`AccountPlatform.account_settings`: Google's project, the INSECURE mock's state
directory, a third platform's names); a client profile stores them as JSON under the platform's
entry-point name and hands them back to the platform, which alone reads them. The client asks
the account, never the settings, the questions it has:

- :meth:`AccountPlatform.account_routes`: where this account's runs go (:class:`AccountRoutes`:
  the token destinations a run spec names, the result prefix, the attestation verifier, the
  control endpoint of its launchers on this machine);
- :meth:`AccountPlatform.account_owner_cloud`: the owner's cloud account
  (:class:`~sealbench.platforms.owner_cloud.OwnerCloud`);
- :meth:`AccountPlatform.launch_defaults`: what the account says about the confidential VMs
  its runs start (:class:`LaunchDefaults`: project, zone, service account, Compute endpoint);
- :meth:`AccountPlatform.account_rows`: what the account touches, for ``profile show``;
- :meth:`AccountPlatform.complete_account`: settings the platform looks up (Google's project
  number).

Errors: settings the platform cannot use raise
:class:`~sealbench.platforms.errors.OwnerSettingsError`; a failed look-up
:class:`~sealbench.platforms.errors.OwnerCloudError`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ValidationError

from sealbench.contract.spec import ServiceEndpoints
from sealbench.platforms.errors import OwnerSettingsError
from sealbench.platforms.platform import Platform, VerifierKeys, load_platform

if TYPE_CHECKING:
    from sealbench.platforms.owner_cloud import OwnerCloud

__all__ = [
    "AccountPlatform",
    "AccountRoutes",
    "LaunchDefaults",
    "SettingsT",
    "load_account_platform",
    "parse_account_settings",
]


@dataclass(frozen=True)
class AccountRoutes:
    """Where one account's runs go, as its platform answers:

    - ``token_destinations``: the STS, KMS and storage endpoints its runs' specs name (None: the
      platform's own, which a run spec must not name: Google's);
    - ``result_prefix``: where a run started from this account writes its sealed result (its
      own bucket, as the platform spells a storage URI); None when its runs hand results back
      to this machine (the INSECURE mock's);
    - ``verifier`` and ``verifier_label``: the attestation verifier its runs attest to (the
      issuer and its key set, None: found by OpenID discovery) and how to name it to a user;
    - ``key_hint``: what to check when that verifier's keys cannot be fetched;
    - ``control_url``: the control endpoint of the launchers that start its workloads on this
      machine (the INSECURE mock's process and Docker launchers); None where it has none.
    """

    token_destinations: ServiceEndpoints | None
    result_prefix: str | None
    verifier: VerifierKeys
    verifier_label: str
    key_hint: str
    control_url: str | None = None

    @property
    def results_here(self) -> bool:
        """True when runs of this account hand their results back to this machine."""
        return self.result_prefix is None


@dataclass(frozen=True)
class LaunchDefaults:
    """What an account says about the confidential VMs its runs start (the
    ``confidential-space`` backend's; the command's options override each): the project they
    run in, their zone, service account and machine type, the Compute API endpoint that starts
    them, and how often to poll them (seconds); None where the account says nothing."""

    project: str | None = None
    zone: str | None = None
    service_account: str | None = None
    machine_type: str | None = None
    api_endpoint: str | None = None
    poll_interval_s: float | None = None


#: A platform's account settings model (:attr:`AccountPlatform.account_settings`).
SettingsT = TypeVar("SettingsT", bound=BaseModel)


@runtime_checkable
class AccountPlatform(Platform, Protocol[SettingsT]):
    """A :class:`~sealbench.platforms.platform.Platform` as a client's profile meets it: the
    account settings model it declares (``SettingsT``) and the answers it gives about one
    account, each taking the settings as that model (Google's ``GcpSettings``, the mock's
    ``MockAccountSettings``). A platform found by name is an ``AccountPlatform[BaseModel]``:
    hand it only settings its own :attr:`account_settings` parsed
    (:func:`parse_account_settings`)."""

    @property
    def account_settings(self) -> type[SettingsT]:
        """The platform's account settings model (``frozen=True, extra="forbid"``)."""
        ...

    def account_routes(self, settings: SettingsT) -> AccountRoutes:
        """Where runs of the account ``settings`` go; may do I/O (the mock reads its running
        verifier's endpoints), raising :class:`OwnerSettingsError` when it cannot say."""
        ...

    def account_owner_cloud(
        self, settings: SettingsT, *, email: Callable[[], str]
    ) -> OwnerCloud:
        """The owner's cloud account the settings name
        (:class:`~sealbench.platforms.owner_cloud.OwnerCloud`), built without I/O unless a
        setting must be looked up; ``email`` gives the owner's registry email when the platform
        needs it (the mock's accounts are named by it). :class:`OwnerSettingsError` for
        settings that cannot work, :class:`~sealbench.platforms.errors.OwnerCloudError` for a
        failed look-up; its own calls raise these two only, with the fixing command as
        ``hint``."""
        ...

    def launch_defaults(self, settings: SettingsT, cloud: OwnerCloud) -> LaunchDefaults | None:
        """What the account says about the confidential VMs its runs start, ``cloud`` being
        its owner cloud (:meth:`account_owner_cloud`); None when its runs start none (the
        launch then takes no credentials or storage of the account's)."""
        ...

    def account_rows(self, settings: SettingsT) -> dict[str, str]:
        """What the account touches, ``{what: value}``, for ``profile show`` (no credentials
        needed)."""
        ...

    def complete_account(self, settings: SettingsT) -> SettingsT:
        """The settings with what the platform looks up filled in (Google: the project number,
        when it is 0); the settings themselves when nothing is missing."""
        ...


def load_account_platform(name: str) -> AccountPlatform[BaseModel]:
    """The installed platform ``name`` as an :class:`AccountPlatform`;
    :class:`~sealbench.platforms.platform.UnknownPlatformError` when none is installed, or it
    declares no account settings."""
    from sealbench.platforms.platform import UnknownPlatformError

    platform = load_platform(name)
    if not isinstance(platform, AccountPlatform):
        raise UnknownPlatformError(f"the {name!r} platform declares no account settings")
    return platform


def parse_account_settings(
    platform: AccountPlatform[SettingsT], settings: Mapping[str, object]
) -> SettingsT:
    """``settings`` (a profile's JSON) as the platform's typed model;
    :class:`OwnerSettingsError` naming the first error otherwise."""
    try:
        return platform.account_settings.model_validate(dict(settings))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "settings"
        raise OwnerSettingsError(
            f"the {platform.name} account setting {where!r} is not valid: "
            f"{str(first['msg']).removeprefix('Value error, ')}",
            hint=f"add the profile again with valid {platform.name} settings",
        ) from None
