"""The registry checks a result token with the platform its trusted issuer names, through the
platform registry: the platform gets the registry's requirements, and an issuer naming a
platform that is not installed is refused rather than checked with another platform's rules."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sealbench.crypto.attestation import (
    FAILURE_AUDIENCE,
    RESULT_AUDIENCE,
    Jwks,
    failure_nonce,
    result_nonce,
)
from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.digest import sha256_digest
from sealbench.mocktee.state import MockState
from sealbench.mocktee.verifier import MockVerifier, WorkloadLaunch
from sealbench.platforms.platform import (
    AttestedWorkload,
    Platform,
    WorkloadRequirements,
    load_platform,
)
from sealbench.server.errors import ConfigurationError, ResultRejectedError
from sealbench.server.jwks import JwksCache
from sealbench.server.settings import TrustedIssuer
from sealbench.server.verification import ResultVerifier

ISSUER = "https://attestation.test.invalid"
JWKS_URL = f"{ISSUER}/jwks"
NOW = 1_800_000_000
IMAGE = sha256_digest(b"image")
DATA = sha256_digest(b"data")
MODEL = sha256_digest(b"model")
SEALED = sha256_digest(b"sealed result")
SUMMARY: dict[str, object] = {"run_id": "r1", "cases": 2}
FACTS: dict[str, Any] = {
    "image_digest": IMAGE,
    "benchmark_id": "7",
    "metrics_version": "brats-2023-gli/1",
    "dataset_digest": DATA,
    "model_digest": MODEL,
    "sealed_result_digest": SEALED,
}


@dataclass
class _Fetcher:
    documents: Mapping[str, bytes]

    def fetch(self, url: str) -> bytes:
        return self.documents[url]


@dataclass
class RecordingPlatform:
    """The real Confidential Space platform, recording what the registry asks of it."""

    inner: Platform = field(default_factory=lambda: load_platform("confidential-space"))
    asked: list[WorkloadRequirements | None] = field(default_factory=list)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def verify(self, token: str, jwks: Jwks, **kw: Any) -> AttestedWorkload:
        self.asked.append(kw.get("requirements"))
        return self.inner.verify(token, jwks, **kw)


@pytest.fixture
def verifier(tmp_path: Path) -> MockVerifier:
    return MockVerifier(MockState(tmp_path), ISSUER, clock=lambda: NOW)


def _token(verifier: MockVerifier) -> str:
    env = {
        "SEALBENCH_BENCHMARK_ID": "7",
        "SEALBENCH_METRICS_VERSION": "brats-2023-gli/1",
        "SEALBENCH_DATA_DIGEST": DATA,
        "SEALBENCH_MODEL_DIGEST": MODEL,
        "SEALBENCH_RUN_ID": "r1",
    }
    launch = WorkloadLaunch(IMAGE, f"r@{IMAGE}", env)
    return verifier.mint(launch, RESULT_AUDIENCE, [result_nonce(SUMMARY, SEALED)])


def _registry(
    verifier: MockVerifier, trusted: TrustedIssuer, platforms: Mapping[str, Platform] | None
) -> ResultVerifier:
    jwks = JwksCache(
        _Fetcher({JWKS_URL: json.dumps(verifier.jwks()).encode()}), ttl=60, clock=lambda: NOW
    )
    return ResultVerifier((trusted,), jwks, lambda: NOW, platforms)


def test_result_checked_by_the_named_platform_with_the_registrys_requirements(
    verifier: MockVerifier,
) -> None:
    recording = RecordingPlatform()
    trusted = TrustedIssuer(issuer=ISSUER, jwks_url=JWKS_URL)
    registry = _registry(verifier, trusted, {"confidential-space": recording})  # type: ignore[dict-item]
    verified = registry.verify(_token(verifier), summary=SUMMARY, **FACTS)
    assert verified.image_digest == IMAGE
    (asked,) = recording.asked
    assert asked is not None and asked.allowed_image_digests == {IMAGE}
    assert asked.expected_nonce == result_nonce(SUMMARY, SEALED)
    assert dict(asked.expected_env_overrides) == {
        "SEALBENCH_BENCHMARK_ID": "7",
        "SEALBENCH_METRICS_VERSION": "brats-2023-gli/1",
        "SEALBENCH_DATA_DIGEST": DATA,
        "SEALBENCH_MODEL_DIGEST": MODEL,
    }


def test_result_of_another_benchmark_refused_by_the_registry_platform(
    verifier: MockVerifier,
) -> None:
    trusted = TrustedIssuer(issuer=ISSUER, jwks_url=JWKS_URL)
    registry = _registry(verifier, trusted, None)  # the registry's own lookup by name
    with pytest.raises(ResultRejectedError, match="SEALBENCH_BENCHMARK_ID"):
        registry.verify(_token(verifier), summary=SUMMARY, **{**FACTS, "benchmark_id": "8"})


def test_issuer_naming_a_platform_not_installed_stops_the_registry(verifier: MockVerifier) -> None:
    trusted = TrustedIssuer(issuer=ISSUER, jwks_url=JWKS_URL, platform="nitro")
    with pytest.raises(
        ConfigurationError, match=r"'nitro': no TEE platform named 'nitro' is installed"
    ):
        _registry(verifier, trusted, None)


def test_registry_with_a_mock_issuer_loads_the_mock_platform(verifier: MockVerifier) -> None:
    # The mock's trusted-issuer entry names insecure-mock; its results are checked with it.
    trusted = TrustedIssuer(issuer=ISSUER, jwks_url=JWKS_URL, platform="insecure-mock")
    registry = _registry(verifier, trusted, None)
    assert registry.verify(_token(verifier), summary=SUMMARY, **FACTS).image_digest == IMAGE
    with pytest.raises(ResultRejectedError, match="eat_nonce"):
        registry.verify(_token(verifier), summary={**SUMMARY, "cases": 3}, **FACTS)


def test_platform_name_is_validated() -> None:
    with pytest.raises(ValueError):
        TrustedIssuer(issuer=ISSUER, jwks_url=JWKS_URL, platform="../evil:Module")


# -- failure tokens (issue 28): the enclave's attested failure record ---------------------------

RECORD: dict[str, object] = {
    "format": "sealbench/run-failure", "version": 1, "run_id": "r1",
    "step": "download, verify and load the model", "error": "AssetIntegrityError",
    "reason": "the sealed model does not match its digest", "exit_code": 14,
}
FAILURE_FACTS = {k: v for k, v in FACTS.items() if k != "sealed_result_digest"}


def _failure_token(verifier: MockVerifier, record: Mapping[str, object] = RECORD) -> str:
    env = {
        "SEALBENCH_BENCHMARK_ID": "7",
        "SEALBENCH_METRICS_VERSION": "brats-2023-gli/1",
        "SEALBENCH_DATA_DIGEST": DATA,
        "SEALBENCH_MODEL_DIGEST": MODEL,
        "SEALBENCH_RUN_ID": "r1",
    }
    launch = WorkloadLaunch(IMAGE, f"r@{IMAGE}", env)
    return verifier.mint(launch, FAILURE_AUDIENCE, [failure_nonce(canonical_json(record))])


def test_failure_nonce_is_domain_separated_from_the_result_nonce() -> None:
    """Even fed the very document a result nonce hashes, the failure nonce differs: its own
    document has other members (the record's digest and a purpose)."""
    document = canonical_json({"sealed_result_sha256": SEALED, "summary": SUMMARY})
    assert failure_nonce(document) != result_nonce(SUMMARY, SEALED)
    assert failure_nonce(canonical_json(RECORD)) != failure_nonce(
        canonical_json({**RECORD, "error": "KeyReleaseDenied"}))
    assert len(failure_nonce(b"x")) == 64 and FAILURE_AUDIENCE != RESULT_AUDIENCE


def test_failure_token_never_passes_as_a_result_token_nor_a_result_token_as_a_failure(
    verifier: MockVerifier,
) -> None:
    registry = _registry(verifier, TrustedIssuer(issuer=ISSUER, jwks_url=JWKS_URL), None)
    failure = _failure_token(verifier)
    assert registry.verify_failure(failure, record=RECORD, **FAILURE_FACTS).image_digest == IMAGE
    with pytest.raises(ResultRejectedError, match="aud"):
        registry.verify(failure, summary=SUMMARY, **FACTS)
    with pytest.raises(ResultRejectedError, match="aud"):
        registry.verify_failure(_token(verifier), record=RECORD, **FAILURE_FACTS)
    # a failure token of another record (another error class) does not attest this one
    with pytest.raises(ResultRejectedError, match="nonce"):
        registry.verify_failure(failure, record={**RECORD, "error": "KeyReleaseDenied"},
                                **FAILURE_FACTS)
    # nor one of another model
    with pytest.raises(ResultRejectedError):
        registry.verify_failure(failure, record=RECORD,
                                **{**FAILURE_FACTS, "model_digest": sha256_digest(b"other")})
