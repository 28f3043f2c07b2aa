"""User wire types."""

from __future__ import annotations

from datetime import datetime

from sealbench.server.schemas.common import WireModel

__all__ = ["UserPublic"]


class UserPublic(WireModel):
    id: int
    email: str
    is_admin: bool
    created_at: datetime
