"""Each shipped platform's answers about one account (``sealbench.platforms.account``): its
settings model, where its runs go (:class:`AccountRoutes`) and what it says of its VMs
(:class:`LaunchDefaults`), from the settings alone, with no cloud call."""

from __future__ import annotations

from pathlib import Path

import pytest

from sealbench.platforms.account import (
    AccountPlatform,
    load_account_platform,
    parse_account_settings,
)
from sealbench.platforms.errors import OwnerSettingsError

GOOGLE = {"project": "hospital-project", "project_number": "123", "bucket": "hosp-sealed",
          "zone": "europe-west4-a",
          "service_account": "runner@hospital-project.iam.gserviceaccount.com"}


@pytest.fixture
def google() -> AccountPlatform:
    return load_account_platform("confidential-space")


def test_both_shipped_platforms_declare_their_account_settings() -> None:
    for name in ("confidential-space", "insecure-mock"):
        platform = load_account_platform(name)
        assert platform.account_settings.model_config.get("extra") == "forbid"
        assert platform.account_settings.model_config.get("frozen") is True


def test_a_google_account_runs_on_googles_endpoints_into_its_bucket(
    google: AccountPlatform,
) -> None:
    settings = parse_account_settings(google, GOOGLE)
    routes = google.account_routes(settings)
    assert routes.token_destinations is None  # Google's own: a run spec must not name them
    assert routes.result_prefix == "gs://hosp-sealed/results"
    assert not routes.results_here
    assert routes.verifier == google.verifier
    assert routes.verifier_label == "Google's Confidential Space verifier"


def test_a_google_account_with_overrides_pins_them_and_names_its_verifier(
    google: AccountPlatform,
) -> None:
    settings = parse_account_settings(google, {**GOOGLE, "api_endpoints": {
        "sts": "https://sts.private.example/v1/token", "attestation": "https://verifier.example/",
        "compute": "https://compute.private.example"}})
    routes = google.account_routes(settings)
    assert routes.token_destinations is not None
    assert routes.token_destinations.sts_url == "https://sts.private.example/v1/token"
    assert routes.verifier.issuer == "https://verifier.example"
    assert routes.verifier.jwks_url is None  # found by OpenID discovery
    assert routes.verifier_label == "the attestation verifier your profile names"
    vms = google.launch_defaults(settings, None)  # type: ignore[arg-type]
    assert vms is not None
    assert (vms.project, vms.zone, vms.service_account, vms.api_endpoint) == (
        "hospital-project", "europe-west4-a", GOOGLE["service_account"],
        "https://compute.private.example")


def test_a_google_setting_it_cannot_use_is_refused_naming_it(google: AccountPlatform) -> None:
    with pytest.raises(OwnerSettingsError, match="setting 'zone' is not valid"):
        parse_account_settings(google, {**GOOGLE, "zone": "Europe West"})
    with pytest.raises(OwnerSettingsError, match="setting 'vault' is not valid"):
        parse_account_settings(google, {**GOOGLE, "vault": "x"})


def test_a_mock_account_without_a_running_mock_says_how_to_start_one(tmp_path: Path) -> None:
    mock = load_account_platform("insecure-mock")
    settings = parse_account_settings(mock, {"state_dir": str(tmp_path)})
    with pytest.raises(OwnerSettingsError, match=f"no running mock TEE found in {tmp_path}"):
        mock.account_routes(settings)
    assert mock.account_rows(settings) == {"cloud": f"INSECURE mock TEE in {tmp_path}"}


def test_googles_launch_options_fill_from_the_account_and_name_what_is_missing(
    google: AccountPlatform,
) -> None:
    from sealbench.platforms.account import LaunchDefaults
    from sealbench.platforms.launcher import LaunchSettingsError

    options = google.launch_options
    assert options is not None and options.model_config.get("extra") == "forbid"
    checked: list[tuple[str, bool]] = []
    common = {"image_reference": lambda: "europe-docker.pkg.dev/p/r/eval@sha256:" + "a" * 64,
              "check_image": lambda ref, gpu: checked.append((ref, gpu)), "debug": False,
              "credentials": None, "result_store": None}
    with pytest.raises(LaunchSettingsError, match="needs --project, --service-account"):
        google.launcher("confidential-space", launch=options(zone="europe-west4-a"),
                        defaults=LaunchDefaults(), **common)
    assert checked == [("europe-docker.pkg.dev/p/r/eval@sha256:" + "a" * 64, False)]
    launcher = google.launcher(
        "confidential-space", launch=options(accelerator="nvidia-h100-80gb"),
        defaults=LaunchDefaults(project="hospital-project", zone="us-central1-a",
                                service_account=GOOGLE["service_account"],
                                api_endpoint="http://127.0.0.1:9"), **common)
    settings = launcher.settings  # type: ignore[attr-defined]
    assert (settings.project, settings.zone, settings.tee) == (
        "hospital-project", "us-central1-a", "TDX")  # a confidential GPU is TDX
    assert checked[-1][1] is True


def test_a_mock_accounts_routes_name_its_running_control_endpoint(tmp_path: Path) -> None:
    """The mock's process and Docker launchers are driven through the running mock's control
    endpoint: its account's routes name it (from ``endpoints.json``), Google's name none."""
    import json

    from sealbench.mocktee.server import ENDPOINTS_FILE, MockEndpoints, MockPorts

    running = MockEndpoints(
        "http://127.0.0.1:9100", "http://127.0.0.1:9100/jwks", "http://127.0.0.1:9101/v1/token",
        "http://127.0.0.1:9102", "http://127.0.0.1:9103", "http://127.0.0.1:9104",
        "http://127.0.0.1:9105", MockPorts())
    (tmp_path / ENDPOINTS_FILE).write_text(json.dumps(running.to_json()))
    mock = load_account_platform("insecure-mock")
    routes = mock.account_routes(parse_account_settings(mock, {"state_dir": str(tmp_path)}))
    assert routes.control_url == "http://127.0.0.1:9105"
    assert routes.results_here and routes.token_destinations == running.service_endpoints()
    google = load_account_platform("confidential-space")
    assert google.account_routes(parse_account_settings(google, GOOGLE)).control_url is None
