"""The workload identity a key release is bound to: which image may unwrap an owner's key, for
which dataset, model and result recipient.

A workload is the attested container image digest plus three digests the operator passes as
attested environment overrides (``tee-env-SEALBENCH_*`` on Confidential Space, shown back in the
token's ``submods.container.env_override``)::

    SEALBENCH_DATA_DIGEST       manifest digest of the dataset the run must read
    SEALBENCH_MODEL_DIGEST      manifest digest of the model the run must load
    SEALBENCH_RECIPIENT_DIGEST  SHA-256 of the data owner's raw 32-byte X25519 result key

Its *uid* is one string, written ``<image>::<data>::<model>::<recipient>`` where ``<data>`` is
the literal ``-`` when the identity leaves the dataset open (the model owner's policy may omit
it). On Google Cloud the same string is computed by the workload identity pool provider's
attribute mapping, a CEL string concatenation (:func:`uid_mapping_expression`), and an owner
grants its key to ``principalSet://iam.googleapis.com/projects/N/locations/global/
workloadIdentityPools/P/attribute.workload_uid/<uid>`` (:func:`principal_set`). The mock STS
evaluates the very same expression with cel-python, so this module is the one source of truth
for the real cloud, the mock and the enclave.

Why the concatenation is unambiguous: every field of a genuine uid is ``sha256:`` + 64 lowercase
hex or ``-``, so a genuine uid contains ``::`` exactly three times and never ``:::``. If the
mapping over arbitrary override strings ``a, b, c`` equals a genuine uid, the three separators
the mapping inserts must be those three occurrences (the image digest is attested, so the prefix
is fixed), hence ``a, b, c`` are exactly its fields: an operator cannot shift a ``::`` between
overrides to reach an approved uid with different values. Defence in depth all the same: the
attested enclave refuses to run unless every override parses as a digest
(:meth:`WorkloadIdentity.from_env_overrides`), and :func:`env_shape_condition` is the same check
as a CEL clause for the provider's attribute condition.

Length limits (Google Cloud IAM ``WorkloadIdentityPoolProvider.attributeMapping`` reference):
``google.subject`` is capped at 127 bytes, a custom attribute *key* at 100 characters
(``[a-z0-9_]``), a mapping *expression* at 2048 characters, and all mapped attributes together at
8 KB once evaluated. No separate cap on a custom attribute *value* is documented. A full uid is
``4 * 71 + 3 * 2 = 290`` characters, so it cannot be ``google.subject`` but fits a custom
attribute (``attribute.workload_uid``) and the 8 KB total with room to spare; the mapping
expression is about 250 characters. The uid is therefore used verbatim, not hashed, which keeps
IAM bindings readable and auditable. If a real deployment ever rejects the value length, the
fallback is a second attribute per digest, not a hash (CEL in attribute mappings has no SHA-256).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from sealbench.crypto.digest import Sha256Digest, parse_digest
from sealbench.crypto.errors import PolicyViolationError

if TYPE_CHECKING:
    from sealbench.crypto.attestation import AttestationClaims

__all__ = [
    "ENV_DATA_DIGEST",
    "ENV_MODEL_DIGEST",
    "ENV_RECIPIENT_DIGEST",
    "NO_DATA",
    "UID_SEPARATOR",
    "WORKLOAD_UID_ATTRIBUTE",
    "WorkloadIdentity",
    "env_shape_condition",
    "principal_set",
    "uid_mapping_expression",
]

ENV_DATA_DIGEST: Final = "SEALBENCH_DATA_DIGEST"
ENV_MODEL_DIGEST: Final = "SEALBENCH_MODEL_DIGEST"
ENV_RECIPIENT_DIGEST: Final = "SEALBENCH_RECIPIENT_DIGEST"

#: The custom attribute (``attribute.workload_uid``) that carries :meth:`WorkloadIdentity.uid`.
WORKLOAD_UID_ATTRIBUTE: Final = "workload_uid"
#: Separator between the uid's fields; never part of a digest.
UID_SEPARATOR: Final = "::"
#: Stands for "any dataset" in the data field of a uid.
NO_DATA: Final = "-"

_IMAGE_CLAIM: Final = "assertion.submods.container.image_digest"
_ENV_CLAIM: Final = "assertion.submods.container.env_override"
_DIGEST_RE_CEL: Final = "^sha256:[0-9a-f]{64}$"
_SAFE_ID_RE: Final = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


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
        """The value of ``attribute.workload_uid``: exactly what :func:`uid_mapping_expression`
        evaluates to for a token that carries this identity."""
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

    @classmethod
    def from_claims(
        cls, claims: AttestationClaims, *, require_data: bool = True
    ) -> WorkloadIdentity:
        """The identity carried by verified attestation claims (image digest and env
        overrides); see :meth:`from_env_overrides` for the errors."""
        container = claims.submods.container
        return cls.from_env_overrides(
            container.image_digest, container.env_override, require_data=require_data
        )


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


def uid_mapping_expression(*, include_data: bool) -> str:
    """The CEL attribute-mapping expression for ``attribute.workload_uid``.

    With ``include_data=True`` (a data owner's pool) the dataset digest comes from the token;
    with ``False`` (a model owner's pool) the data field is the constant ``-``, so the mapped
    value equals :meth:`WorkloadIdentity.uid` of :meth:`WorkloadIdentity.without_data`. A token
    that lacks one of the overrides makes the expression fail, which GCP (and the mock) treat
    as a rejected credential.
    """
    sep = f" + '{UID_SEPARATOR}' + "
    data = f"{_ENV_CLAIM}.{ENV_DATA_DIGEST}" if include_data else f"'{NO_DATA}'"
    return sep.join(
        (
            _IMAGE_CLAIM,
            data,
            f"{_ENV_CLAIM}.{ENV_MODEL_DIGEST}",
            f"{_ENV_CLAIM}.{ENV_RECIPIENT_DIGEST}",
        )
    )


def env_shape_condition(*, include_data: bool) -> str:
    """A CEL attribute-condition clause requiring each override the uid uses to be a digest
    (``^sha256:[0-9a-f]{64}$``), so no override can smuggle a ``::`` into the uid."""
    names = [ENV_DATA_DIGEST] if include_data else []
    names += [ENV_MODEL_DIGEST, ENV_RECIPIENT_DIGEST]
    return " && ".join(f"{_ENV_CLAIM}.{name}.matches('{_DIGEST_RE_CEL}')" for name in names)


def principal_set(project_number: str, pool_id: str, uid: str) -> str:
    """The IAM member that grants a role to every token whose mapped uid equals ``uid``."""
    if not project_number.isdigit():
        raise ValueError("expected a numeric project number")
    if not _SAFE_ID_RE.fullmatch(pool_id):
        raise ValueError("expected a workload identity pool id of [a-z0-9-], at most 63 chars")
    WorkloadIdentity.from_uid(uid)
    return (
        f"principalSet://iam.googleapis.com/projects/{project_number}/locations/global/"
        f"workloadIdentityPools/{pool_id}/attribute.{WORKLOAD_UID_ATTRIBUTE}/{uid}"
    )
