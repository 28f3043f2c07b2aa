"""What waits for the caller (``GET /api/v1/inbox``): links to decide on, the caller's own
requests still pending, benchmarks to approve (admins), and the approved evaluations of the
caller's datasets with their latest verified result, and the caller's assets whose key grants
lag their approvals (``policy sync`` needed)."""

from __future__ import annotations

from pydantic import Field

from sealbench.server.schemas.associations import AssociationPublic
from sealbench.server.schemas.benchmarks import BenchmarkPublic
from sealbench.server.schemas.common import WireModel
from sealbench.server.schemas.grants import GrantsStatus

__all__ = ["Inbox", "InboxEvaluation", "InboxLink", "ReleaseTerms"]


class ReleaseTerms(WireModel):
    """What each run of a benchmark publishes about a dataset's cases (its plug-in's declared
    release): a differentially private release at ``epsilon``, ``delta``, or an **exact** one
    (no noise, no privacy bound; each dataset's owner consents to it)."""

    exact: bool
    epsilon: float | None = Field(description="None for an exact release")
    delta: float | None = Field(description="None for an exact release")


_TERMS = ("what each run publishes (the benchmark plug-in's release); None when the registry "
          "does not have the plug-in")


class InboxLink(WireModel):
    """A pending association with the names needed to decide on it."""

    association: AssociationPublic
    benchmark_name: str
    benchmark_version: str
    asset_name: str
    asset_version: str | None = Field(description="the model's version; None for a dataset")
    asset_owner_id: int
    benchmark_owner_id: int
    benchmark_accept_experimental: bool = Field(
        default=False,
        description="the benchmark accepts EXPERIMENTAL (confidential-GPU preview) images",
    )
    release: ReleaseTerms | None = Field(default=None, description=_TERMS)


class InboxEvaluation(WireModel):
    """An approved (benchmark, dataset, model) triple of one of the caller's datasets."""

    benchmark_id: int
    benchmark_name: str
    benchmark_version: str
    dataset_id: int
    dataset_name: str
    model_id: int
    model_name: str
    model_version: str
    result_id: int | None = Field(
        description="the latest verified result of the triple; None: not evaluated yet"
    )
    benchmark_accept_experimental: bool = Field(
        default=False,
        description="the benchmark accepts EXPERIMENTAL (confidential-GPU preview) images",
    )
    release: ReleaseTerms | None = Field(default=None, description=_TERMS)


class Inbox(WireModel):
    """Each list holds at most ``limit`` items; ``truncated`` says one of them was cut."""

    to_decide: tuple[InboxLink, ...] = Field(
        description="pending associations that wait for the caller's approval or rejection"
    )
    awaiting_others: tuple[InboxLink, ...] = Field(
        description="associations the caller opened that wait for the other side"
    )
    benchmarks_to_approve: tuple[BenchmarkPublic, ...] = Field(
        description="pending benchmarks (admins only; empty for everyone else)"
    )
    evaluations: tuple[InboxEvaluation, ...]
    limit: int
    truncated: bool
    syncs_needed: tuple[GrantsStatus, ...] = Field(
        default=(),
        description="your sealed assets whose key grants lag their approvals: 'sealbench "
        "policy sync' is needed (each says the command)",
    )
