"""The run specification: everything the enclave is told, read only from the attested environment.

On Confidential Space the operator passes these as ``tee-env-<NAME>`` metadata; the launcher
applies only names listed in the image label ``tee.launch_policy.allow_env_override`` (which is
exactly :data:`ENV_OVERRIDE_NAMES`) and records them in the attestation token's
``submods.container.env_override``. Key release is bound to the digests among them, so whatever
the operator sets here is what the key owners' policies and the result attestation see.

This module imports only pydantic and sealbench.crypto (it crosses the wire: launchers build a
:class:`RunSpec` and turn it into environment variables with :meth:`RunSpec.to_environ`).

Variables (all required unless a default is given)::

    SEALBENCH_RUN_ID                 run id (1-64 chars of [A-Za-z0-9._-])
    SEALBENCH_BENCHMARK_ID           benchmark id on the registry
    SEALBENCH_METRICS_VERSION        benchmark plug-in <name>/<version> ("brats-2023-gli/1")
    SEALBENCH_DATASET_ID             dataset id on the registry
    SEALBENCH_DATASET_URI            sealed dataset: gs://bucket/prefix or file:///abs/path
    SEALBENCH_DATASET_KMS_KEY        projects/P/locations/L/keyRings/R/cryptoKeys/K
    SEALBENCH_DATASET_POOL_PROVIDER  projects/N/locations/global/workloadIdentityPools/P/providers/V
    SEALBENCH_MODEL_ID, _URI, _KMS_KEY, _POOL_PROVIDER     the same for the model
    SEALBENCH_RESULT_URI             where the sealed result, summary and token are written
    SEALBENCH_RECIPIENT_PUBLIC_KEY   the data owner's X25519 result key, base64 of the 32 raw bytes
    SEALBENCH_DATA_DIGEST            expected manifest digest of the dataset (sha256:…)
    SEALBENCH_MODEL_DIGEST           expected digest of the ONNX weights (sha256:…)
    SEALBENCH_RECIPIENT_DIGEST       expected digest of the recipient public key (sha256:…)
    SEALBENCH_STS_URL                token exchange URL       (absent: the platform's own,
    SEALBENCH_KMS_ENDPOINT           key service endpoint      Google's on Confidential Space)
    SEALBENCH_STORAGE_ENDPOINT       storage endpoint
    SEALBENCH_IAM_WAIT               seconds the enclave keeps retrying a key or storage
                                     refusal while a fresh grant propagates (absent: 0, none;
                                     at most 6 digits; honoured up to MAX_IAM_WAIT_S, 900)
    SEALBENCH_CPU_FALLBACK           ``true``: a run on a GPU VM whose model ends on ONNX
                                     Runtime's CPU provider goes on (absent or ``false``: fails)

The last two are *inert* operator inputs (:mod:`sealbench.contract.inputs` says why): they decide
only how long the enclave waits before it reports a refusal, and whether a CPU fallback fails
the run; they change nothing that is released, read, computed or sent. Their names are short:
every override name is listed in each owner's key-release condition, which Google caps at 4,096
characters.

The three endpoint variables exist only so the very same image runs against the local mock
cloud: they are where the workload sends its attestation token and its access tokens, so they are
*pinned* (:mod:`sealbench.contract.inputs`): a production key-release condition requires them
absent, the mock's requires its own exact URLs, and the enclave refuses to send a token to an
endpoint that does not belong to the platform that attested it. An endpoint is ``https://`` on
any host, or ``http://`` on the loopback interface only; userinfo, query and fragment are refused.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Final, NewType

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from sealbench.contract.locations import storage_uri_problem
from sealbench.contract.pin import Pin
from sealbench.contract.workload import (
    BENCHMARK_ID_PATTERN,
    ENV_BENCHMARK_ID,
    ENV_DATA_DIGEST,
    ENV_METRICS_VERSION,
    ENV_MODEL_DIGEST,
    ENV_RECIPIENT_DIGEST,
)
from sealbench.crypto.digest import Sha256Digest, parse_digest, sha256_digest

__all__ = [
    "ENDPOINT_ENV_NAMES",
    "ENDPOINT_FIELDS",
    "ENDPOINT_PATTERN",
    "ENV_ALLOW_CPU_FALLBACK",
    "ENV_IAM_WAIT",
    "ENV_OVERRIDE_NAMES",
    "ENV_RECIPIENT_PUBLIC_KEY",
    "KMS_KEY_PATTERN",
    "MAX_IAM_WAIT_S",
    "POOL_PROVIDER_PATTERN",
    "STORAGE_URI_PATTERN",
    "AssetLocation",
    "RecipientKey",
    "RunSpec",
    "RunSpecError",
    "ServiceEndpoints",
    "StorageUri",
]

RunId = NewType("RunId", str)

#: The longest wait for IAM to apply a grant the enclave honours, whatever the run spec says
#: (Google: "typically 2 minutes, potentially 7 minutes or longer").
MAX_IAM_WAIT_S: Final = 900

_ID_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
#: A sealed asset's or result's location: ``gs://bucket[/prefix]`` or ``file:///abs/path`` (no
#: control characters). The registry validates stored coordinates with the same patterns.
STORAGE_URI_PATTERN: Final = (
    r"^(gs://[a-z0-9][a-z0-9._-]{1,220}(/[A-Za-z0-9._/-]*)?|file:///[^\x00-\x1f\x7f]+)$"
)
#: A Cloud KMS crypto key resource name (project ids, also domain-scoped ``example.com:p``;
#: key ring and key ids as Cloud KMS allows them: ``[A-Za-z0-9_-]``).
KMS_KEY_PATTERN: Final = (
    r"^projects/[a-z0-9][a-z0-9.:-]{0,62}/locations/[a-z0-9-]{1,63}"
    r"/keyRings/[A-Za-z0-9_-]{1,63}/cryptoKeys/[A-Za-z0-9_-]{1,63}$"
)
#: A workload identity pool provider resource name (project by number, as STS requires).
POOL_PROVIDER_PATTERN: Final = (
    r"^projects/[0-9]{1,20}/locations/global/workloadIdentityPools/[a-z0-9-]{4,32}"
    r"/providers/[a-z0-9-]{4,32}$"
)
_KMS_KEY_RE = KMS_KEY_PATTERN
_PROVIDER_RE = POOL_PROVIDER_PATTERN
#: ``https://host[:port][/path]``, or ``http://`` on loopback only (the mock cloud); no userinfo,
#: query or fragment. The key-release condition pins the exact value on top of this.
ENDPOINT_PATTERN: Final = (
    r"^(https://[A-Za-z0-9][A-Za-z0-9.-]{0,252}"
    r"|http://(127\.0\.0\.1|localhost|\[::1\]))(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?$"
)
_ENDPOINT_RE = ENDPOINT_PATTERN


@dataclass(frozen=True)
class ServiceEndpoints:
    """The three services a workload sends tokens to: STS (its attestation token), KMS and
    storage (the federated access tokens)."""

    sts_url: str
    kms_endpoint: str
    storage_endpoint: str

    def __post_init__(self) -> None:
        for field in ENDPOINT_FIELDS:
            if not re.fullmatch(ENDPOINT_PATTERN, getattr(self, field)):
                raise ValueError(f"{field}: not an https (or loopback http) URL without userinfo")

    def env_names(self) -> dict[str, str]:
        """``{env override name: value}`` for the three endpoints."""
        return {_ENV[field]: getattr(self, field) for field in ENDPOINT_FIELDS}


#: The run-spec fields that name a token destination.
ENDPOINT_FIELDS: Final = ("sts_url", "kms_endpoint", "storage_endpoint")


class RunSpecError(ValueError):
    """The attested environment does not hold a valid run specification. ``field`` names the
    environment variable at fault; the message never repeats its value."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        super().__init__(f"{field}: {problem}")


def _storage_uri(value: str) -> str:
    """Beyond the pattern, what the enclave's storage layer will accept when it opens the
    location (no ``.``/``..``/empty segment, a valid bucket name, no reserved prefix)."""
    problem = storage_uri_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


#: A storage location as the enclave will open it (the registry validates coordinates with it).
StorageUri = Annotated[str, Field(pattern=STORAGE_URI_PATTERN), AfterValidator(_storage_uri)]


def _digest(value: str) -> Sha256Digest:
    return parse_digest(value)


def _recipient_key(value: str) -> str:
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("expected base64 of a 32-byte X25519 public key") from exc
    if len(raw) != 32:
        raise ValueError(f"expected a 32-byte X25519 public key, received {len(raw)} bytes")
    return value


Digest = Annotated[str, AfterValidator(_digest)]
#: An X25519 public key as a run spec carries it: base64 of the 32 raw bytes.
RecipientKey = Annotated[str, AfterValidator(_recipient_key)]
#: The variable that carries the result's (or pooled release's) recipient key.
ENV_RECIPIENT_PUBLIC_KEY: Final = "SEALBENCH_RECIPIENT_PUBLIC_KEY"


class AssetLocation(BaseModel):
    """Where one owner's sealed asset lives and how its key is released."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    asset_id: str = Field(pattern=_ID_RE)
    uri: StorageUri
    kms_key: str = Field(pattern=_KMS_KEY_RE)
    pool_provider: str = Field(pattern=_PROVIDER_RE)



class RunSpec(BaseModel):
    """One confidential evaluation: which benchmark, which assets, where the result goes, and
    the digests that key release and the result attestation are bound to."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str = Field(pattern=_ID_RE)
    #: The registry's id of the benchmark (decimal) and its plug-in pin: both are fields of the
    #: workload uid the owners' grants name (:mod:`sealbench.contract.workload`).
    benchmark_id: str = Field(pattern=BENCHMARK_ID_PATTERN)
    metrics_version: Pin
    dataset: AssetLocation
    model: AssetLocation
    result_uri: StorageUri
    recipient_public_key: RecipientKey
    data_digest: Digest
    model_digest: Digest
    recipient_digest: Digest
    #: Endpoint overrides; None (the variable absent) means the attesting platform's own fixed
    #: destinations (Google's, on Confidential Space), as in production.
    sts_url: str | None = Field(default=None, pattern=_ENDPOINT_RE)
    kms_endpoint: str | None = Field(default=None, pattern=_ENDPOINT_RE)
    storage_endpoint: str | None = Field(default=None, pattern=_ENDPOINT_RE)
    #: Seconds to keep retrying a permission refusal after a successful token exchange (a grant
    #: written by a recent ``policy sync`` that IAM has not applied yet); decimal, clamped by
    #: :attr:`iam_wait_seconds`. None: no wait.
    iam_wait_s: str | None = Field(default=None, pattern=r"^[0-9]{1,6}$")
    #: ``true``: a GPU run whose model runs on the CPU is not failed for it.
    allow_cpu_fallback: str | None = Field(default=None, pattern=r"^(true|false)$")

    @property
    def iam_wait_seconds(self) -> int:
        """The wait the enclave honours: the spec's, at most :data:`MAX_IAM_WAIT_S`."""
        return min(int(self.iam_wait_s or 0), MAX_IAM_WAIT_S)

    @property
    def cpu_fallback_allowed(self) -> bool:
        return self.allow_cpu_fallback == "true"

    @property
    def recipient_key_bytes(self) -> bytes:
        return base64.b64decode(self.recipient_public_key)

    def check_recipient(self) -> None:
        """Raise :class:`RunSpecError` unless the recipient key hashes to its expected digest."""
        actual = sha256_digest(self.recipient_key_bytes)
        if actual != self.recipient_digest:
            raise RunSpecError(
                _ENV["recipient_digest"],
                f"the recipient public key hashes to {actual}, not the expected digest",
            )

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> RunSpec:
        """Parse the run specification from ``environ``; only the names in
        :data:`ENV_OVERRIDE_NAMES` are read. Raises :class:`RunSpecError` naming the first
        missing or malformed variable, or an aggregator-only variable that is set (issue 27:
        the key-release condition admits the aggregator's names too, so the evaluation refuses
        them itself: an evaluation run never carries an input only the aggregator reads)."""
        from sealbench.contract.pool import AGGREGATE_ENV_NAMES  # pool imports this module

        foreign = sorted(n for n in AGGREGATE_ENV_NAMES if n not in _ENV.values() and n in environ)
        if foreign:
            raise RunSpecError(foreign[0], "set, but only the aggregator reads it")
        flat = {field: environ.get(name) for field, name in _ENV.items()}
        for field, name in _ENV.items():
            if flat[field] is None and field not in _OPTIONAL:
                raise RunSpecError(name, "missing")
        values: dict[str, object] = {
            k: v for k, v in flat.items() if k in _TOP_LEVEL and v is not None
        }
        for asset in ("dataset", "model"):
            values[asset] = {
                "asset_id": flat[f"{asset}_id"],
                "uri": flat[f"{asset}_uri"],
                "kms_key": flat[f"{asset}_kms_key"],
                "pool_provider": flat[f"{asset}_pool_provider"],
            }
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = "_".join(str(part) for part in err["loc"])
            loc = loc.replace("_asset_id", "_id")
            name = _ENV.get(loc, loc)
            raise RunSpecError(name, _problem(err["msg"])) from None

    def to_environ(self) -> dict[str, str]:
        """The environment variables (attested env overrides) that encode this spec."""
        out = {
            _ENV["run_id"]: self.run_id,
            _ENV["benchmark_id"]: self.benchmark_id,
            _ENV["metrics_version"]: str(self.metrics_version),
            _ENV["result_uri"]: self.result_uri,
            _ENV["recipient_public_key"]: self.recipient_public_key,
            _ENV["data_digest"]: self.data_digest,
            _ENV["model_digest"]: self.model_digest,
            _ENV["recipient_digest"]: self.recipient_digest,
        }
        for field in _OPTIONAL:
            value = getattr(self, field)
            if value is not None:
                out[_ENV[field]] = value
        for asset_name, asset in (("dataset", self.dataset), ("model", self.model)):
            out[_ENV[f"{asset_name}_id"]] = asset.asset_id
            out[_ENV[f"{asset_name}_uri"]] = asset.uri
            out[_ENV[f"{asset_name}_kms_key"]] = asset.kms_key
            out[_ENV[f"{asset_name}_pool_provider"]] = asset.pool_provider
        return out


def _problem(msg: str) -> str:
    # pydantic messages quote patterns, not values, so they are safe to show.
    return re.sub(r"^Value error, ", "", msg)


_ENV: Final[dict[str, str]] = {
    "run_id": "SEALBENCH_RUN_ID",
    "benchmark_id": ENV_BENCHMARK_ID,
    "metrics_version": ENV_METRICS_VERSION,
    "dataset_id": "SEALBENCH_DATASET_ID",
    "dataset_uri": "SEALBENCH_DATASET_URI",
    "dataset_kms_key": "SEALBENCH_DATASET_KMS_KEY",
    "dataset_pool_provider": "SEALBENCH_DATASET_POOL_PROVIDER",
    "model_id": "SEALBENCH_MODEL_ID",
    "model_uri": "SEALBENCH_MODEL_URI",
    "model_kms_key": "SEALBENCH_MODEL_KMS_KEY",
    "model_pool_provider": "SEALBENCH_MODEL_POOL_PROVIDER",
    "result_uri": "SEALBENCH_RESULT_URI",
    "recipient_public_key": ENV_RECIPIENT_PUBLIC_KEY,
    "data_digest": ENV_DATA_DIGEST,
    "model_digest": ENV_MODEL_DIGEST,
    "recipient_digest": ENV_RECIPIENT_DIGEST,
    "sts_url": "SEALBENCH_STS_URL",
    "kms_endpoint": "SEALBENCH_KMS_ENDPOINT",
    "storage_endpoint": "SEALBENCH_STORAGE_ENDPOINT",
    "iam_wait_s": "SEALBENCH_IAM_WAIT",
    "allow_cpu_fallback": "SEALBENCH_CPU_FALLBACK",
}
_OPTIONAL: Final = (*ENDPOINT_FIELDS, "iam_wait_s", "allow_cpu_fallback")
_TOP_LEVEL: Final = frozenset(RunSpec.model_fields) - {"dataset", "model"}

#: Every environment variable the evaluation image lets the operator override (the value of the
#: image label ``tee.launch_policy.allow_env_override``).
ENV_OVERRIDE_NAMES: Final[tuple[str, ...]] = tuple(_ENV.values())
#: The env override name of the IAM wait and of the CPU-fallback allowance.
ENV_IAM_WAIT: Final = _ENV["iam_wait_s"]
ENV_ALLOW_CPU_FALLBACK: Final = _ENV["allow_cpu_fallback"]
#: The env override names of the three token destinations.
ENDPOINT_ENV_NAMES: Final[tuple[str, ...]] = tuple(_ENV[f] for f in ENDPOINT_FIELDS)
