"""Benchmark↔asset association wire types."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from sealbench.server.schemas.assets import AssetKind
from sealbench.server.schemas.common import Id, WireModel

__all__ = [
    "AssociationCreate",
    "AssociationDecision",
    "AssociationPublic",
    "AssociationStatus",
    "InitiatorRole",
]

_CONSENT = ("the dataset's owner consents to the benchmark publishing this dataset's figures "
            "exactly, without noise and without a privacy bound (required from the dataset's "
            "owner when the benchmark's pin ends in '-exact'; ignored otherwise)")

#: ``withdrawn``: the asset's owner took a pending or approved link back (future runs are refused,
#: key grants drop out at the next ``policy sync``, results already verified stay, marked).
AssociationStatus = Literal["pending", "approved", "rejected", "withdrawn"]
InitiatorRole = Literal["asset_owner", "benchmark_owner"]


class AssociationCreate(WireModel):
    """A request (from the asset's owner) or an invitation (from the benchmark's owner)."""

    asset_id: Id
    exact_release_consent: bool = Field(default=False, description=_CONSENT)


class AssociationDecision(WireModel):
    """An approval's or rejection's body (optional: no body is an empty one)."""

    exact_release_consent: bool = Field(default=False, description=_CONSENT)


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
    exact_release_consent: bool = Field(
        description="the dataset's owner consented to exact (non-private) releases in the "
                    "revision that let it join (only for a benchmark whose pin ends in '-exact')")
    created_at: datetime
