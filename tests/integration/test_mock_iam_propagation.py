"""The mock with Google's IAM propagation delay switched on (a few seconds here, "typically 2
minutes" at Google): a fresh grant on a KMS key or bucket is refused until the delay has passed,
and a revoked one keeps working until then, through Google's own client libraries. A mock that
applied policies at once (the fast suite's default, ``iam_propagation_s=0``) fails each test."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from google.api_core import exceptions as gexc
from google.oauth2.credentials import Credentials

from sealbench.gcp.gcs import GcsBlobStore, make_storage_client
from sealbench.gcp.kms import make_kms_client
from sealbench.mocktee.provision import OwnerSetup, provision_owner
from sealbench.mocktee.server import MockCloud
from sealbench.platforms.errors import StorageAccessDenied

DELAY_S = 3.0
MEMBER = "user:late-grant@example.org"
DECRYPTER = "roles/cloudkms.cryptoKeyDecrypter"


@pytest.fixture(scope="module")
def mock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MockCloud, OwnerSetup]]:
    state = tmp_path_factory.mktemp("iam-propagation") / "state"
    with MockCloud(state, iam_propagation_s=DELAY_S) as cloud:
        owner = provision_owner(
            cloud.endpoints, email="owner@example.org", project_id="propagation",
            project_number="710000000071", bucket="propagation-bucket",
        )
        yield cloud, owner


def _eventually(action: Callable[[], Any], since: float, limit: float = DELAY_S + 5) -> float:
    """Seconds after ``since`` at which ``action`` first succeeded (polled every 0.2 s)."""
    while True:
        try:
            action()
            return time.monotonic() - since
        except (gexc.Forbidden, StorageAccessDenied):
            if time.monotonic() - since > limit:
                raise
            time.sleep(0.2)


def _until_refused(action: Callable[[], Any], since: float, limit: float = DELAY_S + 5) -> float:
    while True:
        try:
            action()
        except (gexc.Forbidden, StorageAccessDenied):
            return time.monotonic() - since
        if time.monotonic() - since > limit:
            raise AssertionError("the revoked grant still works after the delay")
        time.sleep(0.2)


def test_kms_grant_applies_after_the_delay_and_a_revocation_too(
    mock: tuple[MockCloud, OwnerSetup],
) -> None:
    cloud, owner = mock
    admin = make_kms_client(Credentials(owner.access_token), cloud.endpoints.kms)
    ciphertext = admin.encrypt(request={"name": owner.key_name, "plaintext": b"dek"}).ciphertext
    member = make_kms_client(Credentials(cloud.owner_token(MEMBER)), cloud.endpoints.kms)

    def decrypt() -> bytes:
        return bytes(member.decrypt(
            request={"name": owner.key_name, "ciphertext": ciphertext}
        ).plaintext)

    policy = admin.get_iam_policy(request={"resource": owner.key_name})
    policy.bindings.add(role=DECRYPTER, members=[MEMBER])
    granted = time.monotonic()  # before the write: the mock times the change after this
    admin.set_iam_policy(request={"resource": owner.key_name, "policy": policy})
    # The new policy reads back at once, as Google's does; it is not in effect yet.
    read = admin.get_iam_policy(request={"resource": owner.key_name})
    assert any(b.role == DECRYPTER and MEMBER in b.members for b in read.bindings)
    with pytest.raises(gexc.Forbidden):
        decrypt()
    assert time.monotonic() - granted < DELAY_S  # the refusal came within the window
    assert _eventually(decrypt, granted) >= DELAY_S
    assert decrypt() == b"dek"

    current = admin.get_iam_policy(request={"resource": owner.key_name})
    del current.bindings[:]
    revoked = time.monotonic()
    admin.set_iam_policy(request={"resource": owner.key_name, "policy": current})
    assert decrypt() == b"dek"  # the revocation has not propagated yet
    assert time.monotonic() - revoked < DELAY_S
    assert _until_refused(decrypt, revoked) >= DELAY_S


def test_bucket_grant_applies_after_the_delay(mock: tuple[MockCloud, OwnerSetup]) -> None:
    cloud, owner = mock
    owner_store = GcsBlobStore(
        make_storage_client(owner.project_id, Credentials(owner.access_token),
                            cloud.endpoints.storage),
        owner.bucket,
    )
    owner_store.put_bytes("late.sealed", b"ciphertext")
    reader = GcsBlobStore(
        make_storage_client(owner.project_id, Credentials(cloud.owner_token(MEMBER)),
                            cloud.endpoints.storage),
        owner.bucket,
    )
    url = f"{cloud.endpoints.storage}/storage/v1/b/{owner.bucket}/iam"
    headers = {"Authorization": f"Bearer {owner.access_token}"}
    policy = requests.get(url, headers=headers, timeout=10).json()
    policy["bindings"].append({"role": "roles/storage.objectViewer", "members": [MEMBER]})
    granted = time.monotonic()
    assert requests.put(url, json=policy, headers=headers, timeout=10).status_code == 200
    with pytest.raises(StorageAccessDenied):
        reader.get_bytes("late.sealed", 100)
    assert time.monotonic() - granted < DELAY_S
    assert _eventually(lambda: reader.get_bytes("late.sealed", 100), granted) >= DELAY_S
    assert reader.get_bytes("late.sealed", 100) == b"ciphertext"


def test_delay_set_at_runtime_on_the_control_endpoint(
    mock: tuple[MockCloud, OwnerSetup],
) -> None:
    cloud, owner = mock
    control = f"{cloud.endpoints.control}/mock/v1/iamPropagation"
    try:
        answer = requests.post(control, json={"seconds": 0}, timeout=10)
        assert answer.status_code == 200 and answer.json() == {"seconds": 0.0}
        assert requests.get(control, timeout=10).json() == {"seconds": 0.0}
        for bad in ({"seconds": -1}, {"seconds": "soon"}, {}):
            assert requests.post(control, json=bad, timeout=10).status_code == 400
        admin = make_kms_client(Credentials(owner.access_token), cloud.endpoints.kms)
        policy = admin.get_iam_policy(request={"resource": owner.key_name})
        policy.bindings.add(role="roles/cloudkms.cryptoKeyEncrypter", members=[MEMBER])
        admin.set_iam_policy(request={"resource": owner.key_name, "policy": policy})
        member = make_kms_client(Credentials(cloud.owner_token(MEMBER)), cloud.endpoints.kms)
        member.encrypt(request={"name": owner.key_name, "plaintext": b"x"})  # at once
    finally:
        requests.post(control, json={"seconds": DELAY_S}, timeout=10)
    assert cloud.identity.iam_propagation_s == DELAY_S
