"""The workload identity a key release is bound to: which image may unwrap an owner's key, for
which dataset, model and result recipient (platform-neutral; how a platform grants a key to an
identity is the platform's: Confidential Space's attribute mapping and ``principalSet`` are in
:mod:`sealbench.cloud.confidential_space`).

A workload is the attested container image digest plus three digests the operator passes as
attested environment overrides (``tee-env-SEALBENCH_*`` on Confidential Space)::

    SEALBENCH_DATA_DIGEST       manifest digest of the dataset the run must read
    SEALBENCH_MODEL_DIGEST      manifest digest of the model the run must load
    SEALBENCH_RECIPIENT_DIGEST  SHA-256 of the data owner's raw 32-byte X25519 result key

Its *uid* is one string, written ``<image>::<data>::<model>::<recipient>`` where ``<data>`` is
the literal ``-`` when the identity leaves the dataset open (the model owner's policy may omit
it).

Why the concatenation is unambiguous: every field of a genuine uid is ``sha256:`` + 64 lowercase
hex or ``-``, so a genuine uid contains ``::`` exactly three times and never ``:::``. If a
platform's mapping over arbitrary override strings ``a, b, c`` equals a genuine uid, the three
separators the mapping inserts must be those three occurrences (the image digest is attested, so
the prefix is fixed), hence ``a, b, c`` are exactly its fields: an operator cannot shift a
``::`` between overrides to reach an approved uid with different values. Defence in depth all
the same: the attested enclave refuses to run unless every override parses as a digest
(:meth:`WorkloadIdentity.from_env_overrides`), and each platform's key-release condition
requires the same shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from sealbench.crypto.digest import Sha256Digest, parse_digest
from sealbench.crypto.errors import PolicyViolationError

__all__ = [
    "ENV_DATA_DIGEST",
    "ENV_MODEL_DIGEST",
    "ENV_RECIPIENT_DIGEST",
    "NO_DATA",
    "UID_SEPARATOR",
    "WorkloadIdentity",
]

ENV_DATA_DIGEST: Final = "SEALBENCH_DATA_DIGEST"
ENV_MODEL_DIGEST: Final = "SEALBENCH_MODEL_DIGEST"
ENV_RECIPIENT_DIGEST: Final = "SEALBENCH_RECIPIENT_DIGEST"

#: Separator between the uid's fields; never part of a digest.
UID_SEPARATOR: Final = "::"
#: Stands for "any dataset" in the data field of a uid.
NO_DATA: Final = "-"


def _claim_name(env_name: str) -> str:
    return f"submods.container.env_override.{env_name}"


@dataclass(frozen=True)
class WorkloadIdentity:
    """An attested image digest bound to the data, model and result recipient it may serve.

    ``data_digest`` is ``None`` for an identity that accepts any dataset (the model owner's
    grant). All digests are validated on construction (``ValueError`` otherwise).
    """

    image_digest: Sha256Digest
    data_digest: Sha256Digest | None
    model_digest: Sha256Digest
    recipient_digest: Sha256Digest

    def __post_init__(self) -> None:
        parse_digest(self.image_digest)
        if self.data_digest is not None:
            parse_digest(self.data_digest)
        parse_digest(self.model_digest)
        parse_digest(self.recipient_digest)

    def uid(self) -> str:
        """The identity as one string: what a platform's key-release mapping computes for a
        token that carries this identity (Confidential Space's ``attribute.workload_uid``)."""
        data = NO_DATA if self.data_digest is None else self.data_digest
        return UID_SEPARATOR.join(
            (self.image_digest, data, self.model_digest, self.recipient_digest)
        )

    def without_data(self) -> WorkloadIdentity:
        """The same identity with the dataset left open (what a model owner grants)."""
        return WorkloadIdentity(self.image_digest, None, self.model_digest, self.recipient_digest)

    def env_overrides(self) -> dict[str, str]:
        """The attested environment overrides a launcher sets so that the token carries this
        identity (the data override is omitted when ``data_digest`` is ``None``)."""
        env: dict[str, str] = {
            ENV_MODEL_DIGEST: self.model_digest,
            ENV_RECIPIENT_DIGEST: self.recipient_digest,
        }
        if self.data_digest is not None:
            env[ENV_DATA_DIGEST] = self.data_digest
        return env

    @classmethod
    def from_uid(cls, uid: str) -> WorkloadIdentity:
        """Parse a uid back into its fields (``ValueError`` if it is not one)."""
        parts = uid.split(UID_SEPARATOR)
        if len(parts) != 4:
            raise ValueError(
                f"expected a workload uid of 4 fields separated by {UID_SEPARATOR!r}, "
                f"received {len(parts)} fields"
            )
        image, data, model, recipient = parts
        return cls(
            image_digest=parse_digest(image),
            data_digest=None if data == NO_DATA else parse_digest(data),
            model_digest=parse_digest(model),
            recipient_digest=parse_digest(recipient),
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

        Raises :class:`PolicyViolationError` naming the claim when an override is missing or is
        not a digest. With ``require_data=False`` an absent data override gives
        ``data_digest=None``; a present but malformed one is still refused.
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
        return cls(image, data, model, recipient)


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
