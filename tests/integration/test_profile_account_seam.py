"""No client module reads a profile's Google or mock settings (issue 45, STYLE "One account,
typed, per profile"): a profile holds one platform account whose settings only its platform
reads; the client asks the account (:mod:`sealbench.client.assets.accounts`: where its runs go,
its owner cloud, its VMs, what it touches) and hands the settings on unread.

Held two ways: the profile model has no field of its own for any platform (so ``profile.gcp``
cannot type-check), and every module under ``client/`` is parsed for reads of an account's
settings (``account.settings.X``, ``account.settings[...]``, ``.get`` on them) and of the
version-1 fields (``.gcp``, a profile's ``.mock_tee``); handing ``account.settings`` to the
platform is not a read."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sealbench.client
from sealbench.client.registry.profiles import PlatformAccount, Profile

CLIENT = Path(sealbench.client.__file__).resolve().parent

def _last_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _last_name(node.func)
    return ""


def _account_settings(node: ast.expr) -> bool:
    """``<something named *account*>.settings``."""
    return (isinstance(node, ast.Attribute) and node.attr == "settings"
            and "account" in _last_name(node.value).lower())


def _profileish(node: ast.expr) -> bool:
    return "profile" in _last_name(node).lower() or _last_name(node) in {"p", "known"}


def reads(source: str) -> list[str]:
    """Each read of a profile's platform settings in ``source``, as ``line: text``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        what = None
        if isinstance(node, ast.Attribute):
            if _account_settings(node.value):
                what = f"account.settings.{node.attr}"
            elif node.attr == "gcp":
                what = ".gcp"
            elif node.attr == "mock_tee" and _profileish(node.value):
                what = "profile.mock_tee"
        elif isinstance(node, ast.Subscript) and _account_settings(node.value):
            what = "account.settings[...]"
        if what is not None:
            found.append(f"{node.lineno}: {what}")
    return found


@pytest.mark.parametrize(
    "source",
    [
        "gcp = profile.profile.gcp",
        "zone = s.profile.profile.gcp.zone",
        "state = mock_tee or profile.profile.mock_tee",
        "if p.mock_tee: pass",
        "root = profile.account.settings['root']",
        "project = account.settings.project",
        "project = profile_account(profile).settings.project",
        "url = google.account.settings.get('compute')",
    ],
)
def test_the_scan_sees_each_form_of_read(source: str) -> None:
    assert reads(source)


@pytest.mark.parametrize(
    "source",
    [
        "launcher = build(account=account.settings if account else None)",
        "routes = account.routes()",
        "state = o.mock_tee",  # a command's --mock-tee option, not the profile's
        "flag = standing.mock_tee",  # the leaderboard's field
    ],
)
def test_handing_settings_on_and_options_are_not_reads(source: str) -> None:
    assert reads(source) == []


def test_a_profile_has_no_field_of_its_own_for_any_platform() -> None:
    assert set(Profile.model_fields) == {
        "server", "token", "account", "log_key", "trust_on_first_use", "witnesses"}
    assert set(PlatformAccount.model_fields) == {"platform", "settings"}


def test_no_client_module_reads_a_profiles_google_or_mock_settings() -> None:
    files = sorted(CLIENT.rglob("*.py"))
    assert files
    offenders = {}
    for path in files:
        name = path.relative_to(CLIENT).as_posix()
        if name == "assets/accounts.py":  # the account itself: hands the settings to the platform
            continue
        found = reads(path.read_text(encoding="utf-8"))
        if found:  # none allowed: the mock launchers' control endpoint is in AccountRoutes too
            offenders[name] = found
    assert offenders == {}
