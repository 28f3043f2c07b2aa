"""The enclave run's failures, each with the process exit code it maps to: the contract between the
workload and whatever launched it (a launcher maps the exit code back to the class, the registry
files the class as the failure's kind).

Every failure of a run is an :class:`EnclaveError`. Its message is what reaches stderr and the
failure record at the result destination, so it is built by the enclave from safe parts only: it
may name a step, an environment variable, a key or pool resource name, an opaque object name or
a count; it never holds key bytes, tokens, case identifiers, image intensities or per-case
metrics. Foreign exceptions are translated once, where the step that called them catches them.

Each class also has a stable ``code`` (:data:`FAILURE_CODES`; ``key_release_denied``,
``integrity``, ...): the name the enclave's ``failed`` event states with the exit code
(:class:`sealbench.contract.events.RunFailed`), so that a client keys on it, never on the prose.

::

    EnclaveError                     exit 1   anything not listed below
    ├── CpuFallbackRefused           exit 1   a GPU run's model ended on the CPU (the run did
    │                                         not allow it); the registry's class "enclave"
    ├── SpecError                    exit 10  the attested environment holds no valid run spec
    ├── AttestationUnavailable       exit 11  the launcher returned no usable token
    ├── DestinationError             exit 12  recipient key digest wrong, or the result
    │                                         destination cannot be written
    ├── KeyReleaseDenied             exit 13  a pool refused the token or KMS refused to unwrap
    ├── AssetIntegrityError          exit 14  a digest or authentication check failed (tampering,
    │                                         substitution, wrong dataset or model)
    ├── AssetRejected                exit 15  the model or dataset is authentic but unusable
    │                                         (contract mismatch, no cases)
    ├── StorageFailure               exit 16  an asset could not be read from storage
    ├── ResultUploadError            exit 17  the result could not be attested or uploaded
    ├── EgressRefused                exit 18  a connection to an endpoint the run does not pin
    │                                         (also a PermissionError, as network code expects)
    └── AuthorizationRefused         exit 19  the aggregator's pool authorization does not hold
                                              (forged, stale, foreign, not on the log or not
                                              witnessed): it draws no noise
"""

from __future__ import annotations

from typing import ClassVar, Final

__all__ = [
    "FAILURE_CODES",
    "AssetIntegrityError",
    "AssetRejected",
    "AttestationUnavailable",
    "AuthorizationRefused",
    "CpuFallbackRefused",
    "DestinationError",
    "EgressRefused",
    "EnclaveError",
    "KeyReleaseDenied",
    "ResultUploadError",
    "SpecError",
    "StorageFailure",
    "error_for_code",
]


class EnclaveError(Exception):
    """Base class of every error raised by :mod:`sealbench.enclave`."""

    exit_code: ClassVar[int] = 1
    #: The failure's stable name (:data:`FAILURE_CODES`): what the enclave's ``failed`` event
    #: (:class:`sealbench.contract.events.RunFailed`) states, and what a client keys on.
    code: ClassVar[str] = "enclave"


class CpuFallbackRefused(EnclaveError):  # noqa: N818 - names the refusal
    """The evidence attests a GPU, yet ONNX Runtime runs the model on its CPU provider, and the
    run spec does not allow it (``SEALBENCH_CPU_FALLBACK``). Exit 1, as any enclave
    error without its own code: the registry's failure classes are unchanged."""

    code = "cpu_fallback_refused"


class SpecError(EnclaveError):
    """The run specification is missing, malformed, names an unknown metrics version, or
    differs from the attested environment overrides. Raised before any key is requested."""

    exit_code = 10
    code = "spec"


class AttestationUnavailable(EnclaveError):  # noqa: N818 - the agreed public name
    """The launcher did not return a token, or its claims cannot be read."""

    exit_code = 11
    code = "attestation_unavailable"


class DestinationError(EnclaveError):
    """The recipient key does not match its digest, or the destination refused the test write."""

    exit_code = 12
    code = "destination"


class KeyReleaseDenied(EnclaveError):  # noqa: N818 - the agreed public name
    """An owner's workload identity pool or KMS key refused this workload."""

    exit_code = 13
    code = "key_release_denied"


class AssetIntegrityError(EnclaveError):
    """A sealed object failed authentication or a digest check. The whole run aborts."""

    exit_code = 14
    code = "integrity"


class AssetRejected(EnclaveError):  # noqa: N818 - the agreed public name
    """The model or dataset authenticated but cannot be evaluated under the benchmark."""

    exit_code = 15
    code = "asset_rejected"


class StorageFailure(EnclaveError):  # noqa: N818 - the agreed public name
    """An object of a sealed asset could not be read."""

    exit_code = 16
    code = "storage"


class ResultUploadError(EnclaveError):
    """The result attestation could not be obtained or the result not uploaded."""

    exit_code = 17
    code = "result_upload"


class EgressRefused(EnclaveError, PermissionError):  # noqa: N818 - names the refusal
    """A connection (or a name lookup) to a host or socket the run does not pin was refused
    (:mod:`sealbench.enclave.network`). Its message names the host, nothing else."""

    exit_code = 18
    code = "egress_refused"


class AuthorizationRefused(EnclaveError):  # noqa: N818 - names the refusal
    """The aggregator's pool authorization does not hold
    (:func:`sealbench.contract.pool_authorization.verify_authorization`): it pooled and drew
    nothing. The message names what failed, never a key or a value."""

    exit_code = 19
    code = "authorization_refused"


#: Every failure of a run, by its :attr:`~EnclaveError.code`.
_BY_CODE: Final[dict[str, type[EnclaveError]]] = {
    cls.code: cls
    for cls in (
        EnclaveError,
        CpuFallbackRefused,
        SpecError,
        AttestationUnavailable,
        DestinationError,
        KeyReleaseDenied,
        AssetIntegrityError,
        AssetRejected,
        StorageFailure,
        ResultUploadError,
        EgressRefused,
        AuthorizationRefused,
    )
}
#: The failure codes, each naming one class above (a new code is a new version of the events).
FAILURE_CODES: Final = tuple(_BY_CODE)


def error_for_code(code: str) -> type[EnclaveError] | None:
    """The failure class ``code`` names; None for a code no class has."""
    return _BY_CODE.get(code)
