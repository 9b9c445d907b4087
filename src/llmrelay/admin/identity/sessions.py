"""Console sessions: a random token in the `llmrelay_session` cookie, its SHA-256 in the
database. A session ends when revoked (sign-out, password change, removal from a tenant,
account disabled), after the idle lifetime without a request, or at its absolute end.
Every request re-reads the user's memberships, so a role change applies at once."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from fastapi import Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.access import SESSION_COOKIE, Actor, Role
from llmrelay.admin.identity import credentials, passkey_repository, repository
from llmrelay.admin.state import AdminState, SessionPolicy
from llmrelay.store.db import session_factory
from llmrelay.store.models_access import ConsoleSession, User
from llmrelay.store.types import utcnow

#: last_seen_at is written at most this often per session (not on every request).
_TOUCH_EVERY = timedelta(seconds=60)


@dataclass(frozen=True, slots=True)
class Started:
    """A new session: the token for the cookie (never stored) and its CSRF token."""

    token: str
    csrf_token: str
    session_id: str
    expires_at: datetime


async def actor_for(state: AdminState, token: str) -> tuple[Actor, str] | None:
    """The actor of a live session and its CSRF token, or None (unknown, ended, expired, or
    the user is disabled or not activated)."""
    now = utcnow()
    policy = state.sessions
    async with session_factory(state.database())() as session, session.begin():
        found = await repository.session_with_user(session, credentials.digest(token))
        if found is None:
            return None
        row, user = found
        if (
            row.revoked_at is not None
            or user.disabled
            or user.pending
            or now >= row.expires_at
            or now >= row.last_seen_at + timedelta(seconds=policy.idle_s)
        ):
            return None
        if now - row.last_seen_at >= _TOUCH_EVERY:
            await repository.touch_session(session, row.id, now)
        return await actor_of(session, user, row.id), row.csrf_token


async def actor_of(session: AsyncSession, user: User, session_id: str | None) -> Actor:
    roles: dict[str, Role] = {}
    projects: dict[str, frozenset[str] | None] = {}
    locked: set[str] = set()
    #: Whether the user has a second factor; its passkeys are counted only when a tenant
    #: requires one and TOTP is off (most requests never ask).
    second: bool | None = True if user.totp_enabled else None
    for membership, requires_2fa in await repository.memberships(session, user.id):
        roles[membership.tenant_id] = Role(membership.role)
        ids = membership.project_ids
        projects[membership.tenant_id] = None if ids is None else frozenset(ids)
        if requires_2fa:
            if second is None:
                second = await passkey_repository.count_of_user(session, user.id) > 0
            if not second:
                locked.add(membership.tenant_id)
    return Actor(
        kind="user",
        user_id=user.id,
        email=user.email,
        platform_admin=user.platform_admin,
        roles=roles,
        session_id=session_id,
        projects=projects,
        locked=frozenset(locked),
        must_change_password=user.password_change_required,
    )


async def start(
    session: AsyncSession,
    policy: SessionPolicy,
    user_id: str,
    ip: str | None,
    user_agent: str | None,
) -> Started:
    """A new session with a fresh random token: never one the client chose or had before."""
    now = utcnow()
    token, csrf_token = credentials.new_token(), credentials.new_token()
    row = ConsoleSession(
        token_digest=credentials.digest(token),
        user_id=user_id,
        csrf_token=csrf_token,
        created_at=now,
        last_seen_at=now,
        expires_at=now + timedelta(seconds=policy.absolute_s),
        ip=ip,
        user_agent=(user_agent or "")[:200] or None,
    )
    session.add(row)
    await session.flush()
    return Started(token, csrf_token, row.id, row.expires_at)


def set_cookie(response: Response, policy: SessionPolicy, started: Started) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        started.token,
        max_age=int(policy.absolute_s),
        path="/",
        secure=policy.secure_cookies,
        httponly=True,
        samesite="lax",
    )


def clear_cookie(response: Response, policy: SessionPolicy) -> None:
    response.delete_cookie(
        SESSION_COOKIE, path="/", secure=policy.secure_cookies, httponly=True, samesite="lax"
    )


def presented_token(request: Request) -> str | None:
    return request.cookies.get(SESSION_COOKIE) or None
