"""The Docker commands without the ``docker`` extra: every Docker-dependent module is imported
lazily, so ``sealbench`` itself still starts, and the Docker command says what to install
instead of failing with an import traceback."""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from sealbench.client.cli import app


def test_image_build_without_the_docker_sdk_says_to_install_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "docker", None)  # import docker -> ImportError
    monkeypatch.delitem(sys.modules, "sealbench.client.images.build", raising=False)
    result = CliRunner().invoke(app, ["image", "build"])
    assert result.exit_code == 3, result.output
    assert "Docker SDK" in result.output and "sealbench[docker]" in result.output
    assert "Traceback" not in result.output


def test_the_cli_lists_the_image_command_without_importing_docker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "docker", None)
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0 and "image" in result.output
