"""``/api/v1/users``: who am I."""

from __future__ import annotations

from fastapi import APIRouter

from sealbench.server.deps import CurrentUser, SessionDep
from sealbench.server.routers._common import ERRORS, in_thread
from sealbench.server.schemas import UserPublic
from sealbench.server.services import users

__all__ = ["router"]

router = APIRouter(prefix="/users", tags=["users"], responses=ERRORS)


@router.get("/me")
async def me(session: SessionDep, user: CurrentUser) -> UserPublic:
    return await in_thread(
        session,
        lambda: UserPublic.model_validate(
            users.get_user(session, user.user_id), from_attributes=True
        ),
    )
