"""Errors raised by :mod:`sealbench.client`, each with the one-line ``hint`` the CLI prints under
the cause (what the person at the keyboard can do about it) and the process exit code.

Foreign exceptions (httpx, the cloud adapters, the enclave launcher, the file system) are
translated once, where they happen, with ``raise ... from exc``; the CLI's error boundary
(:func:`sealbench.client.cli.main`) prints ``cause`` and ``hint`` and exits with ``exit_code``.
Messages never contain tokens, keys or patient data.

::

    ClientError                       exit 1   (base)
    ├── ConfigError                   exit 3   no profile, bad profile, missing local file or key
    │   ├── NotAvailableError         exit 3   a backend or option that is not implemented yet
    │   └── LogKeyNotPinnedError      exit 3   no registry log key pinned, nor first use allowed
    ├── RegistryError                 exit 4   the registry refused the request
    │   ├── AuthenticationFailed      exit 6   401: the token is missing, wrong or revoked
    │   ├── NotAllowedError           exit 4   403: signed in, but not permitted
    │   ├── NotFoundError             exit 4   404
    │   ├── ConflictError             exit 4   409: duplicate, or a transition the rules forbid
    │   ├── InvalidRequestError       exit 4   422: the server could not use the input
    │   └── ResultRejectedError       exit 4   422: the result's attestation did not verify
    │       └── PrivacyBudgetExceeded exit 4   422: the release would overspend the budget
    ├── ServerUnavailableError        exit 5   cannot reach the server, or it failed (5xx)
    ├── CloudError                    exit 7   KMS, storage or policy writing failed
    ├── RunFailedError                exit 7   the confidential run did not produce a result
    │   └── KeyReleaseDeniedError     exit 7   the key owners' policies refused the workload
    ├── IntegrityError                exit 8   a sealed object or result failed to authenticate
    ├── CompatibilityError            exit 9   'sealbench test': a compatibility check failed
    ├── TransparencyLogError          exit 10  the registry's audit log failed a check
    │   ├── LogSignatureError         exit 10  a checkpoint not signed by the pinned log key
    │   ├── LogInconsistentError      exit 10  the log was rewritten, truncated or forked
    │   └── LogProofError             exit 10  an inclusion proof or receipt does not verify
    └── Interrupted                   exit 130 Ctrl-C: the message says what was kept

``dataset prepare`` exits :data:`CASES_REJECTED_EXIT` (11) when it prepared a dataset but
rejected some cases (each listed once with its reason).
"""

from __future__ import annotations

__all__ = [
    "CASES_REJECTED_EXIT",
    "EXIT_CODES",
    "AuthenticationFailed",
    "ClientError",
    "CloudError",
    "CompatibilityError",
    "ConfigError",
    "ConflictError",
    "IntegrityError",
    "Interrupted",
    "InvalidRequestError",
    "KeyReleaseDeniedError",
    "LogInconsistentError",
    "LogKeyNotPinnedError",
    "LogProofError",
    "LogSignatureError",
    "NotAllowedError",
    "NotAvailableError",
    "NotFoundError",
    "PrivacyBudgetExceeded",
    "RegistryError",
    "ResultRejectedError",
    "RunFailedError",
    "ServerUnavailableError",
    "TransparencyLogError",
]


class ClientError(Exception):
    """Base of every client error: ``str(exc)`` is the cause, ``hint`` what to do."""

    exit_code = 1
    #: What to do when the raiser gives no hint of its own; None prints none.
    default_hint: str | None = "run the command again with -v to see the details"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint or self.default_hint


class ConfigError(ClientError):
    """Bad input or local state (a file, an option, a profile). No generic hint: a raiser
    whose message does not already say what to do gives its own."""

    exit_code = 3
    default_hint: str | None = None


class NotAvailableError(ConfigError):
    default_hint = "use --tee mock for now"


class LogKeyNotPinnedError(ConfigError):
    """The profile pins no transparency-log key for its registry and did not choose to trust
    the one the registry publishes on first use: nothing to check the log against."""

    default_hint = (
        "ask the registry's operator for its log key ('sealbench-server key show' prints it) "
        "and add the profile again with 'sealbench profile add NAME --server URL --log-key KEY'"
        "; or, knowing that a registry could then show you a rewritten log, with "
        "--trust-on-first-use"
    )


class RegistryError(ClientError):
    """The registry answered with an error body ``{code, message}``."""

    exit_code = 4
    default_hint = "check the ids with the matching 'ls' command"

    def __init__(
        self, message: str, *, hint: str | None = None, status: int = 0, code: str = ""
    ) -> None:
        super().__init__(message, hint=hint)
        self.status = status
        self.code = code


class AuthenticationFailed(RegistryError):  # noqa: N818 - reads as the event
    exit_code = 6
    default_hint = (
        "the server did not accept your token: ask the registry operator for a new one and run "
        "'sealbench login --token ...' (check which profile is active with 'sealbench whoami')"
    )


class NotAllowedError(RegistryError):
    default_hint = (
        "you are signed in but not permitted; check 'sealbench whoami' shows the account you "
        "meant, or ask the owner of the benchmark or asset"
    )


class NotFoundError(RegistryError):
    default_hint = "check the id with the matching 'ls' command, and that --profile is right"


class ConflictError(RegistryError):
    default_hint = "look at the current state with the matching 'show' or 'ls' command"


class InvalidRequestError(RegistryError):
    default_hint = "check the command's options against its --help"


class ResultRejectedError(RegistryError):
    default_hint = (
        "the server refused the result's attestation: do not retry with the same files; rerun "
        "the evaluation with 'sealbench run ... --force' and submit the new result"
    )


class PrivacyBudgetExceeded(ResultRejectedError):  # noqa: N818 - reads as the event
    default_hint = (
        "the dataset's privacy budget has too little left for this release and nothing was "
        "stored; see 'sealbench dataset budget DATASET' (a budget is set for the dataset's "
        "lifetime at registration)"
    )


class ServerUnavailableError(ClientError):
    exit_code = 5
    default_hint = (
        "check the server URL ('sealbench profile ls'), that the server is running, and your "
        "network; then try again"
    )


class CloudError(ClientError):
    exit_code = 7
    default_hint = "check the KMS key, bucket and pool options and your cloud credentials"


class RunFailedError(ClientError):
    exit_code = 7
    default_hint = "read the run's log shown above; 'sealbench run ... --force' retries it"


class KeyReleaseDeniedError(RunFailedError):
    default_hint = (
        "the key owners' policies do not allow this workload: check that the dataset and the "
        "model are approved in the benchmark; an owner whose grants lag sees 'policy sync "
        "needed' in 'sealbench inbox'"
    )


class IntegrityError(ClientError):
    exit_code = 8
    default_hint = (
        "the object was modified or belongs to another run or key; do not use it, and tell the "
        "asset's owner (the storage may have been tampered with)"
    )


class CompatibilityError(ClientError):
    """A model or dataset did not pass the benchmark's compatibility test."""

    exit_code = 9
    default_hint = (
        "fix what the failing checks' details say (model export, dataset preparation), then "
        "run 'sealbench test' again; nothing was uploaded"
    )


class TransparencyLogError(ClientError):
    """The registry's transparency log failed a check: what the registry shows now does not
    agree with what this profile verified before (or with what a witness or another client saw).
    The checkpoints involved are kept as evidence in ``evidence``."""

    exit_code = 10
    default_hint = (
        "stop relying on this registry's records and tell its operator and the benchmark "
        "authority; keep the evidence files named above"
    )

    def __init__(self, message: str, *, hint: str | None = None, evidence: str | None = None,
                 first_divergent_size: int | None = None) -> None:
        super().__init__(message, hint=hint)
        self.evidence = evidence
        self.first_divergent_size = first_divergent_size


class LogSignatureError(TransparencyLogError):
    default_hint = (
        "the checkpoint is not signed by the registry key this profile pinned (nor by a key it "
        "endorsed): if the operator really replaced the key, compare the new one with them out "
        "of band and pin it with 'sealbench profile add NAME --server URL --log-key KEY'"
    )


class LogInconsistentError(TransparencyLogError):
    pass


class LogProofError(TransparencyLogError):
    default_hint = (
        "the registry could not prove that this entry is in its log: do not rely on it, and "
        "keep the receipt and evidence files"
    )


class Interrupted(ClientError):  # noqa: N818 - reads as the event
    """The person at the keyboard stopped a long command (Ctrl-C); the message says what was
    kept and the hint how to resume. Nothing is left half-written."""

    exit_code = 130
    default_hint = None


#: ``dataset prepare``'s exit code when it prepared the dataset but rejected some cases.
CASES_REJECTED_EXIT = 11

#: Documented in ``sealbench --help``.
EXIT_CODES: tuple[tuple[int, str], ...] = (
    (0, "success"),
    (1, "unexpected error (run with -v and report it)"),
    (2, "usage error (wrong options)"),
    (3, "local configuration: no profile, missing key or file, backend not available"),
    (4, "the registry refused the request (permissions, ids, approvals, state)"),
    (5, "the registry cannot be reached or failed"),
    (6, "the registry did not accept your token"),
    (7, "cloud or confidential run failure (key release denied, enclave failed)"),
    (8, "integrity failure: a sealed object or result did not authenticate"),
    (9, "a compatibility check failed ('sealbench test')"),
    (10, "the registry's transparency log failed a check: rewritten, forked, or unproven"),
    (CASES_REJECTED_EXIT, "'dataset prepare' prepared the dataset but rejected some cases "
     "(each listed with its reason)"),
    (130, "interrupted (Ctrl-C): what was kept and how to resume is printed"),
)
