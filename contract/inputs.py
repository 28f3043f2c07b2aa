"""Every input the operator controls at launch and its class: the one table each platform renders
its key-release condition from.

The operator (the hospital that launches a run) chooses the run spec's env overrides
(``tee-env-*``), the command, mounts and the rest of the VM's metadata, and the VM itself
(confidential instance type, secure boot, the Confidential Space image). Each input is exactly
one of:

``bound``   part of the workload identity the owners grant (the workload uid
            ``image::data::model::recipient`` of :mod:`sealbench.contract.workload`): a run with
            another value maps to a uid nobody granted.
``pinned``  the key-release condition requires an exact value or absence (endpoints, the
            command, the hardware, the image family), so a token from a run with another value
            federates to nothing, wherever it is replayed.
``inert``   cannot change where data, keys or tokens go, or what is computed; each entry says why.

:data:`OPERATOR_INPUTS` is the table; a platform renders it into its key-release condition
(Confidential Space: the CEL attribute condition of an owner's workload identity pool provider,
:func:`sealbench.gcp.confidential_space.render_condition`, evaluated by Google's STS and, with
cel-python, by the mock's) for a :class:`ConditionContext`. :func:`check_token_destinations` is
the enclave's own defence in depth: it refuses to send a token to an endpoint of another
platform than the one that attested it. A name in
:data:`ALL_OVERRIDE_NAMES` (the evaluation's and the aggregator's overrides, issue 27) without
an entry here makes the rendering raise, and a test renders the condition and evaluates it
against a token with each input tampered.

This module imports only the standard library, pydantic (through the run spec) and
:mod:`sealbench.crypto`: the platforms, the policy writer, the registry and the mock use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from sealbench.contract.pool import (
    AGGREGATE_ENV_NAMES,
    ENV_POOL_INPUTS_DIGEST,
    ENV_POOL_INPUTS_URI,
    ENV_POOL_LOG_KEY,
    ENV_POOL_WITNESS_QUORUM,
    ENV_POOL_WITNESSES,
    ENV_RESULT_POOL_PROVIDER,
)
from sealbench.contract.spec import (
    ENDPOINT_ENV_NAMES,
    ENV_ALLOW_CPU_FALLBACK,
    ENV_IAM_WAIT,
    ENV_OVERRIDE_NAMES,
    MAX_IAM_WAIT_S,
    ServiceEndpoints,
)
from sealbench.contract.workload import ENV_BENCHMARK_ID, ENV_DATA_DIGEST, ENV_METRICS_VERSION

__all__ = [
    "ALL_OVERRIDE_NAMES",
    "ENV_INPUTS",
    "OPERATOR_INPUTS",
    "POOL_ONLY_NAMES",
    "ConditionContext",
    "ConditionInputError",
    "InputClass",
    "OperatorInput",
    "Rule",
    "TokenDestinationError",
    "check_token_destinations",
]

_ENV_CLAIM: Final = "submods.container.env_override"


class InputClass(StrEnum):
    BOUND = "bound"
    PINNED = "pinned"
    INERT = "inert"


class Rule(StrEnum):
    """How the key-release condition enforces a bound or pinned input (inert inputs have none)."""

    #: a workload-uid field, mapped into the uid the owner's grant names: must have its field's
    #: shape (a sha256 digest, a decimal benchmark id, a plug-in pin; no ``::`` smuggling)
    UID_FIELD = "uid-field"
    #: bound through another input: the enclave refuses a value that does not hash to it
    BOUND_BY_DIGEST = "bound-by-digest"
    #: repeated in the attested release, which the registry refuses unless it is what it asked
    #: for (the aggregator's inputs digest, issue 27)
    RELEASE_BOUND = "release-bound"
    #: the image digest is one of the approved benchmarks' images (and the uid's first field)
    IMAGE = "image"
    #: absent in production (Google's HTTPS endpoint); the mock's exact URL on the mock
    ENDPOINT = "endpoint"
    #: no ``tee-cmd``: ``cmd_override`` absent, null or empty
    NO_COMMAND = "no-command"
    #: no env override outside :data:`ALL_OVERRIDE_NAMES` (the evaluation's and the
    #: aggregator's)
    KNOWN_OVERRIDES_ONLY = "known-overrides-only"
    #: ``hwmodel`` is confidential hardware
    HARDWARE = "hardware"
    #: ``secboot`` is true
    SECURE_BOOT = "secure-boot"
    #: the production Confidential Space image: ``swname``, ``dbgstat``, ``STABLE``
    PRODUCTION_IMAGE = "production-image"


@dataclass(frozen=True)
class OperatorInput:
    """One input the operator sets at launch. ``name`` is the env override name or the launch
    setting (``tee-cmd``, a VM property); ``claim`` is where the attestation token shows it
    (None when it does not appear there); ``enforced`` says where its class is enforced."""

    name: str
    is_env: bool
    klass: InputClass
    rule: Rule | None
    claim: str | None
    enforced: str
    why: str

    def __post_init__(self) -> None:
        if (self.klass is InputClass.INERT) != (self.rule is None):
            raise ValueError(f"{self.name}: inert inputs have no rule, the others one")


def _env(name: str, klass: InputClass, rule: Rule | None, enforced: str, why: str) -> OperatorInput:
    claim = f"{_ENV_CLAIM}.{name}"
    return OperatorInput(name, True, klass, rule, claim, enforced, why)


_B, _P, _I = InputClass.BOUND, InputClass.PINNED, InputClass.INERT
_COND = "key-release condition"
_LABEL = "names the asset; used as associated data when the DEK is unwrapped, so a wrong value "
_LABEL += "fails the unwrap"
_WHERE = "where the sealed bytes are read; every byte is checked against the bound digests"
_WHERE += " and the access token goes only to the pinned storage endpoint"

#: Every operator-controlled input. Order: env overrides as the run spec lists them, then the
#: launch settings and the machine.
OPERATOR_INPUTS: Final[tuple[OperatorInput, ...]] = (
    _env("SEALBENCH_RUN_ID", _I, None, "-", "a label of the operator's own bookkeeping; it names "
         "the result objects and is bound into the HPKE info, nothing else"),
    _env(ENV_BENCHMARK_ID, _B, Rule.UID_FIELD, f"{_COND} (uid); registry result policy",
         "names the benchmark the run is for: an owner's grant names the benchmark it approved, "
         "so a key is never released for a benchmark the asset did not join (nor for its "
         "EXPERIMENTAL allowance), and the registry refuses a result whose attested id is not "
         "the benchmark it is filed under"),
    _env(ENV_METRICS_VERSION, _B, Rule.UID_FIELD, f"{_COND} (uid); registry result policy",
         "the benchmark's plug-in pin, in the grant of each (asset, benchmark) approval, not a "
         "union over the owner's benchmarks; "
         "selects the benchmark plug-in (<name>/<version>) among those installed in the "
         "image: data contract, model runner, scoring, summary schema; the version names the "
         "contract's variant, grid included (brats-2023-gli/1 is 240x240x155, "
         "brats-2023-gli/1-64x64x48 the small grid), and the enclave refuses a dataset that "
         "states another (the whole run) and each case on another grid (a flagged failure)"),
    _env("SEALBENCH_DATASET_ID", _I, None, "enclave (unwrap AAD)", _LABEL),
    _env("SEALBENCH_DATASET_URI", _I, None, "enclave (digest checks)", _WHERE),
    _env("SEALBENCH_DATASET_KMS_KEY", _I, None, "enclave (digest checks)", "which key unwraps "
         "the DEK; the call goes only to the pinned KMS endpoint and a DEK from any other key "
         "cannot decrypt bytes that match the bound digests"),
    _env("SEALBENCH_DATASET_POOL_PROVIDER", _I, None, _COND, "which pool the token is exchanged "
         "at; every pool's own condition decides what the token may do"),
    _env("SEALBENCH_MODEL_ID", _I, None, "enclave (unwrap AAD)", _LABEL),
    _env("SEALBENCH_MODEL_URI", _I, None, "enclave (digest checks)", _WHERE),
    _env("SEALBENCH_MODEL_KMS_KEY", _I, None, "enclave (digest checks)", "as the dataset's key"),
    _env("SEALBENCH_MODEL_POOL_PROVIDER", _I, None, _COND, "as the dataset's pool provider"),
    _env("SEALBENCH_RESULT_URI", _I, None, "enclave (sealing)", "receives only the result sealed "
         "to the bound recipient, the public summary and the result token (audience "
         "sealbench-result, which no pool accepts)"),
    _env("SEALBENCH_RECIPIENT_PUBLIC_KEY", _B, Rule.BOUND_BY_DIGEST, "enclave (step 1)",
         "the enclave refuses a key that does not hash to SEALBENCH_RECIPIENT_DIGEST"),
    _env(ENV_DATA_DIGEST, _B, Rule.UID_FIELD, f"{_COND} (uid); enclave; registry",
         "the dataset the key is released for; absent only on the aggregator (issue 27), whose "
         "uid's data field is then '-', which a data owner grants for the aggregator image "
         "alone: an evaluation run without it maps to a uid nobody granted, and the evaluation "
         "enclave refuses to run without it"),
    _env("SEALBENCH_MODEL_DIGEST", _B, Rule.UID_FIELD, f"{_COND} (uid); enclave; registry",
         "the model the key is released for"),
    _env("SEALBENCH_RECIPIENT_DIGEST", _B, Rule.UID_FIELD, f"{_COND} (uid); enclave",
         "who can open the per-case results"),
    _env(ENV_POOL_INPUTS_URI, _I, None, "aggregator (digest check)",
         "the aggregator's only: where it reads the registry's pool authorization, whose "
         "signature and log evidence it verifies against the pool anchor and whose inputs "
         "document must hash to SEALBENCH_POOL_INPUTS_DIGEST (bound); the evaluation enclave "
         "refuses to run when it is set"),
    _env(ENV_POOL_INPUTS_DIGEST, _B, Rule.RELEASE_BOUND,
         "aggregator; registry pooled-release policy",
         "the aggregator's only: the digest of the inputs it pools; the aggregator refuses a "
         "document that does not hash to it, its release repeats it and the registry refuses a "
         "release whose inputs are not exactly an authorization it signed and debited; the "
         "evaluation enclave refuses to run when it is set"),
    *(
        _env(name, _B, Rule.BOUND_BY_DIGEST, "aggregator (step 0); registry pooled-release "
             "policy", f"the aggregator's only: {what}; with the pool-release key it is the "
             "pool anchor whose digest is SEALBENCH_RECIPIENT_DIGEST (a uid field), so another "
             "value maps to a uid no data owner granted and the aggregator refuses a set that "
             "does not hash to it (issue 40); the evaluation enclave refuses to run when it is "
             "set")
        for name, what in (
            (ENV_POOL_LOG_KEY, "the registry's log key every pool authorization and checkpoint "
             "must be signed by"),
            (ENV_POOL_WITNESSES, "the witnesses whose cosignatures a checkpoint needs"),
            (ENV_POOL_WITNESS_QUORUM, "how many of the witnesses must cosign"),
        )
    ),
    _env(ENV_RESULT_POOL_PROVIDER, _I, None, _COND,
         "the aggregator's only: which authority pool its public release is written through "
         "(the release is public and token-bound, and every pool's own condition decides what "
         "a token may do); the evaluation enclave refuses to run when it is set"),
    _env(ENV_IAM_WAIT, _I, None, f"enclave (clamped to {MAX_IAM_WAIT_S} s)",
         "how long the enclave retries a permission refusal that follows a successful token "
         "exchange (a grant IAM has not applied yet), with backoff, before it fails the run: "
         "each retry is the same request of the same attested workload to the same pinned "
         "endpoint, which the owner's condition and grants judge again; a token exchange the "
         "condition refuses is never retried; the longest wait is bounded whatever the value"),
    _env(ENV_ALLOW_CPU_FALLBACK, _I, None, "enclave",
         "decides only whether a run on a GPU VM whose model ends on ONNX Runtime's CPU provider "
         "fails; the same bound model scores the same bound data either way, and the provider "
         "is reported with the run"),
    *(
        _env(name, _P, Rule.ENDPOINT, f"{_COND}; enclave; registry result policy",
             "where the workload sends its attestation token or its access tokens")
        for name in ENDPOINT_ENV_NAMES
    ),
    OperatorInput("tee-env-* (any other name)", True, _P, Rule.KNOWN_OVERRIDES_ONLY,
                  "submods.container.env_override", f"launch policy; {_COND}; registry",
                  "an override nobody reviewed (LD_PRELOAD, PYTHONPATH) changes what runs"),
    OperatorInput("release privacy loss and content (e.g. SEALBENCH_RELEASE_EPSILON)", True, _P,
                  Rule.KNOWN_OVERRIDES_ONLY, "submods.container.env_override",
                  f"launch policy; {_COND}; registry (summary's release against the pin's)",
                  "no input sets them: the plug-in pin (SEALBENCH_METRICS_VERSION, bound) "
                  "declares each release's epsilon, delta and content; an override meant to "
                  "raise epsilon or turn noise off is an unknown override the condition refuses, "
                  "and the registry refuses a summary whose release is not the pin's"),
    OperatorInput("tee-image-reference", False, _B, Rule.IMAGE, "submods.container.image_digest",
                  f"{_COND} (uid); registry", "the code that runs"),
    OperatorInput("tee-cmd", False, _P, Rule.NO_COMMAND, "submods.container.cmd_override",
                  f"launch policy; {_COND}; registry", "another command runs other code"),
    OperatorInput("confidentialInstanceType", False, _P, Rule.HARDWARE, "hwmodel",
                  f"{_COND}; registry", "without memory encryption the host reads the VM"),
    OperatorInput("shieldedInstanceConfig.enableSecureBoot", False, _P, Rule.SECURE_BOOT,
                  "secboot", f"{_COND}; registry", "an unverified boot chain proves nothing"),
    OperatorInput("sourceImage (Confidential Space image family)", False, _P,
                  Rule.PRODUCTION_IMAGE, "swname, dbgstat, submods.confidential_space",
                  f"{_COND}; registry", "the debug image gives the operator a shell in the VM"),
    OperatorInput("tee-restart-policy", False, _I, None, "submods.container.restart_policy", "-",
                  "a restart runs the same bound workload again from its start"),
    OperatorInput("tee-container-log-redirect", False, _I, None, None, "tests (log contents)",
                  "the enclave logs steps and counts only, never ids, metrics, keys or tokens"),
    OperatorInput("tee-mount", False, _I, None, None, "launch policy",
                  "the image allows no mount (no allow_mount_destinations label) and the enclave "
                  "reads no mounted path"),
    OperatorInput("tee-monitoring-memory-enable", False, _I, None,
                  "submods.confidential_space.monitoring_enabled", "-",
                  "reports memory usage figures only"),
    OperatorInput("serviceAccounts / tee-impersonate-service-accounts", False, _I, None,
                  "google_service_accounts", "-", "the enclave never uses the VM's credentials: "
                  "it reaches assets only through the owners' pools"),
)

#: Every env override a sealbench workload may carry: the evaluation's
#: (:data:`~sealbench.contract.spec.ENV_OVERRIDE_NAMES`) and the aggregator's
#: (:data:`~sealbench.contract.pool.AGGREGATE_ENV_NAMES`), in that order. The one list the
#: "known overrides only" rule of every key-release condition renders (a data owner's pool
#: admits both workloads); each workload's own launch policy and enclave allow its own names.
ALL_OVERRIDE_NAMES: Final[tuple[str, ...]] = tuple(
    dict.fromkeys((*ENV_OVERRIDE_NAMES, *AGGREGATE_ENV_NAMES)))
#: The aggregator's names that are no evaluation input: an evaluation run refuses to start
#: when one is set (:meth:`~sealbench.contract.spec.RunSpec.from_environ`).
POOL_ONLY_NAMES: Final[frozenset[str]] = frozenset(AGGREGATE_ENV_NAMES) - set(ENV_OVERRIDE_NAMES)

#: The env-override entries by name.
ENV_INPUTS: Final[Mapping[str, OperatorInput]] = {
    i.name: i for i in OPERATOR_INPUTS if i.is_env and i.name in ALL_OVERRIDE_NAMES
}


class ConditionInputError(ValueError):
    """A value that cannot go into a condition, or an override without a class."""


@dataclass(frozen=True)
class ConditionContext:
    """What one owner's key-release condition is rendered for (by the platform its workloads
    run on). ``endpoints`` None means the platform's own fixed endpoints (Google's, for
    Confidential Space: the endpoint overrides must be absent); otherwise exactly these URLs
    are required (the mock cloud's)."""

    image_digests: frozenset[str]
    include_data: bool
    endpoints: ServiceEndpoints | None = None
    #: The image digests of benchmarks that opted in (issue 18): for these images only, besides
    #: STABLE, a preview base image (``EXPERIMENTAL``) is accepted when its GPU attests
    #: confidential-computing mode ON.
    experimental_gpu_images: frozenset[str] = frozenset()
    #: The ids of those benchmarks: EXPERIMENTAL is accepted only for a run that names one of
    #: them (and the grant of the uid, which names the benchmark, does the rest: the allowance
    #: is per (asset, benchmark), never for the owner's whole pool; issue 28).
    experimental_benchmark_ids: frozenset[str] = frozenset()


class TokenDestinationError(ValueError):
    """An endpoint override that would send a token outside the attesting platform; ``name``
    is the override."""

    def __init__(self, name: str, problem: str) -> None:
        self.name = name
        super().__init__(f"{name}: {problem}")


def check_token_destinations(
    overrides: Mapping[str, str], platform: ServiceEndpoints | None
) -> None:
    """Raise :class:`TokenDestinationError` naming the first endpoint override that does not
    belong to the platform that attested the run. ``platform`` None is Google's: no endpoint
    override at all (Google's HTTPS endpoints are the defaults); otherwise each override must
    be present and equal the platform's URL."""
    for name in ENDPOINT_ENV_NAMES:
        value = overrides.get(name)
        if platform is None:
            if value is not None:
                raise TokenDestinationError(
                    name,
                    "set on a run attested by Google's verifier, whose tokens go only to "
                    "Google's HTTPS endpoints (remove the override)",
                )
            continue
        expected = platform.env_names()[name]
        if value != expected:
            raise TokenDestinationError(
                name,
                f"does not name the attesting platform's endpoint {expected!r}; refusing to send "
                "it a token",
            )
