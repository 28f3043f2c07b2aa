"""The client calls its owner cloud directly, the platform's own object (no proxy): the
adapter raises the neutral :class:`~sealbench.platforms.errors.OwnerCloudError` and
:class:`~sealbench.platforms.errors.OwnerSettingsError`, and the client's
:func:`~sealbench.client.assets.accounts.client_errors` and
:func:`~sealbench.client.assets.accounts.owner_store` make them its exit-7 and exit-3 errors,
message and hint kept (issue 45 part 1)."""

from __future__ import annotations

import pytest

from sealbench.client.assets.accounts import account_of, client_errors, owner_store
from sealbench.client.errors import CloudError, ConfigError
from sealbench.client.registry.profiles import PlatformAccount
from sealbench.gcp.owner_cloud import GcpOwnerCloud
from sealbench.platforms.errors import OwnerCloudError, OwnerSettingsError

GOOGLE = PlatformAccount(platform="confidential-space", settings={
    "project": "hospital-project", "project_number": "123", "bucket": "hosp-sealed"})


def test_the_owner_cloud_is_the_platforms_own_and_raises_its_neutral_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from google.auth.credentials import AnonymousCredentials

    monkeypatch.setattr("sealbench.gcp.owner_cloud.gcp_credentials",
                        lambda impersonate=None: AnonymousCredentials())
    cloud = account_of(GOOGLE).owner_cloud()
    assert type(cloud) is GcpOwnerCloud
    with pytest.raises(OwnerSettingsError) as neutral:
        cloud.blob_store("s3://hosp-sealed/datasets/1")
    assert neutral.value.hint == "use --storage gs://BUCKET/PREFIX"
    with pytest.raises(ConfigError) as shown:
        owner_store(cloud)("s3://hosp-sealed/datasets/1")
    assert (str(shown.value), shown.value.hint, shown.value.exit_code) == (
        str(neutral.value), neutral.value.hint, 3)
    store, prefix = owner_store(cloud)("gs://hosp-sealed/results/run-1")
    assert type(store).__name__ == "GcsBlobStore" and prefix.rstrip("/") == "results/run-1"


def test_a_failed_cloud_call_is_the_clients_cloud_error_with_its_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import google.auth
    from google.auth import exceptions as auth_exc

    def no_adc(**_: object) -> object:
        raise auth_exc.DefaultCredentialsError("none here")

    monkeypatch.setattr(google.auth, "default", no_adc)
    cloud = account_of(GOOGLE).owner_cloud()
    with pytest.raises(OwnerCloudError, match="no Google Cloud credentials found"):
        cloud.credentials()
    with pytest.raises(CloudError, match="no Google Cloud credentials found") as shown, \
            client_errors():
        cloud.credentials()
    assert shown.value.exit_code == 7
    assert shown.value.hint is not None and "application-default login" in shown.value.hint
