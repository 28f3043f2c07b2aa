"""Profiles: which registry to talk to, as whom, and where this user's mock cloud lives.

Stored in the user's config directory (``platformdirs`` XDG path, or ``$SEALBENCH_CONFIG_DIR``)
as ``profiles.json`` (version 1), written atomically with mode 0600 because it holds API tokens;
the directory is 0700. Per-profile secrets (the HPKE result key) live in
``profiles/<name>/`` beside it; run records and sealing state in the data directory
(``$SEALBENCH_DATA_DIR``, else ``<config dir>/data`` when the config dir is overridden, else the
XDG data dir). ``$SEALBENCH_PROFILE`` picks a profile, and ``$SEALBENCH_SERVER`` /
``$SEALBENCH_TOKEN`` override the chosen profile's server and token (for CI, where there may be
no profile file at all).

``profiles.json``::

    {"version": 1, "current": "hospital-a",
     "profiles": {"hospital-a": {"server": "http://127.0.0.1:8000", "token": "…",
                                 "mock_tee": "/abs/state/dir" | null,
                                 "gcp": {"project": "…", "project_number": "…", …} | null,
                                 "log_key": "<origin>+<key id>+<key>" | null,
                                 "trust_on_first_use": false,
                                 "witnesses": ["<name>+<key id>+<key>", ...]}}}

``gcp`` (:class:`GcpSettings`) names a Google Cloud project and what sealbench touches in it,
never credentials; a profile has ``mock_tee`` or ``gcp``, not both.

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
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import platformdirs
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from sealbench.client.errors import ConfigError
from sealbench.crypto.files import write_private

__all__ = [
    "API_ENDPOINT_NAMES",
    "ENV_CONFIG_DIR",
    "ENV_DATA_DIR",
    "ENV_PROFILE",
    "ENV_SERVER",
    "ENV_TOKEN",
    "PROFILES_FILE",
    "GcpSettings",
    "PlatformAccount",
    "Profile",
    "ProfileStore",
    "ResolvedProfile",
    "config_dir",
    "data_dir",
    "registry_url",
    "unknown_profile",
]

ENV_CONFIG_DIR: Final = "SEALBENCH_CONFIG_DIR"
ENV_DATA_DIR: Final = "SEALBENCH_DATA_DIR"
ENV_PROFILE: Final = "SEALBENCH_PROFILE"
ENV_SERVER: Final = "SEALBENCH_SERVER"
ENV_TOKEN: Final = "SEALBENCH_TOKEN"  # noqa: S105 - a variable name
PROFILES_FILE: Final = "profiles.json"
_ENV_PROFILE_NAME: Final = "env"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_URL = re.compile(r"^https?://[^\s/]+(/[^\s]*)?$")
_MAX_FILE = 1 << 20
_SETTING_KEY = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
#: The Google APIs whose endpoint a profile may override (``--api-endpoint NAME=URL``).
API_ENDPOINT_NAMES: Final = (
    "kms", "storage", "iam", "sts", "compute", "serviceusage", "cloudresourcemanager",
    "attestation", "artifactregistry",
)
_ENDPOINT = re.compile(
    r"^(https://[A-Za-z0-9.-]+(:[0-9]{1,5})?|http://127\.0\.0\.1:[0-9]{1,5})(/[^\s@?#]*)?$"
)


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


class GcpSettings(BaseModel):
    """An owner's Google Cloud project as a profile names it: what ``seal``, ``policy sync``,
    ``run --tee confidential-space`` and ``result fetch`` touch (each overridable per command).
    Credentials are never stored: Application Default Credentials, optionally impersonating
    ``impersonate_service_account``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    project: str = Field(pattern=r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
    project_number: str = Field(pattern=r"^[0-9]{1,20}$")
    location: str = Field(default="global", pattern=r"^[a-z0-9-]{1,63}$")
    key_ring: str = Field(default="sealbench", pattern=r"^[A-Za-z0-9_-]{1,63}$")
    key: str = Field(default="assets", pattern=r"^[A-Za-z0-9_-]{1,63}$")
    bucket: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
    #: Where a bucket sealbench creates lives (``EU``, ``europe-west4``, ...): required to
    #: create one, since Google's default is the US multi-region, a data-residency question
    #: each owner answers for itself.
    bucket_location: str | None = Field(default=None, pattern=r"^[A-Za-z0-9-]{2,40}$")
    pool: str = Field(default="sealbench", pattern=r"^[a-z0-9-]{4,32}$")
    provider: str = Field(default="attestation", pattern=r"^[a-z0-9-]{4,32}$")
    impersonate_service_account: str | None = Field(
        default=None, pattern=r"^[a-z0-9-]+@[a-z0-9-]+\.iam\.gserviceaccount\.com$"
    )
    zone: str | None = Field(default=None, pattern=r"^[a-z]+-[a-z]+[0-9]-[a-z]$")
    service_account: str | None = Field(
        default=None, pattern=r"^[a-z0-9-]+@[a-z0-9.-]+\.gserviceaccount\.com$"
    )
    #: Endpoint overrides, ``{API name: URL}`` (:data:`API_ENDPOINT_NAMES`): private or
    #: regional endpoints, or a test stand-in. Overriding ``sts``, ``kms`` or ``storage`` makes
    #: the key-release policy pin them; ``attestation`` replaces Google's attestation verifier
    #: as the issuer the pool trusts.
    api_endpoints: dict[str, str] = Field(default_factory=dict, max_length=16)
    #: The machine type doctor checks the CPU quota for (what ``run`` starts by default).
    machine_type: str = Field(default="n2d-standard-2", pattern=r"^[a-z0-9]+-[a-z]+-[0-9]+$")

    @field_validator("api_endpoints")
    @classmethod
    def _known_endpoints(cls, value: dict[str, str]) -> dict[str, str]:
        for name, url in value.items():
            if name not in API_ENDPOINT_NAMES:
                raise ValueError(
                    f"unknown API {name[:40]!r}; known: {', '.join(API_ENDPOINT_NAMES)}"
                )
            if not _ENDPOINT.match(url):
                raise ValueError(
                    f"{name}: {url[:80]!r} is not an https URL (or http on 127.0.0.1)"
                )
        return value


class PlatformAccount(BaseModel):
    """The owner's account on an installed platform that this version does not ship (Google
    Cloud has :class:`GcpSettings`, the mock a state directory): the platform's entry-point name
    and its settings as that platform documents them, handed as they are to its
    :meth:`~sealbench.platforms.platform.Platform.owner_cloud` and to its launchers. Settings
    name resources, never credentials (a profile is not a secret store)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    platform: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,39}$")
    settings: dict[str, str] = Field(default_factory=dict, max_length=32)

    @field_validator("settings")
    @classmethod
    def _plain_settings(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            if not _SETTING_KEY.match(key):
                raise ValueError(f"setting {key[:40]!r} is not a lower-case identifier")
            if len(item) > 1024:
                raise ValueError(f"setting {key}: longer than 1024 characters")
        return value


class Profile(BaseModel):
    """One registry account. ``token`` is a secret: it is excluded from ``repr``. Its cloud is
    the INSECURE mock (``mock_tee``, a state directory), Google Cloud (``gcp``) or another
    installed platform (``account``): one at most."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    server: str = Field(pattern=_URL.pattern, max_length=512)
    token: str | None = Field(default=None, repr=False, max_length=8192)
    mock_tee: Path | None = None
    gcp: GcpSettings | None = None
    account: PlatformAccount | None = None
    log_key: str | None = Field(default=None, max_length=400)
    #: The user chose (``profile add --trust-on-first-use``) to pin whatever log key the
    #: registry publishes when first asked, instead of a key given out of band; kept after the
    #: key is pinned, so that ``profile show`` and ``audit verify`` can say so.
    trust_on_first_use: bool = False
    witnesses: tuple[str, ...] = Field(default=(), max_length=32)

    @model_validator(mode="after")
    def _one_cloud(self) -> Profile:
        clouds = [self.mock_tee is not None, self.gcp is not None, self.account is not None]
        if sum(clouds) > 1:
            raise ValueError("a profile uses one cloud: the mock TEE, Google Cloud or another "
                             "installed platform's account")
        return self


class _File(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = 1
    current: str | None = None
    profiles: dict[str, Profile] = Field(default_factory=dict)


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
            return _File.model_validate_json(raw)
        except ValidationError as exc:
            raise ConfigError(
                f"{self.path} is not a valid profiles file ({exc.error_count()} errors)",
                hint=f"fix or remove {self.path} and add the profiles again",
            ) from exc

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
