"""The profiles file's version 2 (one platform account per profile) and the migration of a
version-1 file, whose Google Cloud settings and mock state directory had fields of their own:
read, rewritten as version 2, nothing lost."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from sealbench.client.errors import ConfigError
from sealbench.client.registry.profiles import (
    FILE_VERSION,
    GOOGLE_PLATFORM,
    MOCK_PLATFORM,
    PlatformAccount,
    Profile,
    ProfileStore,
)

SERVER = "http://127.0.0.1:8000"
LOG_KEY = "registry.example+0a1b2c3d+AbCdEfGh"
GCP = {
    "project": "hospital-project", "project_number": "123456", "location": "europe-west4",
    "key_ring": "ring", "key": "assets", "bucket": "hosp-bucket", "bucket_location": "EU",
    "pool": "sealbench", "provider": "attestation",
    "impersonate_service_account": "owner@hospital-project.iam.gserviceaccount.com",
    "zone": "europe-west4-a",
    "service_account": "runner@hospital-project.iam.gserviceaccount.com",
    "api_endpoints": {"attestation": "https://verifier.example"},
    "machine_type": "n2d-standard-4",
}
VERSION_1 = {
    "version": 1,
    "current": "google",
    "profiles": {
        "google": {"server": SERVER, "token": "sbt_google", "mock_tee": None, "gcp": GCP,
                   "log_key": LOG_KEY, "trust_on_first_use": False,
                   "witnesses": ["w1+00000000+AAAA"]},
        "mock": {"server": SERVER, "token": "sbt_mock", "mock_tee": "/abs/mock-state",
                 "gcp": None, "log_key": None, "trust_on_first_use": True, "witnesses": []},
        "other": {"server": SERVER, "token": None, "mock_tee": None, "gcp": None,
                  "account": {"platform": "double", "settings": {"account": "lab"}},
                  "log_key": None, "trust_on_first_use": False, "witnesses": []},
        "bare": {"server": SERVER},
    },
}


def _store(tmp_path: Path) -> ProfileStore:
    return ProfileStore(tmp_path / "config", tmp_path / "data", {})


def _write(store: ProfileStore, document: object) -> None:
    store.root.mkdir(parents=True)
    store.path.write_text(json.dumps(document))
    store.path.chmod(0o600)


def test_a_version_1_file_is_read_into_one_account_per_profile(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _write(store, VERSION_1)
    profiles = dict(store.names())
    assert profiles["google"] == Profile(
        server=SERVER, token="sbt_google", log_key=LOG_KEY, witnesses=("w1+00000000+AAAA",),
        account=PlatformAccount(platform=GOOGLE_PLATFORM, settings=GCP))
    assert profiles["mock"] == Profile(
        server=SERVER, token="sbt_mock", trust_on_first_use=True,
        account=PlatformAccount(platform=MOCK_PLATFORM,
                                settings={"state_dir": "/abs/mock-state"}))
    assert profiles["other"].account == PlatformAccount(platform="double",
                                                        settings={"account": "lab"})
    assert profiles["bare"] == Profile(server=SERVER)
    assert store.current() == "google"


def test_a_version_1_file_is_rewritten_as_version_2_with_nothing_lost(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _write(store, VERSION_1)
    before = dict(store.names())
    written = json.loads(store.path.read_text())
    assert written["version"] == FILE_VERSION == 2
    assert written["current"] == "google"
    google = written["profiles"]["google"]
    assert "gcp" not in google and "mock_tee" not in google
    assert google["account"] == {"platform": GOOGLE_PLATFORM, "settings": GCP}
    assert google["token"] == "sbt_google" and google["log_key"] == LOG_KEY
    assert google["witnesses"] == ["w1+00000000+AAAA"]
    assert written["profiles"]["mock"]["account"] == {
        "platform": MOCK_PLATFORM, "settings": {"state_dir": "/abs/mock-state"}}
    assert written["profiles"]["mock"]["trust_on_first_use"] is True
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600  # it holds tokens
    # read again, the version-2 file gives the same profiles and is left as it is
    mtime = store.path.stat().st_mtime_ns
    assert dict(store.names()) == before
    assert store.path.stat().st_mtime_ns == mtime


def test_every_setting_of_the_google_account_survives(tmp_path: Path) -> None:
    from sealbench.platforms.account import load_account_platform, parse_account_settings

    store = _store(tmp_path)
    _write(store, VERSION_1)
    account = dict(store.names())["google"].account
    assert account is not None
    platform = load_account_platform(account.platform)
    settings = parse_account_settings(platform, account.settings)
    assert settings.model_dump(mode="json") == GCP


def test_a_version_1_profile_with_two_clouds_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path)
    two = {"version": 1, "profiles": {"x": {"server": SERVER, "mock_tee": "/m", "gcp": GCP}}}
    _write(store, two)
    with pytest.raises(ConfigError, match="not a valid profiles file"):
        store.names()
    assert json.loads(store.path.read_text()) == two  # left for the user to fix


def test_a_file_of_a_later_version_is_refused_not_rewritten(tmp_path: Path) -> None:
    store = _store(tmp_path)
    later = {"version": 3, "profiles": {}}
    _write(store, later)
    with pytest.raises(ConfigError, match="not a valid profiles file"):
        store.names()
    assert json.loads(store.path.read_text()) == later


def test_a_new_file_is_written_as_version_2(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.add("a", Profile(server=SERVER, account=PlatformAccount(
        platform=MOCK_PLATFORM, settings={"state_dir": "/abs/state"})))
    assert json.loads(store.path.read_text())["version"] == 2
