"""The operator's attacks on key release, end to end on the mock process launcher: the hospital
that launches the genuine evaluation image tries to reach a key through the inputs it controls.

Each attack runs the genuine enclave against the mock TEE with one operator input tampered, then
replays what a capturing operator would hold (the genuine token the launcher attests for that
very launch: on the mock the operator can read it) at the genuine STS for both owners' pools.
Nothing may come of it: no access token, no DEK, no plaintext weights or case bytes anywhere,
and a run that stops before it sends any token, saying which override is at fault.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from sealbench.client.runs.launchers import EnclaveRunFailed
from sealbench.contract.errors import SpecError
from sealbench.contract.spec import RunSpec
from sealbench.crypto.envelope import WrappedKey, asset_aad, unwrap_key
from sealbench.gcp.credentials import workload_credentials
from sealbench.gcp.kms import KmsKeyWrapper, make_kms_client
from sealbench.mocktee.launcher import LAUNCHER_ROOT_ENV, LaunchPolicyViolation
from sealbench.platforms.errors import CloudError

ENDPOINTS = {
    "sts_url": "SEALBENCH_STS_URL",
    "kms_endpoint": "SEALBENCH_KMS_ENDPOINT",
    "storage_endpoint": "SEALBENCH_STORAGE_ENDPOINT",
}


def _replay_releases_nothing(world: Any, spec: RunSpec, **launch: Any) -> list[str]:
    """Replay the genuine token of a launch of ``spec`` at the genuine STS for both pools and
    try to unwrap each owner's DEK with whatever comes back; return each refusal's text."""
    ep = world.cloud.endpoints
    refusals = []
    with world.cloud.launcher().start_workload(
        world.image_digest,
        f"sealbench.local/evaluation@{world.image_digest}",
        spec.to_environ(),
        socket_dir=world.root / f"replay-{spec.run_id}",
        **launch,
    ) as run:
        owners = (
            (world.hospital, spec.dataset.pool_provider, "dataset", world.datasets["small"]),
            (world.modelco, spec.model.pool_provider, "model", world.models["tiny"]),
        )
        for owner, pool, kind, asset in owners:
            # Worst case: the operator also holds the wrapped DEK file.
            wrapped = WrappedKey.from_bytes(
                world.owner_store(owner).get_bytes(asset.prefix + "dek.wrapped", 1 << 16)
            )
            creds = workload_credentials(pool, token_file=run.token_file, sts_url=ep.sts_token_url)
            wrapper = KmsKeyWrapper(owner.key_name, make_kms_client(creds, ep.kms))
            with pytest.raises(CloudError) as info:
                unwrap_key(wrapper, wrapped, asset_aad(kind, asset.asset_id, asset.digest))
            refusals.append(str(info.value))
    return refusals


def _assert_no_plaintext_anywhere(world: Any, trap: Any) -> None:
    needles = world.plaintext_needles("small", "tiny")
    assert world.scan([world.root / "runs", world.cloud.state.storage_dir], needles) == []
    captured = trap.captured()
    assert [what for what, n in needles.items() if n in captured] == []


@pytest.mark.parametrize("field", sorted(ENDPOINTS))
def test_token_capture_through_endpoint_override_releases_nothing(
    enclave_world: Any, token_trap: Any, field: str
) -> None:
    name = ENDPOINTS[field]
    hijacked = enclave_world.spec("small", "tiny").model_copy(
        update={field: f"{token_trap.url}/v1/token"}
    )
    with pytest.raises(EnclaveRunFailed) as info:
        enclave_world.launcher().launch(hijacked, timeout=300)
    # The run stops before it sends any token, and says which override is at fault.
    assert info.value.error_class is SpecError
    assert name in info.value.reason and "refusing to send any token" in info.value.reason
    assert token_trap.requests == []
    assert enclave_world.result_objects(hijacked) == []
    # Replayed at the genuine STS, the token of such a launch federates to nothing.
    for why in _replay_releases_nothing(enclave_world, hijacked):
        assert "rejected by the attribute condition" in why and name in why
    _assert_no_plaintext_anywhere(enclave_world, token_trap)


@pytest.mark.parametrize(
    ("machine", "claim"),
    [({"hwmodel": "GCP_SHIELDED_VM"}, "hwmodel"), ({"secboot": False}, "secboot")],
    ids=["shielded-vm-not-confidential", "secure-boot-off"],
)
def test_run_on_non_confidential_machine_releases_nothing(
    enclave_world: Any, token_trap: Any, machine: dict[str, Any], claim: str
) -> None:
    spec = enclave_world.spec("small", "tiny")
    for why in _replay_releases_nothing(enclave_world, spec, **machine):
        assert "rejected by the attribute condition" in why and claim in why
    _assert_no_plaintext_anywhere(enclave_world, token_trap)


def test_override_outside_allow_list_refused_at_launch(enclave_world: Any) -> None:
    spec = enclave_world.spec("small", "tiny")
    socket_dir = enclave_world.root / "ld-preload"
    with pytest.raises(LaunchPolicyViolation, match="LD_PRELOAD"):
        enclave_world.cloud.launcher().start_workload(
            enclave_world.image_digest,
            "sealbench.local/evaluation",
            {**spec.to_environ(), "LD_PRELOAD": "/tmp/steal.so"},
            socket_dir=socket_dir,
        )
    assert not socket_dir.exists()  # refused before anything exists, a token least of all


def test_command_override_refused_at_launch(enclave_world: Any) -> None:
    spec = enclave_world.spec("small", "tiny")
    with pytest.raises(LaunchPolicyViolation, match="CMD"):
        enclave_world.cloud.launcher().start_workload(
            enclave_world.image_digest,
            "sealbench.local/evaluation",
            spec.to_environ(),
            socket_dir=enclave_world.root / "cmd",
            cmd_override=["/bin/sh", "-c", "env"],
        )


# -- nothing the launcher leaves behind is a credential ------------------------------------------

_OPERATOR = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from sealbench.mocktee.process_launcher import MockProcessLauncher
    from sealbench.contract.spec import RunSpec
    from sealbench.mocktee.launcher import MockLauncher, RemoteTokenMinter

    spec = RunSpec.model_validate_json(Path(sys.argv[1]).read_text())
    launcher = MockProcessLauncher(
        MockLauncher(RemoteTokenMinter(sys.argv[2])), image_digest=sys.argv[3],
        workdir_root=Path(sys.argv[4]),
    )
    workload = launcher.start(spec, on_output=lambda line: print(line, flush=True))
    print(f"ENCLAVE {workload.pid}", flush=True)
    time.sleep(600)
    """
)


def test_sigkilled_run_and_enclave_leave_no_credential_after_the_next_launch(
    enclave_world: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    # This test's own launcher root (short: a socket path is at most 107 bytes), for the
    # operator's process and the next launch alike: another run on the machine makes its
    # folders elsewhere, so what appears here is this run's.
    root = Path(tempfile.mkdtemp(prefix="sbl-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(root, ignore_errors=True))
    monkeypatch.setenv(LAUNCHER_ROOT_ENV, str(root))

    def _launcher_dirs() -> set[Path]:
        return set(root.iterdir()) if root.is_dir() else set()

    spec = enclave_world.spec("many", "tiny")
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec.model_dump_json())
    before = _launcher_dirs()
    operator = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _OPERATOR,
            str(spec_file),
            enclave_world.cloud.endpoints.control,
            enclave_world.image_digest,
            str(tmp_path / "runs"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert operator.stdout is not None
    enclave_pid = None
    deadline = time.monotonic() + 300
    for line in operator.stdout:
        if line.startswith("ENCLAVE "):
            enclave_pid = int(line.split()[1])
        if "case 1/12 done" in line or time.monotonic() > deadline:
            break
    assert enclave_pid is not None
    left = _launcher_dirs() - before
    assert len(left) == 1
    folder = left.pop()
    # While it runs: a private folder, a socket and a token file only its user can open.
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    for name in ("teeserver.sock", "attestation_verifier_claims_token"):
        assert oct((folder / name).stat().st_mode & 0o777) == "0o600"
    # Both die at once, as in a crash: nothing cleans up.
    os.kill(enclave_pid, signal.SIGKILL)
    operator.send_signal(signal.SIGKILL)
    operator.wait(timeout=30)
    assert (folder / "attestation_verifier_claims_token").exists()
    # The next launch (a fresh 'sealbench run') removes what the dead run left.
    again = enclave_world.spec("small", "tiny")
    enclave_world.launcher().launch(again, timeout=300)
    assert not folder.exists()
    assert _launcher_dirs() - before == set()
