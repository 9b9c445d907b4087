"""Console sessions as their user and the user's admins see them: list the sessions still
in force (created, last seen, address, browser), end one, end all the others. An admin with
users:read in one of the user's tenants sees them; ending them needs what editing the account
needs (users/service.check_may_edit)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin import audit
from llmrelay.admin.access import Actor, authenticate, require
from llmrelay.admin.identity import repository, sessions
from llmrelay.admin.identity.endpoints import iso, own_user
from llmrelay.admin.identity.session_schemas import Revoked, SessionInfo, SessionList
from llmrelay.admin.kit.http import Session, state
from llmrelay.admin.kit.problems import NotFound
from llmrelay.admin.state import SessionPolicy
from llmrelay.admin.users import service as users
from llmrelay.store.models_access import ConsoleSession
from llmrelay.store.types import utcnow

router = APIRouter(tags=["auth"])

SignedIn = Annotated[Actor, Depends(authenticate)]
Reader = Annotated[Actor, Depends(require("users:read"))]
Writer = Annotated[Actor, Depends(require("users:write"))]


async def _list(
    session: AsyncSession, policy: SessionPolicy, user_id: str, current: str | None
) -> SessionList:
    now = utcnow()
    rows = await repository.live_sessions_of(
        session, user_id, now, now - timedelta(seconds=policy.idle_s)
    )
    return SessionList(data=[_info(row, current) for row in rows])


def _info(row: ConsoleSession, current: str | None) -> SessionInfo:
    return SessionInfo(
        id=row.id,
        created_at=iso(row.created_at),
        last_seen_at=iso(row.last_seen_at),
        expires_at=iso(row.expires_at),
        ip=row.ip,
        user_agent=row.user_agent,
        current=row.id == current,
    )


@router.get("/auth/sessions")
async def my_sessions(request: Request, actor: SignedIn, session: Session) -> SessionList:
    """My sessions still in force, newest first; `current` marks this one."""
    user = await own_user(session, actor)
    return await _list(session, state(request).sessions, user.id, actor.session_id)


@router.delete("/auth/sessions/{session_id}", status_code=204)
async def end_my_session(
    request: Request, session_id: str, actor: SignedIn, session: Session
) -> Response:
    """End one of my sessions (another browser, a lost device); ending this one signs out."""
    user = await own_user(session, actor)
    row = await repository.session_of_user(session, user.id, session_id)
    if row is None or row.revoked_at is not None:
        raise NotFound(f"no session {session_id!r}")
    audit.note(
        request, "session.revoke", "session", row.id, {"revoked": False}, {"revoked": True}, None
    )
    await repository.revoke_session(session, row.id, utcnow())
    await session.commit()
    response = Response(status_code=204)
    if row.id == actor.session_id:
        sessions.clear_cookie(response, state(request).sessions)
    return response


@router.post("/auth/sessions/revoke-others")
async def end_my_other_sessions(request: Request, actor: SignedIn, session: Session) -> Revoked:
    """End every session of mine but this one ("sign out everywhere else")."""
    user = await own_user(session, actor)
    ended = await repository.revoke_other_sessions(session, user.id, actor.session_id, utcnow())
    audit.note(
        request, "user.sessions_revoke", "user", user.id, {"sessions": ended}, {"sessions": 0}, None
    )
    await session.commit()
    return Revoked(revoked=ended)


@router.get("/users/{user_id}/sessions")
async def user_sessions(
    request: Request, user_id: str, actor: Reader, session: Session
) -> SessionList:
    """A user's sessions still in force (users:read in one of the user's tenants)."""
    user = await users.load_user(session, actor, "users:read", user_id)
    return await _list(session, state(request).sessions, user.id, actor.session_id)


@router.delete("/users/{user_id}/sessions")
async def end_user_sessions(
    request: Request, user_id: str, actor: Writer, session: Session
) -> Revoked:
    """Sign a user out everywhere (a lost laptop, a departing colleague): needs what editing
    the account needs. Calling it on oneself ends one's own sessions, this one too."""
    user = await users.load_user(session, actor, "users:write", user_id)
    await users.check_may_edit(session, actor, user)
    ended = await repository.revoke_sessions_of(session, user.id, utcnow())
    audit.note(
        request, "user.sessions_revoke", "user", user.id, {"sessions": ended}, {"sessions": 0}, None
    )
    await session.commit()
    return Revoked(revoked=ended)
