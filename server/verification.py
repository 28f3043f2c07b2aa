"""Verifying a submitted result's attestation token against the registry's own records.

The token must come from a configured trusted issuer (Google's Confidential Space issuer by
default; a local mock issuer only when the operator lists it), verify against that issuer's
JWKS with audience ``sealbench-result``, and satisfy the rules of the issuer's TEE platform
(:class:`~sealbench.platforms.platform.Platform`, named by
:attr:`~sealbench.server.settings.TrustedIssuer.platform` and found through the platform
registry; this module names no implementation) plus
:class:`~sealbench.platforms.platform.WorkloadRequirements` built from the registry: the benchmark's
image digest; the benchmark's id and metrics version and the dataset's and model's digests as
attested env overrides (``SEALBENCH_BENCHMARK_ID``, ``SEALBENCH_METRICS_VERSION``,
``SEALBENCH_DATA_DIGEST``, ``SEALBENCH_MODEL_DIGEST``) — so a result computed for one benchmark
or metrics version cannot be filed under another that shares the image — and ``eat_nonce`` equal to
:func:`~sealbench.crypto.attestation.result_nonce` of the submitted summary and sealed-result
digest; the platform's production rules (Confidential Space: no debug image, confidential
hardware with secure boot, no command override); no env override outside
the evaluation image's allow-list (the run spec's names, :mod:`sealbench.contract.spec`, the wire
contract the server may import); and the endpoint overrides absent for Google's issuer or equal
to the configured mock's. Any failure raises :class:`~sealbench.server.errors.ResultRejectedError`
naming it.

:meth:`ResultVerifier.verify_failure` checks an enclave's attested failure record the same way,
at audience ``sealbench-failure`` with ``eat_nonce`` equal to
:func:`~sealbench.crypto.attestation.failure_nonce` of the record's canonical JSON; neither kind
of token passes as the other.

:meth:`ResultVerifier.verify_pooled` checks the benchmark's aggregator's release token (issue 27)
the same way, at audience ``sealbench-pool`` with ``eat_nonce`` equal to
:func:`~sealbench.contract.pool.pooled_nonce` of the sealed release's exact bytes, against the
benchmark's **aggregator** image, with the aggregate spec's uid fields as attested overrides (the
benchmark id and pin, the model digest, the benchmark's pool recipient) and the pool-inputs
digest the release repeats; no data digest (it pools many datasets) and no override outside the
aggregator image's allow-list (:data:`~sealbench.contract.pool.AGGREGATE_ENV_NAMES`).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from sealbench.contract.pin import BenchmarkPin
from sealbench.contract.pool import (
    AGGREGATE_ENV_NAMES,
    ENV_POOL_INPUTS_DIGEST,
    POOL_AUDIENCE,
    pooled_nonce,
)
from sealbench.contract.spec import ENDPOINT_ENV_NAMES, ENV_OVERRIDE_NAMES
from sealbench.contract.workload import (
    ENV_BENCHMARK_ID,
    ENV_DATA_DIGEST,
    ENV_METRICS_VERSION,
    ENV_MODEL_DIGEST,
    ENV_RECIPIENT_DIGEST,
)
from sealbench.crypto.attestation import (
    FAILURE_AUDIENCE,
    RESULT_AUDIENCE,
    failure_nonce,
    result_nonce,
)
from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.digest import parse_digest
from sealbench.crypto.errors import CryptoError
from sealbench.platforms.errors import CloudError
from sealbench.platforms.platform import Platform, WorkloadRequirements, load_platform
from sealbench.server.errors import ConfigurationError, ResultRejectedError
from sealbench.server.jwks import JwksCache
from sealbench.server.settings import TrustedIssuer

__all__ = ["ResultVerifier", "VerifiedResult"]

#: Run-spec overrides a result token may carry with any value: the image's allow-list less the
#: endpoints, which are pinned per issuer (:class:`~sealbench.server.settings.TrustedIssuer`).
_OTHER_RUN_SPEC_NAMES = frozenset(ENV_OVERRIDE_NAMES) - set(ENDPOINT_ENV_NAMES)
#: The aggregator's overrides that bear on nothing the registry checks (its run id, where it read
#: the inputs and wrote the release, the authority's pool, the IAM wait).
_OTHER_AGGREGATE_NAMES = frozenset(AGGREGATE_ENV_NAMES) - set(ENDPOINT_ENV_NAMES) - {
    ENV_BENCHMARK_ID, ENV_METRICS_VERSION, ENV_MODEL_DIGEST, ENV_RECIPIENT_DIGEST,
    ENV_POOL_INPUTS_DIGEST}


@dataclass(frozen=True)
class VerifiedResult:
    issuer: str
    nonce: str
    image_digest: str


def _unverified_claims(token: str) -> tuple[str, str]:
    """(issuer, kid) read before verification, only to pick the issuer's key set."""
    parts = token.split(".")
    if len(parts) != 3:
        raise ResultRejectedError("the attestation token is not a compact JWS")
    try:
        header = json.loads(base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)))
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError) as exc:
        raise ResultRejectedError("the attestation token is not a compact JWS") from exc
    if not isinstance(header, dict) or not isinstance(payload, dict):
        raise ResultRejectedError("the attestation token is not a compact JWS")
    issuer, kid = payload.get("iss"), header.get("kid")
    if not isinstance(issuer, str) or not isinstance(kid, str):
        raise ResultRejectedError("the attestation token lacks an issuer or key id")
    return issuer, kid


def _evaluation(benchmark_id: str, metrics_version: BenchmarkPin, dataset_digest: str,
                model_digest: str) -> dict[str, str]:
    """The evaluation's attested overrides a result or failure token must carry."""
    return {
        ENV_BENCHMARK_ID: benchmark_id,
        ENV_METRICS_VERSION: str(metrics_version),
        ENV_DATA_DIGEST: dataset_digest,
        ENV_MODEL_DIGEST: model_digest,
    }


class ResultVerifier:
    """Verifies result tokens against the configured trusted issuers at ``clock()`` time."""

    def __init__(
        self,
        trusted: tuple[TrustedIssuer, ...],
        jwks: JwksCache,
        clock: Callable[[], float],
        platforms: Mapping[str, Platform] | None = None,
    ) -> None:
        """``platforms`` maps a platform name to its implementation; each trusted issuer's
        platform it lacks (all of them when None) is loaded from the platform registry here, so
        a trusted issuer naming a platform that is not installed stops the registry at start
        (:class:`~sealbench.server.errors.ConfigurationError`) instead of refusing every result
        later."""
        self._trusted = {t.issuer: t for t in trusted}
        self._jwks = jwks
        self._clock = clock
        loaded: dict[str, Platform] = dict(platforms or {})
        for issuer in trusted:
            if issuer.platform not in loaded:
                try:
                    loaded[issuer.platform] = load_platform(issuer.platform)
                except CloudError as exc:
                    raise ConfigurationError(
                        f"the trusted issuer {issuer.issuer[:80]!r} names the TEE platform "
                        f"{issuer.platform!r}: {exc}"
                    ) from exc
        self._platforms: Mapping[str, Platform] = MappingProxyType(loaded)

    def prefetch_keys(self, token: str) -> None:
        """Fetch (or find cached) the key set a token will need, before the caller opens a
        write transaction, so that no database lock is held across a network fetch. Tokens
        that are malformed or from untrusted issuers are left for :meth:`verify` to refuse."""
        try:
            issuer, kid = _unverified_claims(token)
        except ResultRejectedError:
            return
        trusted = self._trusted.get(issuer)
        if trusted is not None:
            self._jwks.get(trusted.jwks_url, kid)

    def verify(
        self,
        token: str,
        *,
        image_digest: str,
        benchmark_id: str,
        metrics_version: BenchmarkPin,
        dataset_digest: str,
        model_digest: str,
        summary: Mapping[str, object],
        sealed_result_digest: str,
        accept_experimental_gpu: bool = False,
    ) -> VerifiedResult:
        """A result token: audience ``sealbench-result``, nonce :func:`result_nonce` of
        ``summary`` and ``sealed_result_digest``."""
        try:
            nonce = result_nonce(summary, parse_digest(sealed_result_digest))
        except (CryptoError, ValueError) as exc:
            raise ResultRejectedError(f"the result attestation was refused: {exc}") from exc
        return self._verify(
            token, RESULT_AUDIENCE, nonce, "result", image_digest=image_digest,
            expected=_evaluation(benchmark_id, metrics_version, dataset_digest, model_digest),
            allowed_extra=_OTHER_RUN_SPEC_NAMES,
            accept_experimental_gpu=accept_experimental_gpu)

    def verify_failure(
        self,
        token: str,
        *,
        record: Mapping[str, object],
        image_digest: str,
        benchmark_id: str,
        metrics_version: BenchmarkPin,
        dataset_digest: str,
        model_digest: str,
        accept_experimental_gpu: bool = False,
    ) -> VerifiedResult:
        """A failure token (the enclave's attestation of its own failure record): audience
        ``sealbench-failure``, nonce :func:`failure_nonce` of the record's canonical JSON (the
        exact bytes the enclave wrote), and every workload rule a result token meets: trusted
        issuer and its JWKS, the benchmark's image, its id and metrics version and the run's
        dataset and model digests as attested overrides, the platform's production rules. A
        result token never passes (another audience and nonce), nor this one as a result."""
        try:
            nonce = failure_nonce(canonical_json(dict(record)))
        except (CryptoError, ValueError, TypeError) as exc:
            raise ResultRejectedError(f"the failure attestation was refused: {exc}") from exc
        return self._verify(
            token, FAILURE_AUDIENCE, nonce, "failure", image_digest=image_digest,
            expected=_evaluation(benchmark_id, metrics_version, dataset_digest, model_digest),
            allowed_extra=_OTHER_RUN_SPEC_NAMES,
            accept_experimental_gpu=accept_experimental_gpu)

    def verify_pooled(
        self,
        token: str,
        *,
        release: bytes,
        aggregator_image_digest: str,
        benchmark_id: str,
        metrics_version: BenchmarkPin,
        model_digest: str,
        inputs_digest: str,
        recipient_digest: str,
        accept_experimental_gpu: bool = False,
    ) -> VerifiedResult:
        """A pooled-release token (the aggregator's, issue 27): audience ``sealbench-pool``,
        nonce :func:`~sealbench.contract.pool.pooled_nonce` of ``release`` (the exact bytes of
        ``pooled.sealed``), the benchmark's aggregator image, the aggregate spec's uid fields
        (``recipient_digest``: the benchmark's pool recipient) and ``inputs_digest`` as attested
        overrides, and the platform's production rules. Neither a result nor a failure token
        passes (other audiences and nonces)."""
        return self._verify(
            token, POOL_AUDIENCE, pooled_nonce(release), "pooled release",
            image_digest=aggregator_image_digest,
            expected={
                ENV_BENCHMARK_ID: benchmark_id,
                ENV_METRICS_VERSION: str(metrics_version),
                ENV_MODEL_DIGEST: model_digest,
                ENV_RECIPIENT_DIGEST: recipient_digest,
                ENV_POOL_INPUTS_DIGEST: inputs_digest,
            },
            allowed_extra=_OTHER_AGGREGATE_NAMES,
            accept_experimental_gpu=accept_experimental_gpu)

    def _verify(
        self,
        token: str,
        audience: str,
        nonce: str,
        what: str,
        *,
        image_digest: str,
        expected: Mapping[str, str],
        allowed_extra: frozenset[str],
        accept_experimental_gpu: bool,
    ) -> VerifiedResult:
        issuer, kid = _unverified_claims(token)
        trusted = self._trusted.get(issuer)
        if trusted is None:
            raise ResultRejectedError(
                f"the attestation token's issuer {issuer[:80]!r} is not trusted by this registry"
            )
        platform = self._platforms[trusted.platform]
        jwks = self._jwks.get(trusted.jwks_url, kid)
        try:
            endpoints = {} if trusted.endpoints is None else trusted.endpoints.env_overrides()
            requirements = WorkloadRequirements(
                allowed_image_digests=frozenset({image_digest}),
                expected_env_overrides={
                    **expected,
                    # Google's issuer: no endpoint override at all; the mock's: its own URLs.
                    **endpoints,
                },
                expected_nonce=nonce,
                # The spec's other overrides (URIs, run id, the recipient) do not bear on which
                # benchmark, image, data and model produced the document; any name outside the
                # image's allow-list (the spec's names) is refused.
                allowed_extra_env_overrides=allowed_extra,
                accept_experimental_gpu=accept_experimental_gpu,
            )
            workload = platform.verify(
                token,
                jwks,
                issuer=trusted.issuer,
                audience=audience,
                now=self._clock(),
                requirements=requirements,
            )
        except (CryptoError, ValueError) as exc:
            raise ResultRejectedError(f"the {what} attestation was refused: {exc}") from exc
        return VerifiedResult(
            issuer=trusted.issuer, nonce=nonce, image_digest=workload.image_digest
        )
