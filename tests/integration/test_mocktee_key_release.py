"""Key release through the mock confidential cloud with the production clients (google-auth
identity-pool credentials, google-cloud-kms REST, google-cloud-storage), and the attack matrix:
every attack is its own test, releases no key, and its error says why.

One mock per module: a hospital (data owner), a model owner and a second hospital, each with
its own project, KMS key, bucket and workload identity pool written by the policy writer.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from google.oauth2.credentials import Credentials as OwnerCredentials

from sealbench.contract.workload import WorkloadIdentity
from sealbench.crypto.digest import Sha256Digest, sha256_digest
from sealbench.crypto.envelope import DataKey, WrappedKey, asset_aad, unwrap_key, wrap_key
from sealbench.crypto.streaming import decrypt_bytes, encrypt_bytes
from sealbench.gcp.credentials import workload_credentials, workload_credentials_from_attester
from sealbench.gcp.gcs import GcsBlobStore, make_storage_client
from sealbench.gcp.kms import KmsKeyWrapper, make_kms_client
from sealbench.gcp.policy import AssetPolicy, PoolProvider
from sealbench.gcp.policy_writer import PolicyWriter
from sealbench.mocktee.launcher import ImagePolicy
from sealbench.mocktee.provision import OwnerSetup, provision_owner
from sealbench.mocktee.server import MockCloud
from sealbench.mocktee.verifier import WorkloadLaunch, build_claims
from sealbench.platforms.attester import LauncherAttester
from sealbench.platforms.errors import CloudError, CredentialError, KeyAccessDenied


def _d(label: str) -> Sha256Digest:
    return sha256_digest(label.encode())


IMAGE = _d("evaluation image v1")
IMAGE_REF = f"us-docker.pkg.dev/authority/bench/eval@{IMAGE}"
DATA, OTHER_DATA = _d("hospital dataset"), _d("other hospital dataset")
MODEL, RECIPIENT = _d("model weights"), _d("hospital result key")
METRICS = "brats-2023-gli/1"
APPROVED = WorkloadIdentity(IMAGE, DATA, MODEL, RECIPIENT, "1", METRICS)
OTHER_RUN = WorkloadIdentity(IMAGE, OTHER_DATA, MODEL, RECIPIENT, "1", METRICS)


@dataclass(frozen=True)
class Owner:
    setup: OwnerSetup
    provider: PoolProvider
    wrapped: WrappedKey
    aad: bytes
    dek: DataKey


@dataclass(frozen=True)
class World:
    cloud: MockCloud
    hospital: Owner
    model_owner: Owner
    other_hospital: Owner
    tmp: Path


def _owner(
    cloud: MockCloud,
    name: str,
    number: str,
    workloads: frozenset[WorkloadIdentity],
    include_data: bool,
) -> Owner:
    ep = cloud.endpoints
    setup = provision_owner(
        ep,
        email=f"{name}@example.org",
        project_id=name,
        project_number=number,
        bucket=f"{name}-bucket",
    )
    creds = OwnerCredentials(setup.access_token)
    provider = PoolProvider(number, f"{name}-pool", "attestation")
    policy = AssetPolicy(
        provider=provider,
        key_name=setup.key_name,
        bucket=setup.bucket,
        workloads=workloads,
        include_data=include_data,
        issuer_uri=ep.issuer + "/",
        endpoints=ep.service_endpoints(),
    )
    PolicyWriter.from_credentials(
        creds, iam_url=ep.iam, kms_url=ep.kms, storage_url=ep.storage
    ).sync(policy)
    dek = DataKey.generate()
    kind = "dataset" if include_data else "model"
    aad = asset_aad(kind, f"{name}-asset", _d(f"{name} asset"))
    wrapped = wrap_key(KmsKeyWrapper(setup.key_name, make_kms_client(creds, ep.kms)), dek, aad)
    store = GcsBlobStore(make_storage_client(name, creds, ep.storage), setup.bucket)
    store.put_bytes("dek.wrapped", wrapped.to_bytes())
    store.put_bytes(
        "cases/0001.sealed", encrypt_bytes(dek.secret_bytes(), b"case 1 of " + name.encode())
    )
    return Owner(setup, provider, wrapped, aad, dek)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("kr")
    with MockCloud(tmp / "state") as cloud:
        yield World(
            cloud,
            _owner(cloud, "hospital", "200000000002", frozenset({APPROVED}), True),
            _owner(cloud, "modelco", "300000000003", frozenset({APPROVED}), False),
            _owner(cloud, "other-hospital", "400000000004", frozenset({OTHER_RUN}), True),
            tmp,
        )


_counter = iter(range(10_000))


def _env(world: World, workload: WorkloadIdentity = APPROVED) -> dict[str, str]:
    """The overrides a genuine run of ``workload`` on this mock carries: its digests, the
    pinned metrics version and the mock's own endpoints."""
    return {
        **workload.env_overrides(),
        **world.cloud.endpoints.service_endpoints().env_names(),
    }


def _release(world: World, owner: Owner, token_file: Path) -> DataKey:
    """What the enclave does: exchange the token at the owner's pool, then unwrap its DEK."""
    creds = workload_credentials(
        owner.provider.name, token_file=token_file, sts_url=world.cloud.endpoints.sts_token_url
    )
    wrapper = KmsKeyWrapper(owner.setup.key_name, make_kms_client(creds, world.cloud.endpoints.kms))
    return unwrap_key(wrapper, owner.wrapped, owner.aad)


def _launch(
    world: World,
    workload: WorkloadIdentity = APPROVED,
    *,
    image: str | None = None,
    env: Mapping[str, str] | None = None,
    debug: bool = False,
    cmd_override: Sequence[str] | None = None,
    policy: ImagePolicy | None = None,
    hwmodel: str = "GCP_AMD_SEV",
    secboot: bool = True,
) -> Iterator[Path]:
    socket_dir = world.tmp / f"run{next(_counter)}"
    with world.cloud.launcher().start_workload(
        image or workload.image_digest,
        IMAGE_REF,
        _env(world, workload) if env is None else env,
        debug,
        socket_dir=socket_dir,
        cmd_override=cmd_override,
        policy=policy,
        hwmodel=hwmodel,
        secboot=secboot,
    ) as run:
        yield run.token_file


def _token_file(world: World, token: str) -> Path:
    path = world.tmp / f"forged{next(_counter)}.jwt"
    path.write_text(token)
    return path


def _claims(**changes: object) -> dict[str, object]:
    claims = build_claims(
        WorkloadLaunch(IMAGE, IMAGE_REF, APPROVED.env_overrides()),
        issuer="",
        audience="https://sts.googleapis.com",
        nonces=(),
        now=int(time.time()),
    )
    claims.update(changes)
    return claims


def _denied(world: World, owner: Owner, token_file: Path, error: type[CloudError]) -> str:
    with pytest.raises(error) as info:
        _release(world, owner, token_file)
    return str(info.value)


# -- the happy path ------------------------------------------------------------------------------


def test_approved_workload_gets_both_keys_and_reads_the_data(world: World) -> None:
    for token_file in _launch(world):
        ep = world.cloud.endpoints
        for owner in (world.hospital, world.model_owner):
            creds = workload_credentials(
                owner.provider.name, token_file=token_file, sts_url=ep.sts_token_url
            )
            store = GcsBlobStore(
                make_storage_client(owner.setup.project_id, creds, ep.storage), owner.setup.bucket
            )
            wrapped = WrappedKey.from_bytes(store.get_bytes("dek.wrapped", 64 * 1024))
            wrapper = KmsKeyWrapper(owner.setup.key_name, make_kms_client(creds, ep.kms))
            dek = unwrap_key(wrapper, wrapped, owner.aad)
            assert dek == owner.dek
            with store.open_read("cases/0001.sealed") as handle:
                plaintext = decrypt_bytes(dek.secret_bytes(), handle.read())
            assert plaintext.startswith(b"case 1 of ")


def test_credentials_from_the_launcher_socket_release_the_key(world: World) -> None:
    socket_dir = world.tmp / f"run{next(_counter)}"
    with world.cloud.launcher().start_workload(
        IMAGE, IMAGE_REF, _env(world), socket_dir=socket_dir
    ) as run:
        attester = LauncherAttester(run.socket_path, run.token_file)
        creds = workload_credentials_from_attester(
            world.hospital.provider.name,
            attester=attester,
            sts_url=world.cloud.endpoints.sts_token_url,
        )
        wrapper = KmsKeyWrapper(
            world.hospital.setup.key_name, make_kms_client(creds, world.cloud.endpoints.kms)
        )
        assert unwrap_key(wrapper, world.hospital.wrapped, world.hospital.aad) == world.hospital.dek


# -- the attack matrix ---------------------------------------------------------------------------


def test_debug_image_denied_key(world: World) -> None:
    for token_file in _launch(world, debug=True):
        for owner in (world.hospital, world.model_owner):
            why = _denied(world, owner, token_file, CredentialError)
            assert "rejected by the attribute condition" in why and "dbgstat" in why


def test_shielded_vm_without_memory_encryption_denied_key(world: World) -> None:
    for token_file in _launch(world, hwmodel="GCP_SHIELDED_VM"):
        for owner in (world.hospital, world.model_owner):
            why = _denied(world, owner, token_file, CredentialError)
            assert "rejected by the attribute condition" in why and "hwmodel" in why


def test_secure_boot_off_denied_key(world: World) -> None:
    for token_file in _launch(world, secboot=False):
        for owner in (world.hospital, world.model_owner):
            why = _denied(world, owner, token_file, CredentialError)
            assert "rejected by the attribute condition" in why and "secboot" in why


@pytest.mark.parametrize(
    "name", ["SEALBENCH_STS_URL", "SEALBENCH_KMS_ENDPOINT", "SEALBENCH_STORAGE_ENDPOINT"]
)
def test_token_of_run_with_redirected_endpoint_denied_key(world: World, name: str) -> None:
    env = {**_env(world), name: "http://127.0.0.1:9/capture"}
    for token_file in _launch(world, env=env):
        for owner in (world.hospital, world.model_owner):
            why = _denied(world, owner, token_file, CredentialError)
            assert "rejected by the attribute condition" in why and name in why


def test_override_outside_allow_list_denied_key(world: World) -> None:
    # An image whose launch policy let LD_PRELOAD through: the condition still refuses.
    from sealbench.contract.spec import ENV_OVERRIDE_NAMES

    permissive = ImagePolicy(allow_env_override=frozenset({*ENV_OVERRIDE_NAMES, "LD_PRELOAD"}))
    env = {**_env(world), "LD_PRELOAD": "/tmp/steal.so"}
    for token_file in _launch(world, env=env, policy=permissive):
        for owner in (world.hospital, world.model_owner):
            why = _denied(world, owner, token_file, CredentialError)
            assert "rejected by the attribute condition" in why and "all(k" in why


def test_operator_raised_epsilon_denied_key(world: World) -> None:
    """An operator who tries to raise the release's privacy loss (or turn its noise off) has no
    input for it: the pin declares it. An override naming one, even through an image whose
    launch policy would let it through, is an override nobody granted."""
    from sealbench.contract.spec import ENV_OVERRIDE_NAMES

    knobs = {"SEALBENCH_RELEASE_EPSILON": "100", "SEALBENCH_RELEASE_NOISE": "off"}
    permissive = ImagePolicy(allow_env_override=frozenset({*ENV_OVERRIDE_NAMES, *knobs}))
    for token_file in _launch(world, env={**_env(world), **knobs}, policy=permissive):
        for owner in (world.hospital, world.model_owner):
            why = _denied(world, owner, token_file, CredentialError)
            assert "rejected by the attribute condition" in why


def test_image_digest_not_in_policy_denied_key(world: World) -> None:
    for token_file in _launch(world, image=_d("patched evaluation image")):
        for owner in (world.hospital, world.model_owner):
            why = _denied(world, owner, token_file, CredentialError)
            assert "rejected by the attribute condition" in why and "image_digest in" in why


def _differing(**changes: Sha256Digest | None) -> WorkloadIdentity:
    fields = {
        "image_digest": IMAGE,
        "data_digest": DATA,
        "model_digest": MODEL,
        "recipient_digest": RECIPIENT,
        "benchmark_id": "1",
        "metrics_version": METRICS,
        **changes,
    }
    return WorkloadIdentity(**fields)  # type: ignore[arg-type]


def _key_denied(world: World, owner: Owner, token_file: Path) -> None:
    why = _denied(world, owner, token_file, KeyAccessDenied)
    assert owner.setup.key_name in why and "may not decrypt" in why
    assert owner.provider.pool_name in why  # the identity that was refused


def test_data_digest_differs_from_bound_workload_denied_key(world: World) -> None:
    for token_file in _launch(world, _differing(data_digest=_d("another dataset"))):
        _key_denied(world, world.hospital, token_file)


def test_model_digest_differs_from_bound_workload_denied_key(world: World) -> None:
    for token_file in _launch(world, _differing(model_digest=_d("a stolen model"))):
        _key_denied(world, world.hospital, token_file)
        _key_denied(world, world.model_owner, token_file)


def test_recipient_digest_differs_from_bound_workload_denied_key(world: World) -> None:
    for token_file in _launch(world, _differing(recipient_digest=_d("the attacker's key"))):
        _key_denied(world, world.hospital, token_file)
        _key_denied(world, world.model_owner, token_file)


def test_cmd_override_denied_key(world: World) -> None:
    # An image whose launch policy allowed a command override: the condition still refuses.
    permissive = ImagePolicy(allow_cmd_override=True)
    command = ["/bin/sh", "-c", "cat /keys"]
    for token_file in _launch(world, cmd_override=command, policy=permissive):
        for owner in (world.hospital, world.model_owner):
            why = _denied(world, owner, token_file, CredentialError)
            assert "rejected by the attribute condition" in why and "cmd_override" in why


def test_expired_token_denied_key(world: World) -> None:
    now = int(time.time())
    claims = _claims(
        iss=world.cloud.verifier.issuer, iat=now - 7200, nbf=now - 7200, exp=now - 3600
    )
    why = _denied(
        world,
        world.hospital,
        _token_file(world, world.cloud.verifier.sign(claims)),
        CredentialError,
    )
    assert "invalid_grant" in why and "'exp'" in why


def test_not_yet_valid_token_denied_key(world: World) -> None:
    now = int(time.time())
    claims = _claims(
        iss=world.cloud.verifier.issuer, iat=now + 3600, nbf=now + 3600, exp=now + 7200
    )
    why = _denied(
        world,
        world.hospital,
        _token_file(world, world.cloud.verifier.sign(claims)),
        CredentialError,
    )
    assert "invalid_grant" in why and "'nbf'" in why


def test_wrong_audience_denied_key(world: World) -> None:
    claims = _claims(iss=world.cloud.verifier.issuer, aud="https://evil.example/sts")
    why = _denied(
        world,
        world.hospital,
        _token_file(world, world.cloud.verifier.sign(claims)),
        CredentialError,
    )
    assert "invalid_grant" in why and "audience" in why


def _sign_with_foreign_key(claims: Mapping[str, object], kid: str) -> str:
    import jwt

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return jwt.encode(dict(claims), key, algorithm="RS256", headers={"kid": kid, "typ": "JWT"})


def test_token_signed_by_key_not_in_jwks_denied_key(world: World) -> None:
    claims = _claims(iss=world.cloud.verifier.issuer)
    # Same kid as the mock's key (a key-confusion attempt), then an unknown kid.
    for kid in (world.cloud.verifier.kid, "not-a-published-kid"):
        token = _sign_with_foreign_key(claims, kid)
        why = _denied(world, world.hospital, _token_file(world, token), CredentialError)
        assert "invalid_grant" in why


def test_payload_edited_after_signing_denied_key(world: World) -> None:
    # A genuine token for another dataset, edited to claim the approved one.
    for token_file in _launch(world, _differing(data_digest=_d("another dataset"))):
        header, payload, signature = token_file.read_text().split(".")
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        claims["submods"]["container"]["env_override"] = APPROVED.env_overrides()
        edited = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
        why = _denied(
            world,
            world.hospital,
            _token_file(world, f"{header}.{edited}.{signature}"),
            CredentialError,
        )
        assert "invalid_grant" in why and "signature" in why


def test_token_from_another_pools_run_replayed_denied_key(world: World) -> None:
    for token_file in _launch(world, OTHER_RUN):
        # The token is genuine: the other hospital's pool releases its own key to it ...
        assert _release(world, world.other_hospital, token_file) == world.other_hospital.dek
        # ... but replayed at this hospital's pool it releases nothing.
        _key_denied(world, world.hospital, token_file)


def test_token_without_env_overrides_denied_key(world: World) -> None:
    for token_file in _launch(world, env={}):
        for owner in (world.hospital, world.model_owner):
            why = _denied(world, owner, token_file, CredentialError)
            assert "attribute mapping" in why and "workload_uid" in why


def test_sts_access_token_used_against_another_owners_key_denied(world: World) -> None:
    for token_file in _launch(world):
        ep = world.cloud.endpoints
        creds = workload_credentials(
            world.hospital.provider.name, token_file=token_file, sts_url=ep.sts_token_url
        )
        other = world.other_hospital
        wrapper = KmsKeyWrapper(other.setup.key_name, make_kms_client(creds, ep.kms))
        with pytest.raises(KeyAccessDenied) as info:
            unwrap_key(wrapper, other.wrapped, other.aad)
        assert other.setup.key_name in str(info.value)
        assert world.hospital.provider.pool_name in str(info.value)


def test_production_policy_refuses_mock_tokens(world: World) -> None:
    """A provider pinned to Google's issuer (what production writes) rejects mock tokens."""
    ep = world.cloud.endpoints
    hospital = world.hospital
    production = PoolProvider(hospital.setup.project_number, "production-pool", "attestation")
    policy = AssetPolicy(
        provider=production,
        key_name=hospital.setup.key_name,
        bucket=None,
        workloads=frozenset({APPROVED}),
        include_data=True,
    )
    PolicyWriter.from_credentials(
        OwnerCredentials(hospital.setup.access_token),
        iam_url=ep.iam,
        kms_url=ep.kms,
        storage_url=ep.storage,
    ).sync(policy)
    for token_file in _launch(world):
        creds = workload_credentials(
            production.name, token_file=token_file, sts_url=ep.sts_token_url
        )
        wrapper = KmsKeyWrapper(hospital.setup.key_name, make_kms_client(creds, ep.kms))
        with pytest.raises(CredentialError) as info:
            unwrap_key(wrapper, hospital.wrapped, hospital.aad)
        assert "'iss'" in str(info.value) and "confidentialcomputing.googleapis.com" in str(
            info.value
        )


def test_env_override_smuggling_a_separator_denied_key(world: World) -> None:
    # Overrides that are not digests (here carrying '::' to shift the uid's fields) are refused
    # by the condition before the mapped uid is trusted at all.
    env = {
        **_env(world),
        "SEALBENCH_DATA_DIGEST": f"{DATA}::{MODEL}",
        "SEALBENCH_MODEL_DIGEST": RECIPIENT,
        "SEALBENCH_RECIPIENT_DIGEST": "x",
    }
    for token_file in _launch(world, env=env):
        why = _denied(world, world.hospital, token_file, CredentialError)
        assert "rejected by the attribute condition" in why and ".matches(" in why


def test_issuer_discovery_serves_the_jwks_that_verifies_tokens(world: World) -> None:
    import requests

    from sealbench.crypto.attestation import Jwks
    from sealbench.gcp.confidential_space import verify_token

    issuer = world.cloud.endpoints.issuer
    config = requests.get(f"{issuer}/.well-known/openid-configuration", timeout=10).json()
    assert config["issuer"] == issuer
    jwks = Jwks.from_json(requests.get(config["jwks_uri"], timeout=10).content)
    for token_file in _launch(world):
        claims = verify_token(
            token_file.read_text(),
            jwks,
            issuer=issuer,
            audience="https://sts.googleapis.com",
            now=time.time(),
        )
        assert claims.submods.container.image_digest == IMAGE
