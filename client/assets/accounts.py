"""A profile's platform account, typed: its platform (found by entry-point name) and its
settings parsed by that platform's own model, and the platform's answers about it (where its
runs go, its owner cloud, what it touches). The client asks these, never the settings.

The platform's adapters raise its failures as the neutral
:class:`~sealbench.platforms.errors.OwnerCloudError` and
:class:`~sealbench.platforms.errors.OwnerSettingsError`; the client asks its owner cloud (the
typed :class:`~sealbench.platforms.owner_cloud.OwnerCloud`, no proxy) inside
:func:`client_errors`, which makes them the client's errors."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from sealbench.client.errors import CloudError, ConfigError
from sealbench.client.registry.profiles import PlatformAccount, ResolvedProfile, mock_account
from sealbench.platforms.account import (
    AccountPlatform,
    AccountRoutes,
    LaunchDefaults,
    load_account_platform,
    parse_account_settings,
)
from sealbench.platforms.errors import OwnerCloudError, OwnerSettingsError
from sealbench.platforms.owner_cloud import OwnerCloud
from sealbench.platforms.platform import UnknownPlatformError

if TYPE_CHECKING:
    from sealbench.platforms.storage import BlobStore

__all__ = [
    "Account",
    "account_of",
    "client_errors",
    "owner_store",
    "profile_account",
    "require_account",
]


@contextlib.contextmanager
def client_errors() -> Iterator[None]:
    """The owner cloud's failures as the client's errors, with their message and hint:
    :class:`~sealbench.platforms.errors.OwnerSettingsError` as :class:`ConfigError` (exit 3),
    any other :class:`~sealbench.platforms.errors.OwnerCloudError` as :class:`CloudError`
    (exit 7)."""
    try:
        yield
    except OwnerSettingsError as exc:
        raise ConfigError(str(exc), hint=exc.hint) from exc
    except OwnerCloudError as exc:
        raise CloudError(str(exc), hint=exc.hint) from exc


def owner_store(cloud: OwnerCloud) -> Callable[[str], tuple[BlobStore, str]]:
    """Opens a storage URI as ``cloud``'s owner (``(store, prefix)``), its failures the
    client's errors."""

    def open_uri(uri: str) -> tuple[BlobStore, str]:
        with client_errors():
            return cloud.blob_store(uri)

    return open_uri


def _no_email() -> str:
    raise ConfigError("this account needs the registry's word on who you are",
                      hint="run the command with a registry connection")


@dataclass(frozen=True)
class Account:
    """One platform account: ``platform`` and its ``settings`` (the platform's own model,
    opaque to the client, parsed by ``platform`` itself: :func:`account_of`)."""

    platform: AccountPlatform[BaseModel]
    settings: BaseModel

    @property
    def platform_name(self) -> str:
        return self.platform.name

    def routes(self) -> AccountRoutes:
        """Where this account's runs go (token destinations, result prefix, verifier)."""
        with client_errors():
            return self.platform.account_routes(self.settings)

    def owner_cloud(self, email: Callable[[], str] = _no_email) -> OwnerCloud:
        """The owner's cloud account, as the platform builds it (its calls raise the platform's
        neutral errors: ask it inside :func:`client_errors`)."""
        with client_errors():
            return self.platform.account_owner_cloud(self.settings, email=email)

    def launch_defaults(self, cloud: OwnerCloud) -> LaunchDefaults | None:
        """What the account says about the confidential VMs its runs start (None: none)."""
        with client_errors():
            return self.platform.launch_defaults(self.settings, cloud)

    def rows(self) -> dict[str, str]:
        """What the account touches (``profile show``)."""
        with client_errors():
            return self.platform.account_rows(self.settings)


def account_of(account: PlatformAccount) -> Account:
    """The profile's ``account`` as its platform reads it; :class:`ConfigError` when the
    platform is not installed here or refuses the settings."""
    try:
        platform = load_account_platform(account.platform)
    except UnknownPlatformError as exc:
        raise ConfigError(str(exc), hint=f"install the package that provides the "
                          f"{account.platform!r} platform") from exc
    with client_errors():
        return Account(platform, parse_account_settings(platform, account.settings))


def profile_account(profile: ResolvedProfile, mock_tee: Path | None = None) -> Account | None:
    """The account a command of ``profile`` acts as: the INSECURE mock's in ``mock_tee`` when
    the command was given ``--mock-tee DIR``, else the profile's (None without one)."""
    if mock_tee is not None:
        return account_of(mock_account(mock_tee))
    stored = profile.profile.account
    return None if stored is None else account_of(stored)


def require_account(profile: ResolvedProfile, mock_tee: Path | None = None) -> Account:
    """:func:`profile_account`, or a :class:`ConfigError` saying how to add one."""
    found = profile_account(profile, mock_tee)
    if found is None:
        raise ConfigError(
            f"profile {profile.name} has no cloud configured",
            hint="add one with 'sealbench profile add NAME --server URL --cloud gcp --project P "
            "--project-number N' (Google Cloud), or '--mock-tee DIR' (the state directory of "
            "'sealbench mock-tee up')",
        )
    return found
