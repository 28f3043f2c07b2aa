"""Benchmark↔asset association wire types."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from sealbench.server.schemas.assets import AssetKind
from sealbench.server.schemas.common import Id, WireModel

__all__ = ["AssociationCreate", "AssociationPublic", "AssociationStatus", "InitiatorRole"]

#: ``withdrawn``: the asset's owner took a pending or approved link back (future runs are refused,
#: key grants drop out at the next ``policy sync``, results already verified stay, marked).
AssociationStatus = Literal["pending", "approved", "rejected", "withdrawn"]
InitiatorRole = Literal["asset_owner", "benchmark_owner"]


class AssociationCreate(WireModel):
    """A request (from the asset's owner) or an invitation (from the benchmark's owner)."""

    asset_id: Id


class AssociationPublic(WireModel):
    """One revision of a link; the highest revision of a pair is its current state."""

    id: int
    benchmark_id: int
    asset_kind: AssetKind
    asset_id: int
    revision: int
    status: AssociationStatus
    initiator_role: InitiatorRole
    initiated_by_id: int
    actor_id: int
    created_at: datetime
