"""The workload identity a key release is bound to: which image may unwrap an owner's key, for
which dataset, model and result recipient, in which benchmark under which plug-in pin
(platform-neutral; how a platform grants a key to an identity is the platform's: Confidential
Space's attribute mapping and ``principalSet`` are in :mod:`sealbench.gcp.confidential_space`).

A workload is the attested container image digest plus five values the operator passes as
attested environment overrides (``tee-env-SEALBENCH_*`` on Confidential Space)::

    SEALBENCH_DATA_DIGEST       manifest digest of the dataset the run must read
    SEALBENCH_MODEL_DIGEST      manifest digest of the model the run must load
    SEALBENCH_RECIPIENT_DIGEST  SHA-256 of the data owner's raw 32-byte X25519 result key
    SEALBENCH_BENCHMARK_ID      the registry's id of the benchmark the run is for (decimal)
    SEALBENCH_METRICS_VERSION   the benchmark plug-in pin (``<name>/<version>``)

Its *uid* is one string, written
``<image>::<data>::<model>::<recipient>::<benchmark>::<pin>`` where ``<data>`` is the literal
``-`` when the identity leaves the dataset open (the model owner's policy may omit it). With the
benchmark and the pin in the uid, an owner's grant is exactly one approval: its key is released
for the (asset, benchmark, image, pin) it approved and for no union of them (issue 28: a pin
approved in one benchmark, e.g. an exact-release pin, never reaches the asset's other
benchmarks).

Why the concatenation is unambiguous: every field of a genuine uid is ``sha256:`` + 64 lowercase
hex, ``-``, a decimal number or a pin (``[a-z0-9._-]/[A-Za-z0-9._-]``, no colon), so a genuine
uid contains ``::`` exactly five times and never ``:::``. If a platform's mapping over arbitrary
override strings equals a genuine uid, the five separators the mapping inserts must be those five
occurrences (the image digest is attested, so the prefix is fixed), hence the overrides are
exactly its fields: an operator cannot shift a ``::`` between overrides to reach an approved uid
with different values. Defence in depth all the same: the attested enclave refuses to run unless
every override has its field's shape (:meth:`WorkloadIdentity.from_env_overrides`), and each
platform's key-release condition requires the same shape.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from sealbench.contract.pin import PIN_PATTERN
from sealbench.crypto.digest import Sha256Digest, parse_digest, sha256_digest
from sealbench.crypto.errors import PolicyViolationError

__all__ = [
    "BENCHMARK_ID_PATTERN",
    "ENV_BENCHMARK_ID",
    "ENV_DATA_DIGEST",
    "ENV_METRICS_VERSION",
    "ENV_MODEL_DIGEST",
    "ENV_RECIPIENT_DIGEST",
    "GRANT_SET_VERSION",
    "NO_DATA",
    "UID_SEPARATOR",
    "WorkloadIdentity",
    "grant_set_digest",
]

ENV_DATA_DIGEST: Final = "SEALBENCH_DATA_DIGEST"
ENV_MODEL_DIGEST: Final = "SEALBENCH_MODEL_DIGEST"
ENV_RECIPIENT_DIGEST: Final = "SEALBENCH_RECIPIENT_DIGEST"
ENV_BENCHMARK_ID: Final = "SEALBENCH_BENCHMARK_ID"
ENV_METRICS_VERSION: Final = "SEALBENCH_METRICS_VERSION"

#: A benchmark id in a uid: a registry id, decimal, no leading zero (RE2- and CEL-compatible).
BENCHMARK_ID_PATTERN: Final = "^[1-9][0-9]{0,17}$"
_BENCHMARK_ID: Final = re.compile(BENCHMARK_ID_PATTERN)
_PIN: Final = re.compile(PIN_PATTERN)

#: Separator between the uid's fields; never part of a digest.
UID_SEPARATOR: Final = "::"
#: Stands for "any dataset" in the data field of a uid.
NO_DATA: Final = "-"


def _claim_name(env_name: str) -> str:
    return f"submods.container.env_override.{env_name}"


@dataclass(frozen=True)
class WorkloadIdentity:
    """An attested image digest bound to the data, model and result recipient it may serve, in
    one benchmark under one plug-in pin.

    ``data_digest`` is ``None`` for an identity that accepts any dataset (the model owner's
    grant). Every field is validated on construction (``ValueError`` otherwise).
    """

    image_digest: Sha256Digest
    data_digest: Sha256Digest | None
    model_digest: Sha256Digest
    recipient_digest: Sha256Digest
    benchmark_id: str
    metrics_version: str

    def __post_init__(self) -> None:
        parse_digest(self.image_digest)
        if self.data_digest is not None:
            parse_digest(self.data_digest)
        parse_digest(self.model_digest)
        parse_digest(self.recipient_digest)
        if not _BENCHMARK_ID.fullmatch(self.benchmark_id):
            raise ValueError("expected a benchmark id (a decimal registry id)")
        if not _PIN.fullmatch(self.metrics_version):
            raise ValueError("expected a benchmark plug-in pin <name>/<version>")

    def uid(self) -> str:
        """The identity as one string: what a platform's key-release mapping computes for a
        token that carries this identity (Confidential Space's ``attribute.workload_uid``)."""
        data = NO_DATA if self.data_digest is None else self.data_digest
        return UID_SEPARATOR.join(
            (self.image_digest, data, self.model_digest, self.recipient_digest,
             self.benchmark_id, self.metrics_version)
        )

    def without_data(self) -> WorkloadIdentity:
        """The same identity with the dataset left open (what a model owner grants)."""
        return WorkloadIdentity(self.image_digest, None, self.model_digest, self.recipient_digest,
                                self.benchmark_id, self.metrics_version)

    def env_overrides(self) -> dict[str, str]:
        """The attested environment overrides a launcher sets so that the token carries this
        identity (the data override is omitted when ``data_digest`` is ``None``)."""
        env: dict[str, str] = {
            ENV_MODEL_DIGEST: self.model_digest,
            ENV_RECIPIENT_DIGEST: self.recipient_digest,
            ENV_BENCHMARK_ID: self.benchmark_id,
            ENV_METRICS_VERSION: self.metrics_version,
        }
        if self.data_digest is not None:
            env[ENV_DATA_DIGEST] = self.data_digest
        return env

    @classmethod
    def from_uid(cls, uid: str) -> WorkloadIdentity:
        """Parse a uid back into its fields (``ValueError`` if it is not one)."""
        parts = uid.split(UID_SEPARATOR)
        if len(parts) != 6:
            raise ValueError(
                f"expected a workload uid of 6 fields separated by {UID_SEPARATOR!r}, "
                f"received {len(parts)} fields"
            )
        image, data, model, recipient, benchmark, pin = parts
        return cls(
            image_digest=parse_digest(image),
            data_digest=None if data == NO_DATA else parse_digest(data),
            model_digest=parse_digest(model),
            recipient_digest=parse_digest(recipient),
            benchmark_id=benchmark,
            metrics_version=pin,
        )

    @classmethod
    def from_env_overrides(
        cls,
        image_digest: str,
        env_override: Mapping[str, str] | None,
        *,
        require_data: bool = True,
    ) -> WorkloadIdentity:
        """Build the identity from an image digest and the attested env overrides.

        Raises :class:`PolicyViolationError` naming the claim when an override is missing or
        does not have its field's shape. With ``require_data=False`` an absent data override
        gives ``data_digest=None``; a present but malformed one is still refused.
        """
        env = env_override or {}
        try:
            image = parse_digest(image_digest)
        except ValueError:
            raise PolicyViolationError(
                "submods.container.image_digest", "a sha256 digest", "a malformed value"
            ) from None
        model = _env_digest(env, ENV_MODEL_DIGEST)
        recipient = _env_digest(env, ENV_RECIPIENT_DIGEST)
        data = _env_digest(env, ENV_DATA_DIGEST) if ENV_DATA_DIGEST in env or require_data else None
        benchmark = _env_shaped(env, ENV_BENCHMARK_ID, _BENCHMARK_ID, "a decimal benchmark id")
        pin = _env_shaped(env, ENV_METRICS_VERSION, _PIN, "a plug-in pin <name>/<version>")
        return cls(image, data, model, recipient, benchmark, pin)


#: First line of the bytes :func:`grant_set_digest` hashes (the format's version marker).
GRANT_SET_VERSION: Final = "sealbench-grant-set/1"


def grant_set_digest(grants: Iterable[tuple[WorkloadIdentity, bool]]) -> Sha256Digest:
    """The digest of a set of grants: what an owner's ``policy sync`` wrote for one asset (the
    client reports it to the registry) and what the asset's current approvals require (the
    registry computes it), so that the registry can tell whose grants lag. Each grant is a
    workload identity and whether its benchmark accepts EXPERIMENTAL images (which changes the
    key-release condition). Order and repetition do not matter.

    Bytes hashed (SHA-256, ``sha256:`` + hex): the ASCII line ``sealbench-grant-set/1``, then
    one line per distinct grant in ascending byte order, ``<uid> <stable|experimental>``, every
    line ended by ``\\n``. A uid never contains a space or a newline (see the module
    docstring), so the lines parse back unambiguously. The empty set has a digest of its own
    (the version line alone): an owner who revoked every grant reports it too.
    """
    lines = sorted({f"{identity.uid()} {'experimental' if experimental else 'stable'}"
                    for identity, experimental in grants})
    text = "".join(f"{line}\n" for line in (GRANT_SET_VERSION, *lines))
    return sha256_digest(text.encode("ascii"))


def _env_shaped(env: Mapping[str, str], name: str, shape: re.Pattern[str], what: str) -> str:
    if name not in env:
        raise PolicyViolationError(_claim_name(name), what, "absent")
    value = env[name]
    if not isinstance(value, str) or not shape.fullmatch(value):
        raise PolicyViolationError(_claim_name(name), what, "a malformed value")
    return value


def _env_digest(env: Mapping[str, str], name: str) -> Sha256Digest:
    if name not in env:
        raise PolicyViolationError(_claim_name(name), "a sha256 digest", "absent")
    value = env[name]
    try:
        return parse_digest(value)
    except ValueError:
        raise PolicyViolationError(
            _claim_name(name), "a sha256 digest", "a malformed value"
        ) from None
