"""Confidential Space key release in Google's terms: the CEL attribute mapping that computes a
token's workload uid, the CEL attribute condition rendered from the table of operator inputs,
and the ``principalSet`` IAM member that grants a key to one uid. Re-exported by
:mod:`sealbench.gcp.confidential_space`; :mod:`sealbench.gcp.policy` builds provider bodies
and bindings from it.

On Google Cloud the uid (:meth:`~sealbench.contract.workload.WorkloadIdentity.uid`) is computed by
the workload identity pool provider's attribute mapping, a CEL string concatenation
(:func:`uid_mapping_expression`), and an owner grants its key to ``principalSet://iam.googleapis.
com/projects/N/locations/global/workloadIdentityPools/P/attribute.workload_uid/<uid>``
(:func:`principal_set`). The mock STS evaluates the very same expressions with cel-python, so
this module is the one source of truth for the real cloud and the mock.

Length limits (Google Cloud IAM ``WorkloadIdentityPoolProvider.attributeMapping`` reference):
``google.subject`` is capped at 127 bytes, a custom attribute *key* at 100 characters
(``[a-z0-9_]``), a mapping *expression* at 2048 characters, and all mapped attributes together
at 8 KB once evaluated. No separate cap on a custom attribute *value* is documented. A uid
(:meth:`~sealbench.contract.workload.WorkloadIdentity.uid`) is six fields joined by ``::``: four
``sha256:`` digests of 71 characters (image, dataset, model, recipient), the benchmark id
(``[1-9][0-9]{0,17}``: 1 to 18 digits) and the plug-in pin (``<name>/<version>``, 3 to 65
characters: :data:`~sealbench.contract.pin.PIN_PATTERN`), so ``4 * 71 + 5 * 2 = 294`` characters
plus the id and the pin. For the pins installed today that is **301 to 377**: 301 for ``wdbc/1``
with benchmark 1 (the shortest installed pin), 311 for ``brats-2023-gli/1``, and at most 377 for
an 18-digit id with a 65-character pin; a model owner's uid has ``-`` for the dataset digest, 70
characters fewer (231 to 307). (Computed from ``WorkloadIdentity(...).uid()`` with those fields;
``tests/unit/gcp/test_uid_length.py`` keeps these numbers true.) So it cannot be
``google.subject`` but fits a custom attribute (``attribute.workload_uid``) and the 8 KB total
with room to spare; the mapping expression is about 250 characters. The uid is therefore used
verbatim, not hashed, which keeps IAM bindings readable and auditable. If a real deployment ever
rejects the value length, the fallback is a second attribute per digest, not a hash (CEL in
attribute mappings has no SHA-256).

The condition (:func:`render_condition`) has one clause per bound or pinned input of
:data:`~sealbench.contract.inputs.OPERATOR_INPUTS`, from typed, validated values only; every
literal is refused unless it is made of ``[A-Za-z0-9:._/~-]``, so no user string is ever pasted
into CEL. A name in :data:`~sealbench.contract.inputs.ALL_OVERRIDE_NAMES` (the evaluation's and
the aggregator's overrides) without an entry in the table makes it raise.

The aggregator (issue 27) in a data owner's pool. The aggregator pools many datasets, so its
token carries no ``SEALBENCH_DATA_DIGEST``; a data owner's mapping then writes the data field
as ``-`` (:data:`~sealbench.contract.workload.NO_DATA`) and the shape clause checks the digest
only when it is present. Why that opens nothing to an attacker: a data owner's grants name a uid
whose data field is ``-`` only for the aggregator, i.e. ``<aggregator image>::-::<model>::
<pool recipient>::<benchmark>::<pin>`` per model approved in each benchmark the dataset joined
(the pool recipient: the digest of the registry's pool-release key the benchmark recorded, to
which the aggregator seals its release; :func:`sealbench.server.services.grants.required_grants`,
and ``policy sync``'s :func:`sealbench.client.assets.grants.allowed_workloads`), and
:class:`sealbench.gcp.policy.AssetPolicy` refuses a data-less identity for any image it also
grants with a dataset. So

- an evaluation image launched without the data digest maps to ``<evaluation image>::-::…``:
  no grant names it (the registry refuses an aggregator digest equal to the evaluation
  image's), and the evaluation enclave refuses to run without the digest anyway;
- the aggregator image launched with any other model, benchmark or pin, or another recipient
  (a key the launcher could open the release with), maps to a uid the owner did not grant,
  exactly as an evaluation run would;
- the aggregator image launched *with* a data digest maps to a uid with that digest, which no
  grant names (its grants leave the data field ``-``), and its own launch policy refuses the
  override;
- endpoint overrides, a command, unknown overrides and the machine are judged by the same
  clauses as the evaluation's: the "known overrides only" list is the union of both workloads'
  names, and an evaluation run carrying an aggregator-only name is refused by its enclave
  (:meth:`sealbench.contract.spec.RunSpec.from_environ`).

A model owner's pool is unchanged: its data field is always ``-`` and its grants never name the
aggregator (which never opens a model).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final, assert_never

from sealbench.contract.inputs import (
    ALL_OVERRIDE_NAMES,
    ENV_INPUTS,
    OPERATOR_INPUTS,
    ConditionContext,
    ConditionInputError,
    OperatorInput,
    Rule,
)
from sealbench.contract.pin import PIN_PATTERN
from sealbench.contract.workload import (
    BENCHMARK_ID_PATTERN,
    ENV_BENCHMARK_ID,
    ENV_DATA_DIGEST,
    ENV_METRICS_VERSION,
    ENV_MODEL_DIGEST,
    ENV_RECIPIENT_DIGEST,
    NO_DATA,
    UID_SEPARATOR,
    WorkloadIdentity,
)
from sealbench.crypto.digest import parse_digest
from sealbench.gcp._cs_claims import (
    CONFIDENTIAL_HWMODELS,
    EXPERIMENTAL_SUPPORT_ATTRIBUTE,
    REQUIRED_DBGSTAT,
    REQUIRED_GPU_CC_MODE,
    REQUIRED_SUPPORT_ATTRIBUTE,
    REQUIRED_SWNAME,
)

__all__ = [
    "WORKLOAD_UID_ATTRIBUTE",
    "env_shape_condition",
    "principal_set",
    "render_condition",
    "uid_mapping_expression",
]

#: The custom attribute (``attribute.workload_uid``) that carries :meth:`WorkloadIdentity.uid`.
WORKLOAD_UID_ATTRIBUTE: Final = "workload_uid"

_IMAGE_CLAIM: Final = "assertion.submods.container.image_digest"
_ENV: Final = "assertion.submods.container.env_override"
_DIGEST_RE_CEL: Final = "^sha256:[0-9a-f]{64}$"
_SAFE_ID_RE: Final = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_LITERAL: Final = re.compile(r"[A-Za-z0-9:._/~-]{1,400}")


def uid_mapping_expression(*, include_data: bool) -> str:
    """The CEL attribute-mapping expression for ``attribute.workload_uid``.

    With ``include_data=True`` (a data owner's pool) the dataset digest comes from the token,
    and is ``-`` when the token carries none (the aggregator's, issue 27: see the module
    docstring for why only the aggregator's grants name such a uid); with ``False`` (a model
    owner's pool) the data field is the constant ``-``, so the mapped value equals
    :meth:`WorkloadIdentity.uid` of :meth:`WorkloadIdentity.without_data`. A token that lacks
    one of the other overrides makes the expression fail, which GCP (and the mock) treat as a
    rejected credential.
    """
    sep = f" + '{UID_SEPARATOR}' + "
    data_claim = f"{_ENV}.{ENV_DATA_DIGEST}"
    data = (f"(has({data_claim}) ? {data_claim} : '{NO_DATA}')" if include_data
            else f"'{NO_DATA}'")
    return sep.join(
        (_IMAGE_CLAIM, data, f"{_ENV}.{ENV_MODEL_DIGEST}", f"{_ENV}.{ENV_RECIPIENT_DIGEST}",
         f"{_ENV}.{ENV_BENCHMARK_ID}", f"{_ENV}.{ENV_METRICS_VERSION}")
    )


def env_shape_condition(*, include_data: bool) -> str:
    """A CEL attribute-condition clause requiring each override the uid uses to have its
    field's shape (a digest ``^sha256:[0-9a-f]{64}$``, a decimal benchmark id, a plug-in pin),
    so no override can smuggle a ``::`` into the uid. With ``include_data`` the data digest is
    checked when present (absent, the mapping writes ``-``: the aggregator's uid)."""
    shapes = [(name, _DIGEST_RE_CEL) for name in (ENV_MODEL_DIGEST, ENV_RECIPIENT_DIGEST)]
    shapes += [(ENV_BENCHMARK_ID, BENCHMARK_ID_PATTERN), (ENV_METRICS_VERSION, PIN_PATTERN)]
    clauses = [f"{_ENV}.{name}.matches('{shape}')" for name, shape in shapes]
    if include_data:
        data = f"{_ENV}.{ENV_DATA_DIGEST}"
        clauses.insert(0, f"(!has({data}) || {data}.matches('{_DIGEST_RE_CEL}'))")
    return " && ".join(clauses)


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


def _literal(value: str) -> str:
    if not _LITERAL.fullmatch(value):
        raise ConditionInputError(f"refusing to put {value[:80]!r} into a CEL expression")
    return f"'{value}'"


def _list(values: Iterable[str]) -> str:
    return "[" + ", ".join(_literal(v) for v in sorted(values)) + "]"


def _clause(entry: OperatorInput, ctx: ConditionContext) -> str | None:
    rule = entry.rule
    if rule is None or rule in (Rule.BOUND_BY_DIGEST, Rule.RELEASE_BOUND):
        return None
    if rule is Rule.UID_FIELD:
        return None  # rendered once for all uid fields below (env_shape_condition)
    if rule is Rule.IMAGE:
        images = _list(map(parse_digest, ctx.image_digests))
        return f"{_IMAGE_CLAIM} in {images}"
    if rule is Rule.ENDPOINT:
        if ctx.endpoints is None:
            return f"!has({_ENV}.{entry.name})"
        return f"{_ENV}.{entry.name} == {_literal(ctx.endpoints.env_names()[entry.name])}"
    if rule is Rule.NO_COMMAND:
        return (
            "(!has(assertion.submods.container.cmd_override)"
            " || assertion.submods.container.cmd_override == null"
            " || size(assertion.submods.container.cmd_override) == 0)"
        )
    if rule is Rule.KNOWN_OVERRIDES_ONLY:
        return f"{_ENV}.all(k, k in {_list(ALL_OVERRIDE_NAMES)})"
    if rule is Rule.HARDWARE:
        return f"assertion.hwmodel in {_list(CONFIDENTIAL_HWMODELS)}"
    if rule is Rule.SECURE_BOOT:
        return "assertion.secboot == true"
    if rule is Rule.PRODUCTION_IMAGE:
        support = "assertion.submods.confidential_space.support_attributes"
        stable = f"{_literal(REQUIRED_SUPPORT_ATTRIBUTE)} in {support}"
        if ctx.experimental_gpu_images and ctx.experimental_benchmark_ids:
            images = _list(map(parse_digest, ctx.experimental_gpu_images))
            benchmarks = _list(ctx.experimental_benchmark_ids)
            stable = (
                f"({stable} || ({_literal(EXPERIMENTAL_SUPPORT_ATTRIBUTE)} in {support}"
                f" && assertion.submods.nvidia_gpu.cc_mode == {_literal(REQUIRED_GPU_CC_MODE)}"
                f" && {_IMAGE_CLAIM} in {images}"
                f" && {_ENV}.{ENV_BENCHMARK_ID} in {benchmarks}))"
            )
        return (
            f"assertion.swname == {_literal(REQUIRED_SWNAME)}"
            f" && assertion.dbgstat == {_literal(REQUIRED_DBGSTAT)}"
            f" && {stable}"
        )
    assert_never(rule)


def render_condition(ctx: ConditionContext) -> str:
    """The attribute condition: one clause per bound or pinned input of :data:`OPERATOR_INPUTS`
    (machine and image first, then the launch settings and overrides), joined with ``&&``.
    Raises :class:`ConditionInputError` if an env override a workload defines (the run spec's
    or the aggregator's) has no entry."""
    missing = sorted(set(ALL_OVERRIDE_NAMES) - set(ENV_INPUTS))
    if missing:
        raise ConditionInputError(f"env overrides without a class: {missing}")
    order = sorted(OPERATOR_INPUTS, key=lambda i: i.is_env)  # stable: machine first
    # one clause per distinct rule: two entries enforced by one rule (an unknown override and a
    # would-be release knob) render it once
    clauses = list(dict.fromkeys(c for c in (_clause(entry, ctx) for entry in order)
                                 if c is not None))
    clauses.append(env_shape_condition(include_data=ctx.include_data))
    return "\n&& ".join(clauses)
