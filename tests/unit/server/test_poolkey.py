"""The registry's pool-release key (issue 27): made once, owner-only, reused by every process,
refused when readable by others or missing outside local mode, and never in what it logs."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from sealbench.crypto.sealing import public_key_to_raw
from sealbench.server.errors import ConfigurationError
from sealbench.server.poolkey import ensure_pool_key
from sealbench.server.settings import ServerSettings


def test_the_key_is_made_once_owner_only_and_reused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = ServerSettings(data_dir=tmp_path / "data")
    with caplog.at_level(logging.WARNING, logger="sealbench.server"):
        made = ensure_pool_key(settings, create=True)
    path = tmp_path / "data" / "pool-release.key"
    assert settings.effective_pool_key_file == path
    assert path.stat().st_mode & 0o777 == 0o600
    again = ensure_pool_key(settings, create=False)  # a second process reads the same key
    assert public_key_to_raw(again.public_key()) == public_key_to_raw(made.public_key())
    # the log names the file, never the key
    secret = path.read_text()
    assert "pool-release key" in caplog.text and secret.splitlines()[1] not in caplog.text


def test_a_missing_or_loose_key_is_refused(tmp_path: Path) -> None:
    settings = ServerSettings(data_dir=tmp_path, pool_key_file=tmp_path / "k" / "pool.key")
    with pytest.raises(ConfigurationError, match="sealbench-server init"):
        ensure_pool_key(settings, create=False)
    ensure_pool_key(settings, create=True)
    os.chmod(tmp_path / "k" / "pool.key", 0o644)
    with pytest.raises(ConfigurationError, match="0644"):
        ensure_pool_key(settings, create=True)  # never replaced by a fresh one either
