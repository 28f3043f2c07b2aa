"""Profiles, result keys, run records and leaderboard arithmetic: the client's local state and
pure logic, each test named after what must not happen."""

from __future__ import annotations

import re
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sealbench.client.assets.result_key import (
    init_result_key,
    load_result_key,
    load_result_private_key,
)
from sealbench.client.backends import check_tee
from sealbench.client.errors import (
    ConfigError,
    IntegrityError,
    KeyReleaseDeniedError,
    NotAvailableError,
    RunFailedError,
)
from sealbench.client.registry.profiles import Profile, ProfileStore
from sealbench.client.runs.launchers import EnclaveRunFailed
from sealbench.client.runs.outcome import translate_launch_error
from sealbench.client.runs.records import RunRecord, RunStore, new_run_id
from sealbench.crypto.sealing import public_key_digest

SERVER = "http://127.0.0.1:8000"


def _store(tmp_path: Path, **environ: str) -> ProfileStore:
    return ProfileStore(tmp_path / "config", tmp_path / "data", environ)


def test_token_is_not_in_a_profile_repr(tmp_path: Path) -> None:
    profile = Profile(server=SERVER, token="sbt_secret-value")
    assert "secret-value" not in repr(profile)
    store = _store(tmp_path)
    store.add("a", profile)
    assert "secret-value" not in repr(store.resolve("a"))


def test_profiles_file_written_0600_in_a_0700_directory(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.add("a", Profile(server=SERVER, token="t"))
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.root.stat().st_mode) == 0o700


def test_environment_overrides_the_profile(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.add("a", Profile(server=SERVER, token="file-token"))
    env_store = _store(tmp_path, SEALBENCH_SERVER="http://10.0.0.1:9000",
                       SEALBENCH_TOKEN="env-token")
    resolved = env_store.resolve()
    assert (resolved.name, resolved.server, resolved.token) == (
        "a", "http://10.0.0.1:9000", "env-token")
    assert _store(tmp_path, SEALBENCH_PROFILE="a").resolve().token == "file-token"


def test_unknown_profile_is_refused_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _store(tmp_path).resolve("nope")
    assert "profile add" in info.value.hint


def test_damaged_profiles_file_is_a_config_error(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.root.mkdir(parents=True)
    store.path.write_text('{"version": 1, "profiles": {"a": {"server": "ftp://x"}}}')
    with pytest.raises(ConfigError):
        store.resolve("a")


def test_profile_name_with_path_separator_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        _store(tmp_path).add("../evil", Profile(server=SERVER))


def test_result_key_private_file_0600_and_never_replaced_silently(tmp_path: Path) -> None:
    key = init_result_key(tmp_path / "keys")
    assert stat.S_IMODE(key.private_path.stat().st_mode) == 0o600
    with pytest.raises(ConfigError):
        init_result_key(tmp_path / "keys")
    loaded = load_result_key(tmp_path / "keys")
    assert loaded.digest == key.digest
    private = load_result_private_key(tmp_path / "keys")
    assert public_key_digest(private.public_key()) == key.digest
    replaced = init_result_key(tmp_path / "keys", force=True)
    assert replaced.digest != key.digest


def test_loose_private_key_permissions_refused(tmp_path: Path) -> None:
    key = init_result_key(tmp_path / "keys")
    key.private_path.chmod(0o644)
    with pytest.raises(ConfigError) as info:
        load_result_private_key(tmp_path / "keys")
    assert "chmod 600" in info.value.hint


def test_missing_result_key_says_keys_init(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_result_key(tmp_path)
    assert "keys init" in info.value.hint


def _record(run_id: str, status: str, model_id: int = 1) -> RunRecord:
    return RunRecord.model_validate({
        "run_id": run_id, "benchmark_id": 1, "dataset_id": 2, "model_id": model_id,
        "tee": "mock", "image_digest": "sha256:" + "0" * 64, "result_uri": "file:///tmp/x",
        "status": status, "started_at": datetime(2026, 1, 1, tzinfo=UTC),
    })


def test_run_store_finds_only_succeeded_runs_of_the_same_pair(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    store.save(_record("run-a", "failed"))
    assert store.succeeded(1, 2, 1) is None
    store.save(_record("run-b", "succeeded"))
    store.save(_record("run-c", "succeeded", model_id=7))
    found = store.succeeded(1, 2, 1)
    assert found is not None and found.run_id == "run-b"
    assert [r.run_id for r in store.all()] == ["run-a", "run-b", "run-c"]


def test_run_id_with_path_traversal_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        RunStore(tmp_path).get("../../etc/passwd")


def test_new_run_ids_are_valid_and_distinct() -> None:
    now = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
    first, second = new_run_id(now), new_run_id(now)
    assert first != second and first.startswith("run-20261202-")
    assert re.fullmatch(r"run-20261202-[0-9a-f]{8}", first)  # the day only (issue 40)


def test_enclave_exit_codes_become_actionable_errors() -> None:
    denied = translate_launch_error(EnclaveRunFailed(13, "pool refused the token", None))
    tampered = translate_launch_error(EnclaveRunFailed(14, "case failed authentication", None))
    crashed = translate_launch_error(EnclaveRunFailed(-9, "killed by signal 9", None))
    assert isinstance(denied, KeyReleaseDeniedError) and "policy sync" in denied.hint
    assert isinstance(tampered, IntegrityError) and tampered.exit_code == 8
    assert type(crashed) is RunFailedError


def test_every_tee_backend_is_available_and_an_unknown_one_is_refused() -> None:
    for backend in ("mock", "docker", "confidential-space"):
        assert check_tee(backend) == backend
    with pytest.raises(ConfigError) as info:
        check_tee("sgx")
    assert not isinstance(info.value, NotAvailableError)
    assert "confidential-space" in info.value.hint


