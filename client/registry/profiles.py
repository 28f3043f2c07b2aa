"""Profiles: which registry to talk to, as whom, and which platform account this user's
cloud is.

Stored in the user's config directory (``platformdirs`` XDG path, or ``$SEALBENCH_CONFIG_DIR``)
as ``profiles.json`` (version 2), written atomically with mode 0600 because it holds API tokens;
the directory is 0700. Per-profile secrets (the HPKE result key) live in
``profiles/<name>/`` beside it; run records and sealing state in the data directory
(``$SEALBENCH_DATA_DIR``, else ``<config dir>/data`` when the config dir is overridden, else the
XDG data dir). ``$SEALBENCH_PROFILE`` picks a profile, and ``$SEALBENCH_SERVER`` /
``$SEALBENCH_TOKEN`` override the chosen profile's server and token (for CI, where there may be
no profile file at all).

``profiles.json``::

    {"version": 2, "current": "hospital-a",
     "profiles": {"hospital-a": {"server": "http://127.0.0.1:8000", "token": "…",
                                 "account": {"platform": "<entry-point name>",
                                             "settings": {…}} | null,
                                 "log_key": "<origin>+<key id>+<key>" | null,
                                 "trust_on_first_use": false,
                                 "witnesses": ["<name>+<key id>+<key>", ...]}}}

``account`` (:class:`PlatformAccount`) is the user's account on one installed TEE platform:
its settings (JSON) are the platform's own typed model, which only the platform reads
(:mod:`sealbench.platforms.account`): Google Cloud's names a project and what sealbench touches
in it, the mock's its state directory; never credentials.

Version 1 held Google Cloud's settings and the mock's state directory in fields of their own
(``"gcp": {…}``, ``"mock_tee": "/abs/state/dir"``, at most one of them or ``account``); a
version-1 file is migrated when read (``gcp`` → ``{"platform": "confidential-space",
"settings": {…}}``, ``mock_tee`` → ``{"platform": "insecure-mock", "settings": {"state_dir":
…}}``, every other field as it was) and written back as version 2.

``log_key`` is the registry's transparency-log key (C2SP verifier key), given out of band when
the profile is added (``--log-key``, from the registry's operator: ``sealbench-server key
show``); ``trust_on_first_use`` records that the user chose instead to pin the key the registry
publishes when first asked. A profile with neither refuses every check of the log.
``witnesses`` are the cosigners whose cosignature each checkpoint must carry.
The last checkpoint this profile verified lives in ``profiles/<name>/log/``
(:mod:`sealbench.client.registry.transparency`).
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

import platformdirs
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    field_validator,
)

from sealbench.client.errors import ConfigError
from sealbench.crypto.files import write_private

__all__ = [
    "ENV_CONFIG_DIR",
    "ENV_DATA_DIR",
    "ENV_PROFILE",
    "ENV_SERVER",
    "ENV_TOKEN",
    "FILE_VERSION",
    "GOOGLE_PLATFORM",
    "MOCK_PLATFORM",
    "PROFILES_FILE",
    "PlatformAccount",
    "Profile",
    "ProfileStore",
    "ResolvedProfile",
    "config_dir",
    "data_dir",
    "mock_account",
    "registry_url",
    "unknown_profile",
]

ENV_CONFIG_DIR: Final = "SEALBENCH_CONFIG_DIR"
ENV_DATA_DIR: Final = "SEALBENCH_DATA_DIR"
ENV_PROFILE: Final = "SEALBENCH_PROFILE"
ENV_SERVER: Final = "SEALBENCH_SERVER"
ENV_TOKEN: Final = "SEALBENCH_TOKEN"  # noqa: S105 - a variable name
PROFILES_FILE: Final = "profiles.json"
log = logging.getLogger("sealbench.client")
_ENV_PROFILE_NAME: Final = "env"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_URL = re.compile(r"^https?://[^\s/]+(/[^\s]*)?$")
_MAX_FILE = 1 << 20
_SETTING_KEY = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
#: The entry-point names of the two platforms whose accounts version 1 of the profiles file held
#: in fields of their own (``gcp``, ``mock_tee``); migrated into :class:`PlatformAccount`.
GOOGLE_PLATFORM: Final = "confidential-space"
MOCK_PLATFORM: Final = "insecure-mock"
#: The profiles file's version (2: one platform account per profile).
FILE_VERSION: Final = 2


def registry_url(text: str) -> str:
    """The registry root URL ``text`` names (trailing slash dropped); ``ValueError`` saying what
    is wrong: no ``http://``/``https://`` scheme, spaces, or an API path instead of the root."""
    url = text.strip().rstrip("/")
    if not re.match(r"^https?://", url):
        local = re.match(r"^(localhost|127\.0\.0\.1|\[::1\])(:|/|$)", url)
        scheme = "http" if local else "https"
        raise ValueError(
            f"{text[:80]!r} needs http:// or https:// in front (e.g. {scheme}://{text[:40]}"
            + (", as a server on this machine, like the demo's, speaks plain HTTP)"
               if local else ")")
        )
    if not _URL.match(url):
        raise ValueError(f"{text[:80]!r} is not a URL")
    for path, what in ((r"/api(/v[0-9]+)?(/.*)?$", "the API"), (r"/ui(/.*)?$", "its dashboard")):
        if re.search(path, url):
            root = re.sub(path, "", url)
            raise ValueError(
                f"{text[:80]!r} does not look like a registry root (it names {what}); "
                f"use {root}"
            )
    return url


def unknown_profile(name: str | None, known: Iterable[str]) -> ConfigError:
    """The error for a profile name that is not configured: the closest names, or the list."""
    names = sorted(known)
    if not names:
        return ConfigError(
            f"no profile named {name!r}: none is configured",
            hint="add one with 'sealbench profile add NAME --server URL --token TOKEN'",
        )
    close = difflib.get_close_matches(name or "", names, n=3, cutoff=0.6)
    if close:
        return ConfigError(f"no profile named {name!r}; did you mean {' or '.join(close)}?",
                           hint=f"profiles: {', '.join(names[:12])}"
                                + (" ..." if len(names) > 12 else ""))
    return ConfigError(f"no profile named {name!r}",
                       hint=f"profiles: {', '.join(names[:12])}"
                            + (" ..." if len(names) > 12 else "")
                            + "; 'sealbench profile add NAME ...' adds one")


def config_dir(environ: Mapping[str, str] = os.environ) -> Path:
    override = environ.get(ENV_CONFIG_DIR)
    return Path(override) if override else Path(platformdirs.user_config_dir("sealbench"))


def data_dir(environ: Mapping[str, str] = os.environ) -> Path:
    if environ.get(ENV_DATA_DIR):
        return Path(environ[ENV_DATA_DIR])
    if environ.get(ENV_CONFIG_DIR):
        return Path(environ[ENV_CONFIG_DIR]) / "data"
    return Path(platformdirs.user_data_dir("sealbench"))


class PlatformAccount(BaseModel):
    """The owner's account on one installed TEE platform: the platform's entry-point name
    (``confidential-space``, ``insecure-mock`` or another installed one) and its settings as
    JSON, which only that platform reads, as its typed model
    (:attr:`~sealbench.platforms.account.AccountPlatform.account_settings`: Google's
    ``GcpSettings``, the mock's state directory, ...). Settings name resources, never
    credentials (a profile is not a secret store)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    platform: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,39}$")
    settings: dict[str, JsonValue] = Field(default_factory=dict, max_length=32)

    @field_validator("settings")
    @classmethod
    def _plain_settings(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        for key, item in value.items():
            if not _SETTING_KEY.match(key):
                raise ValueError(f"setting {key[:40]!r} is not a lower-case identifier")
            if len(json.dumps(item)) > 4096:
                raise ValueError(f"setting {key}: longer than 4096 characters")
        return value


def mock_account(state_dir: Path) -> PlatformAccount:
    """An account in the INSECURE mock cloud running in ``state_dir`` (``--mock-tee DIR``,
    sugar for the mock platform's settings)."""
    return PlatformAccount(platform=MOCK_PLATFORM, settings={"state_dir": str(state_dir)})


class Profile(BaseModel):
    """One registry account. ``token`` is a secret: it is excluded from ``repr``. Its cloud is
    one platform ``account`` (or none)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    server: str = Field(pattern=_URL.pattern, max_length=512)
    token: str | None = Field(default=None, repr=False, max_length=8192)
    account: PlatformAccount | None = None
    log_key: str | None = Field(default=None, max_length=400)
    #: The user chose (``profile add --trust-on-first-use``) to pin whatever log key the
    #: registry publishes when first asked, instead of a key given out of band; kept after the
    #: key is pinned, so that ``profile show`` and ``audit verify`` can say so.
    trust_on_first_use: bool = False
    witnesses: tuple[str, ...] = Field(default=(), max_length=32)


class _File(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[2] = FILE_VERSION
    current: str | None = None
    profiles: dict[str, Profile] = Field(default_factory=dict)


def _migrated_profile(old: object) -> object:
    """A version-1 profile entry in version 2's shape: its ``gcp`` settings and its
    ``mock_tee`` state directory become the one ``account`` (a version-1 entry had at most one
    cloud); every other field as it was."""
    if not isinstance(old, dict):
        return old  # validation says what is wrong
    entry = dict(old)
    gcp, mock_tee = entry.pop("gcp", None), entry.pop("mock_tee", None)
    accounts = [a for a in (
        None if gcp is None else {"platform": GOOGLE_PLATFORM, "settings": gcp},
        None if mock_tee is None else {"platform": MOCK_PLATFORM,
                                       "settings": {"state_dir": mock_tee}},
        entry.get("account"),
    ) if a is not None]
    if len(accounts) > 1:
        raise ValueError("a profile uses one cloud: the mock TEE, Google Cloud or another "
                         "installed platform's account")
    entry["account"] = accounts[0] if accounts else None
    return entry


def _migrated(document: object) -> object:
    """A version-1 profiles file (``gcp`` and ``mock_tee`` fields of their own) as version 2;
    any other document as it is."""
    if not isinstance(document, dict) or document.get("version", 1) != 1:
        return document
    profiles = document.get("profiles", {})
    if not isinstance(profiles, dict):
        return document
    return {**document, "version": FILE_VERSION,
            "profiles": {name: _migrated_profile(p) for name, p in profiles.items()}}


@dataclass(frozen=True)
class ResolvedProfile:
    """The profile a command runs as, after environment overrides."""

    name: str
    profile: Profile
    secrets_dir: Path = field(repr=False)
    data_dir: Path = field(repr=False)

    @property
    def server(self) -> str:
        return self.profile.server

    @property
    def token(self) -> str | None:
        return self.profile.token


def _check_name(name: str) -> str:
    if not _NAME.match(name):
        raise ConfigError(
            f"profile name {name[:70]!r} is not allowed",
            hint="use letters, digits, '.', '_' or '-' (at most 64 characters)",
        )
    return name


class ProfileStore:
    """Reads and writes ``profiles.json`` in ``root``; ``environ`` supplies the overrides."""

    def __init__(self, root: Path, data_root: Path, environ: Mapping[str, str]) -> None:
        self.root = root
        self.data_root = data_root
        self._environ = environ

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> ProfileStore:
        return cls(config_dir(environ), data_dir(environ), environ)

    @property
    def path(self) -> Path:
        return self.root / PROFILES_FILE

    def _load(self) -> _File:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return _File()
        except OSError as exc:
            raise ConfigError(f"cannot read {self.path}: {exc.strerror}") from exc
        if len(raw) > _MAX_FILE:
            raise ConfigError(f"{self.path} is larger than {_MAX_FILE} bytes")
        try:
            document = json.loads(raw)
            content = _File.model_validate(_migrated(document))
        except (ValueError, ValidationError) as exc:
            count = exc.error_count() if isinstance(exc, ValidationError) else 1
            raise ConfigError(
                f"{self.path} is not a valid profiles file ({count} errors)",
                hint=f"fix or remove {self.path} and add the profiles again",
            ) from exc
        if isinstance(document, dict) and document.get("version", 1) != FILE_VERSION:
            self._rewrite(content, document.get("version", 1))
        return content

    def _rewrite(self, content: _File, old_version: object) -> None:
        """Write a file read in an older version back in this one (nothing lost: the
        migration only moves fields); a file that cannot be written is used as read."""
        try:
            self._save(content)
        except OSError as exc:
            log.warning("read %s (version %s) but could not rewrite it as version %d: %s",
                        self.path, old_version, FILE_VERSION, exc.strerror)
        else:
            log.info("rewrote %s from version %s to version %d", self.path, old_version,
                     FILE_VERSION)

    def _save(self, content: _File) -> None:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        data = json.dumps(content.model_dump(mode="json"), indent=2, sort_keys=True).encode()
        write_private(self.path, data + b"\n")

    def names(self) -> tuple[tuple[str, Profile], ...]:
        return tuple(sorted(self._load().profiles.items()))

    def current(self) -> str | None:
        return self._load().current

    def add(self, name: str, profile: Profile, *, make_current: bool = True) -> None:
        content = self._load()
        profiles = {**content.profiles, _check_name(name): profile}
        current = name if make_current or content.current is None else content.current
        self._save(_File(current=current, profiles=profiles))

    def update(self, name: str, **changes: object) -> Profile:
        content = self._load()
        if name not in content.profiles:
            raise unknown_profile(name, content.profiles)
        updated = Profile.model_validate({**content.profiles[name].model_dump(), **changes})
        self._save(_File(current=content.current, profiles={**content.profiles, name: updated}))
        return updated

    def use(self, name: str) -> None:
        content = self._load()
        if name not in content.profiles:
            raise unknown_profile(name, content.profiles)
        self._save(_File(current=name, profiles=content.profiles))

    def remove(self, name: str) -> None:
        content = self._load()
        if name not in content.profiles:
            raise unknown_profile(name, content.profiles)
        profiles = {k: v for k, v in content.profiles.items() if k != name}
        current = content.current if content.current != name else None
        self._save(_File(current=current, profiles=profiles))

    def secrets_dir(self, name: str) -> Path:
        return self.root / "profiles" / _check_name(name)

    def resolve(self, name: str | None = None) -> ResolvedProfile:
        """The profile to run as: ``name``, else ``$SEALBENCH_PROFILE``, else the current one,
        with ``$SEALBENCH_SERVER`` and ``$SEALBENCH_TOKEN`` applied on top. With no profile
        at all, the two variables alone make an ephemeral profile called ``env``."""
        content = self._load()
        chosen = name or self._environ.get(ENV_PROFILE) or content.current
        server = self._environ.get(ENV_SERVER)
        token = self._environ.get(ENV_TOKEN)
        if chosen is not None and chosen in content.profiles:
            base = content.profiles[chosen]
        elif chosen is not None and chosen != _ENV_PROFILE_NAME:
            raise unknown_profile(chosen, content.profiles)
        elif server:
            chosen = _ENV_PROFILE_NAME
            base = Profile(server=server)
        else:
            raise ConfigError(
                "no profile is configured",
                hint="run 'sealbench profile add NAME --server URL --token TOKEN' "
                f"(or set {ENV_SERVER} and {ENV_TOKEN})",
            )
        overrides: dict[str, object] = {}
        if server:
            overrides["server"] = server
        if token:
            overrides["token"] = token
        try:
            profile = Profile.model_validate({**base.model_dump(), **overrides})
        except ValidationError as exc:
            raise ConfigError(f"{ENV_SERVER} is not an http(s) URL") from exc
        _check_name(chosen)
        return ResolvedProfile(
            name=chosen,
            profile=profile,
            secrets_dir=self.secrets_dir(chosen),
            data_dir=self.data_root / "profiles" / chosen,
        )
