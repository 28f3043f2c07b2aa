"""Grant reports (issue 29), split by direction: what an asset's owner reports after
``sealbench policy sync`` wrote its key's grants (:class:`GrantsReport`), and whether those
grants follow the asset's current approvals (:class:`GrantsStatus`)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import AwareDatetime, Field

from sealbench.server.schemas.common import Digest, Id, WireModel

__all__ = ["GrantsReport", "GrantsStatus"]


class GrantsReport(WireModel):
    """The grant set one ``policy sync`` wrote for one asset: its digest
    (:func:`sealbench.contract.workload.grant_set_digest` over the workloads granted) and when."""

    grants_digest: Digest
    synced_at: AwareDatetime = Field(description="when the sync wrote the grants (UTC)")


class GrantsStatus(WireModel):
    """Whether the grants an asset's owner last wrote are the ones its current approvals
    require (``lagging``: they are not, and ``command`` is what the owner runs)."""

    asset_kind: Literal["dataset", "model"]
    asset_id: Id
    asset_name: str
    owner_id: int
    sealed: bool = Field(description="the asset has coordinates (a key to grant); a sync "
                         "needs them")
    required_digest: Digest | None = Field(
        description="the grant set the current approvals require; None when the registry "
        "cannot compute it (a dataset of an approved pair has no result recipient digest)")
    required_count: int = Field(description="how many workloads the current approvals grant")
    reported_digest: Digest | None = Field(
        description="the grant set the owner's last sync reported; None: never reported")
    synced_at: datetime | None
    lagging: bool = Field(description="the owner's grants do not follow the approvals: a "
                          "'sealbench policy sync' is needed")
    command: str = Field(description="the command the asset's owner runs to sync its grants")
