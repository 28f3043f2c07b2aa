"""Asset coordinates are validated by the registry as the enclave's run spec will validate them
(``sealbench.contract.spec``): a value the enclave would refuse is refused at ``PUT`` with a 422,
nothing is stored, and the bad value is not echoed back."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from fastapi.testclient import TestClient

# The registry's database takes no part in what this module checks (tests/unit/server/conftest.py).
pytestmark = pytest.mark.one_database(
    "a bad coordinate is refused by validation before any write; storing and reading "
    "coordinates runs on both databases in test_grants and test_withdraw"
)

API = "/api/v1"
Kind = Literal["dataset", "model"]

KEY = "projects/hospital-tre/locations/europe-west4/keyRings/sealbench/cryptoKeys/dataset"
URI = "gs://hospital-sealed/brats-gli/v1"
PROVIDER = (
    "projects/200000000001/locations/global/workloadIdentityPools/hospital-pool"
    "/providers/attestation"
)
VALID = {"kms_key_name": KEY, "storage_uri": URI, "wip_provider": PROVIDER}

#: Marks a refused value so a test can check it is not echoed back.
CANARY = "canary-9f3e"


def _url(world: Any, kind: Kind) -> str:
    asset_id = world.dataset_id if kind == "dataset" else world.model_id
    return f"{API}/{kind}s/{asset_id}/coordinates"


def _owner(world: Any, kind: Kind) -> Any:
    return world.data_owner if kind == "dataset" else world.model_owner


def _put(client: TestClient, world: Any, kind: Kind, body: dict[str, str]) -> Any:
    return client.put(_url(world, kind), json=body, headers=_owner(world, kind).headers)


def _assert_refused(response: Any, field: str) -> None:
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == "invalid_request"
    assert [d["loc"] for d in body["details"]] == [["body", field]]
    assert body["details"][0]["type"] == "string_pattern_mismatch"
    assert CANARY not in response.text


def _refused_and_previous_kept(
    client: TestClient, world: Any, kind: Kind, field: str, value: str
) -> None:
    """Store valid coordinates, then try to replace ``field`` with ``value``: refused with a
    422 naming the field, and the stored coordinates are unchanged."""
    owner = _owner(world, kind)
    assert _put(client, world, kind, VALID).status_code == 200
    _assert_refused(_put(client, world, kind, {**VALID, field: value}), field)
    stored = client.get(_url(world, kind), headers=owner.headers)
    assert stored.status_code == 200
    assert {k: stored.json()[k] for k in VALID} == VALID


def _refused_and_nothing_stored(
    client: TestClient, world: Any, kind: Kind, field: str, value: str
) -> None:
    """On an asset without coordinates: refused, and a read still finds none."""
    _assert_refused(_put(client, world, kind, {**VALID, field: value}), field)
    stored = client.get(_url(world, kind), headers=_owner(world, kind).headers)
    assert stored.status_code == 404, stored.text


KINDS = pytest.mark.parametrize("kind", ["dataset", "model"])


@KINDS
def test_valid_coordinates_stored_and_read_back(client: TestClient, world: Any, kind: Kind) -> None:
    stored = _put(client, world, kind, VALID)
    assert stored.status_code == 200, stored.text
    read = client.get(_url(world, kind), headers=_owner(world, kind).headers)
    assert read.status_code == 200
    assert {k: read.json()[k] for k in VALID} == VALID
    # A bucket without a prefix and a domain-scoped project are coordinates the enclave takes.
    other = {
        **VALID,
        "storage_uri": "gs://hospital-sealed",
        "kms_key_name": "projects/example.com:tre/locations/global/keyRings/r_1/cryptoKeys/K-2",
    }
    assert _put(client, world, kind, other).status_code == 200
    read = client.get(_url(world, kind), headers=_owner(world, kind).headers)
    assert {k: read.json()[k] for k in other} == other


@KINDS
def test_nul_byte_in_kms_key_name_refused(client: TestClient, world: Any, kind: Kind) -> None:
    _refused_and_previous_kept(client, world, kind, "kms_key_name", KEY + "\x00" + CANARY)
    _refused_and_nothing_stored(
        client,
        world,
        "model" if kind == "dataset" else "dataset",
        "kms_key_name",
        KEY[:-1] + "\x00",
    )


@KINDS
def test_newline_in_storage_uri_refused(client: TestClient, world: Any, kind: Kind) -> None:
    _refused_and_nothing_stored(client, world, kind, "storage_uri", URI + "\n" + CANARY)
    # A trailing newline too (Python's ``$`` would let it through; the pattern must not).
    _refused_and_previous_kept(client, world, kind, "storage_uri", URI + "\n")


@KINDS
def test_pool_provider_by_project_id_refused(client: TestClient, world: Any, kind: Kind) -> None:
    by_id = PROVIDER.replace("projects/200000000001/", f"projects/{CANARY}/")
    _refused_and_previous_kept(client, world, kind, "wip_provider", by_id)


@KINDS
def test_http_storage_uri_refused(client: TestClient, world: Any, kind: Kind) -> None:
    _refused_and_previous_kept(
        client, world, kind, "storage_uri", f"https://storage.example/{CANARY}/prefix"
    )
    _refused_and_nothing_stored(
        client,
        world,
        "model" if kind == "dataset" else "dataset",
        "storage_uri",
        f"http://attacker.example/{CANARY}",
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        # A key version, or a path that climbs out of the key ring, is not a crypto key name.
        ("kms_key_name", KEY + "/cryptoKeyVersions/1"),
        ("kms_key_name", KEY.replace("keyRings/sealbench", "keyRings/..") + "/../" + CANARY),
        ("kms_key_name", " " + KEY),
        ("kms_key_name", KEY + "\r\n" + CANARY),
        # Query strings, userinfo, upper-case buckets and control characters in a file path.
        ("storage_uri", URI + "?" + CANARY),
        ("storage_uri", f"gs://{CANARY}@hospital-sealed/p"),
        ("storage_uri", "gs://Hospital-Sealed/p"),
        ("storage_uri", "file:///srv/sealbench/\x1b[2J" + CANARY),
        ("storage_uri", "file://host/srv/" + CANARY),
        # A provider outside the global location, or in another resource tree.
        ("wip_provider", PROVIDER.replace("locations/global", "locations/europe-west4")),
        ("wip_provider", PROVIDER + "/" + CANARY),
        ("wip_provider", PROVIDER + "\x00"),
    ],
    ids=lambda v: repr(v)[:40],
)
def test_malformed_coordinates_refused(
    client: TestClient, world: Any, field: str, value: str
) -> None:
    _refused_and_previous_kept(client, world, "dataset", field, value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("storage_uri", "gs://hospital-sealed/" + "a" * 1100),
        ("kms_key_name", KEY + "x" * 600),
    ],
    ids=["storage_uri", "kms_key_name"],
)
def test_overlong_coordinates_refused(
    client: TestClient, world: Any, field: str, value: str
) -> None:
    owner = _owner(world, "dataset")
    assert _put(client, world, "dataset", VALID).status_code == 200
    r = _put(client, world, "dataset", {**VALID, field: value})
    assert r.status_code == 422, r.text
    assert ["body", field] in [d["loc"] for d in r.json()["details"]]
    read = client.get(_url(world, "dataset"), headers=owner.headers)
    assert read.json()[field] == VALID[field]


@pytest.mark.parametrize(
    "uri",
    ["gs://bucket-a/../other", "gs://bucket-a/./x", "gs://ab/x", "gs://bucket-a/a//b"],
)
def test_storage_uri_the_enclave_would_refuse_is_refused(uri: str) -> None:
    """The registry applies the enclave's own storage-URI rules, not only the pattern."""
    from pydantic import ValidationError

    from sealbench.server.schemas import CoordinatesUpdate

    with pytest.raises(ValidationError, match="storage_uri"):
        CoordinatesUpdate(
            kms_key_name="projects/p/locations/global/keyRings/r/cryptoKeys/k",
            storage_uri=uri,
            wip_provider="projects/1/locations/global/workloadIdentityPools/pool/providers/prov",
        )
