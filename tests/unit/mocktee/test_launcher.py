"""The mock launcher's ``/v1/token`` behaviour and its token file, as the real teeserver."""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from sealbench.crypto.attestation import Jwks
from sealbench.gcp.confidential_space import verify_token
from sealbench.mocktee._http import Request
from sealbench.mocktee.launcher import MockLauncher, handle_token_request
from sealbench.mocktee.verifier import MockVerifier, WorkloadLaunch
from sealbench.platforms.attester import LauncherAttester

IMAGE = "sha256:" + "a" * 64
MakeRequest = Callable[..., Request]


def _mint(audience: str, nonces: Sequence[str]) -> str:
    payload = {"aud": audience, "eat_nonce": list(nonces)}
    return "h." + base64.urlsafe_b64encode(json.dumps(payload).encode()).decode() + ".s"


def _payload(token: str) -> dict[str, object]:
    part = token.split(".")[1]
    result: dict[str, object] = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    return result


def test_get_returns_the_default_token_as_raw_jwt(make_request: MakeRequest) -> None:
    response = handle_token_request(make_request("GET", "/v1/token"), _mint)
    assert response.status == 200 and response.content_type == "text/html"
    assert _payload(response.body.decode())["aud"] == "https://sts.googleapis.com"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"{not json", "failed to parse POST body as TokenOptions"),
        ({"audience": "a", "token_type": "OIDC", "extra": 1}, 'json: unknown field "extra"'),
        ({"token_type": "OIDC"}, "use GET request for the default identity token"),
        ({"audience": "a"}, "token_type is a required parameter"),
        ({"audience": "a", "token_type": "JWT"}, "unsupported token type"),
        ({"audience": "a", "token_type": "PKI"}, "only issues OIDC tokens"),
        ({"audience": "a" * 513, "token_type": "OIDC"}, "512 bytes"),
        ({"audience": "a", "token_type": "OIDC", "nonces": ["n" * 10] * 7}, "only 6 are allowed"),
        ({"audience": "a", "token_type": "OIDC", "nonces": ["n" * 7]}, "between 8 and 88"),
        ({"audience": "a", "token_type": "OIDC", "nonces": ["n" * 89]}, "between 8 and 88"),
    ],
)
def test_malformed_custom_token_request_refused_with_launcher_text(
    make_request: MakeRequest, body: object, expected: str
) -> None:
    response = handle_token_request(make_request("POST", "/v1/token", body), _mint)
    assert response.status == 400 and expected in response.body.decode()


def test_custom_token_echoes_audience_and_nonces(make_request: MakeRequest) -> None:
    body = {"audience": "sealbench-result", "token_type": "OIDC", "nonces": ["n" * 8, "m" * 88]}
    response = handle_token_request(make_request("POST", "/v1/token", body), _mint)
    assert response.status == 200
    claims = _payload(response.body.decode())
    assert claims == {"aud": "sealbench-result", "eat_nonce": ["n" * 8, "m" * 88]}


def test_launched_workload_serves_verifiable_tokens(
    verifier: MockVerifier, clock: Callable[[], float], tmp_path: Path
) -> None:
    env = {"SEALBENCH_MODEL_DIGEST": "sha256:" + "b" * 64}
    with MockLauncher(verifier).start_workload(
        IMAGE, f"repo/x@{IMAGE}", env, socket_dir=tmp_path / "run"
    ) as run:
        attester = LauncherAttester(run.socket_path, run.token_file)
        jwks = Jwks.from_json(verifier.jwks())
        default = verify_token(
            attester.token(),
            jwks,
            issuer=verifier.issuer,
            audience="https://sts.googleapis.com",
            now=clock(),
        )
        assert default.submods.container.env_override == env
        assert default.dbgstat == "disabled-since-boot"
        one = verify_token(
            attester.token("sealbench-result", ["x" * 64]),
            jwks,
            issuer=verifier.issuer,
            audience="sealbench-result",
            now=clock(),
        )
        assert one.eat_nonce == ("x" * 64,)
        assert _payload(attester.token("aud-1", ["x" * 64]))["eat_nonce"] == "x" * 64
        assert _payload(attester.token("aud-1", ["x" * 10, "y" * 10]))["eat_nonce"] == [
            "x" * 10,
            "y" * 10,
        ]
        file_claims = verify_token(
            run.token_file.read_text(),
            jwks,
            issuer=verifier.issuer,
            audience="https://sts.googleapis.com",
            now=clock(),
        )
        assert file_claims.submods.container.image_digest == IMAGE
        # Nothing left behind is readable by anyone but the workload's user.
        assert oct(run.socket_path.stat().st_mode & 0o777) == "0o600"
        assert oct(run.token_file.stat().st_mode & 0o777) == "0o600"
        assert oct(run.socket_dir.stat().st_mode & 0o777) == "0o700"
    assert not run.socket_path.exists() and not run.token_file.exists()
    assert not run.socket_dir.exists()


class _ShortLivedMinter:
    def __init__(self) -> None:
        self.minted = 0

    def mint(self, launch: WorkloadLaunch, audience: str, nonces: Sequence[str]) -> str:
        if self.minted == 2:  # the initial token and one refresh, then the verifier fails
            raise RuntimeError("verifier unavailable")
        self.minted += 1
        now = int(time.time())
        payload = {"aud": audience, "iat": now, "exp": now + 1, "n": self.minted}
        return "h." + base64.urlsafe_b64encode(json.dumps(payload).encode()).decode() + ".s"


def test_token_file_refreshed_before_expiry(tmp_path: Path) -> None:
    minter = _ShortLivedMinter()
    with MockLauncher(minter, seed=1).start_workload(
        IMAGE, "ref", {}, socket_dir=tmp_path / "run"
    ) as run:
        first = run.token_file.read_text()
        deadline = time.monotonic() + 10
        while run.token_file.read_text() == first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert run.token_file.read_text() != first
        time.sleep(1.0)  # a failing refresh keeps the last good token
        assert minter.minted == 2 and run.token_file.read_text() != first
        # Atomic replacement: no temporary file is left beside the token.
        assert sorted(p.name for p in run.token_file.parent.iterdir()) == [
            "attestation_verifier_claims_token",
            "teeserver.sock",
        ]


def test_sweep_removes_only_the_folders_of_dead_owners(tmp_path: Path) -> None:
    from sealbench.mocktee.launcher import private_launcher_dir, sweep_stale_launcher_dirs

    root = tmp_path / "launchers"
    mine = private_launcher_dir(root)
    dead = root / "999999999-12345-deadbeef"  # no such process
    reused = root / f"{os.getpid()}-1-0badf00d"  # our pid, another start time: pid reuse
    unnamed = root / "junk"
    for folder in (dead, reused, unnamed):
        folder.mkdir()
        (folder / "attestation_verifier_claims_token").write_text("a token")
    assert sorted(sweep_stale_launcher_dirs(root)) == sorted([dead, reused, unnamed])
    assert sorted(root.iterdir()) == [mine]
    assert oct(mine.stat().st_mode & 0o777) == "0o700"
    # A sweep at any moment (another run starting) never takes a live run's folder.
    second = private_launcher_dir(root)
    assert sorted(root.iterdir()) == sorted([mine, second])


def test_launcher_root_made_by_someone_else_is_refused(tmp_path: Path) -> None:
    from sealbench.mocktee.launcher import private_launcher_dir

    root = tmp_path / "launchers"
    root.mkdir(mode=0o777)
    root.chmod(0o777)  # as a folder planted by another user would be open to them
    with pytest.raises(PermissionError, match="0700"):
        private_launcher_dir(root)
