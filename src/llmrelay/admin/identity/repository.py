"""All SQL of console identity: users by email, memberships with their tenants' 2FA rule,
sessions, recovery codes and sign-in failures."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.store.models import Tenant
from llmrelay.store.models_access import (
    ConsoleSession,
    LoginFailure,
    Membership,
    RecoveryCode,
    User,
)


async def user_by_email(session: AsyncSession, email: str) -> User | None:
    return await session.scalar(select(User).where(User.email == email))


async def user_by_id(session: AsyncSession, user_id: str) -> User | None:
    return await session.get(User, user_id)


async def memberships(session: AsyncSession, user_id: str) -> Sequence[tuple[Membership, bool]]:
    """The user's memberships, each with whether its tenant requires two-factor."""
    rows = await session.execute(
        select(Membership, Tenant.require_2fa)
        .join(Tenant, Tenant.id == Membership.tenant_id)
        .where(Membership.user_id == user_id)
        .order_by(Membership.tenant_id)
    )
    return [(membership, bool(required)) for membership, required in rows]


async def tenant_names(session: AsyncSession, tenant_ids: Sequence[str]) -> dict[str, str]:
    """id -> name of these tenants (for the caller's own memberships)."""
    if not tenant_ids:
        return {}
    rows = await session.execute(
        select(Tenant.id, Tenant.name).where(Tenant.id.in_(list(tenant_ids)))
    )
    return {tenant_id: name for tenant_id, name in rows}


async def session_with_user(
    session: AsyncSession, token_digest: str
) -> tuple[ConsoleSession, User] | None:
    row = (
        await session.execute(
            select(ConsoleSession, User)
            .join(User, User.id == ConsoleSession.user_id)
            .where(ConsoleSession.token_digest == token_digest)
        )
    ).first()
    return None if row is None else (row[0], row[1])


async def touch_session(session: AsyncSession, session_id: str, now: datetime) -> None:
    await session.execute(
        update(ConsoleSession).where(ConsoleSession.id == session_id).values(last_seen_at=now)
    )


async def revoke_session(session: AsyncSession, session_id: str, now: datetime) -> None:
    await session.execute(
        update(ConsoleSession)
        .where(ConsoleSession.id == session_id, ConsoleSession.revoked_at.is_(None))
        .values(revoked_at=now)
    )


async def revoke_sessions_of(session: AsyncSession, user_id: str, now: datetime) -> int:
    """End every live session of the user at once; how many there were."""
    result = await session.execute(
        update(ConsoleSession)
        .where(ConsoleSession.user_id == user_id, ConsoleSession.revoked_at.is_(None))
        .values(revoked_at=now)
    )
    return int(getattr(result, "rowcount", 0) or 0)


#: Rows of `login_failures` whose email starts with this are not sign-in failures but other
#: throttled attempts (sign-ups, password-reset requests: admin/accounts/throttle.py), kept in
#: the same table so every replica sees them; sign-in throttling leaves them out.
ATTEMPT_MARK = "~"


def _failure() -> ColumnElement[bool]:
    return ~LoginFailure.email.startswith(ATTEMPT_MARK)


async def failures_since(
    session: AsyncSession, since: datetime, *, email: str | None = None, ip: str | None = None
) -> tuple[int, datetime | None]:
    """How many sign-in failures for the email (or the IP) since `since`, and the oldest."""
    query = select(func.count(), func.min(LoginFailure.at)).where(
        LoginFailure.at >= since, _failure()
    )
    if email is not None:
        query = query.where(LoginFailure.email == email)
    if ip is not None:
        query = query.where(LoginFailure.ip == ip)
    count, oldest = (await session.execute(query)).one()
    return int(count), oldest


async def add_failure(session: AsyncSession, email: str, ip: str | None, now: datetime) -> None:
    session.add(LoginFailure(at=now, email=email[:320], ip=ip))


async def clear_failures(session: AsyncSession, email: str) -> None:
    await session.execute(delete(LoginFailure).where(LoginFailure.email == email))


async def prune_failures(session: AsyncSession, before: datetime) -> None:
    await session.execute(delete(LoginFailure).where(LoginFailure.at < before, _failure()))


async def replace_recovery_codes(
    session: AsyncSession, user_id: str, digests: Sequence[str]
) -> None:
    await session.execute(delete(RecoveryCode).where(RecoveryCode.user_id == user_id))
    session.add_all(RecoveryCode(user_id=user_id, code_digest=d) for d in digests)


async def use_recovery_code(
    session: AsyncSession, user_id: str, code_digest: str, now: datetime
) -> bool:
    """Mark an unused code used; False when there is none (a code works once, even when two
    sign-ins race: the UPDATE's condition decides)."""
    result = await session.execute(
        update(RecoveryCode)
        .where(
            RecoveryCode.user_id == user_id,
            RecoveryCode.code_digest == code_digest,
            RecoveryCode.used_at.is_(None),
        )
        .values(used_at=now)
    )
    return bool(getattr(result, "rowcount", 0))


async def unused_recovery_codes(session: AsyncSession, user_id: str) -> int:
    count = await session.scalar(
        select(func.count()).where(RecoveryCode.user_id == user_id, RecoveryCode.used_at.is_(None))
    )
    return int(count or 0)


async def delete_recovery_codes(session: AsyncSession, user_id: str) -> None:
    await session.execute(delete(RecoveryCode).where(RecoveryCode.user_id == user_id))


async def count_users(session: AsyncSession) -> int:
    return int(await session.scalar(select(func.count()).select_from(User)) or 0)


async def live_sessions_of(
    session: AsyncSession, user_id: str, now: datetime, idle_since: datetime
) -> Sequence[ConsoleSession]:
    """The user's sessions still in force (not ended, not past either lifetime), newest
    first."""
    rows = await session.scalars(
        select(ConsoleSession)
        .where(
            ConsoleSession.user_id == user_id,
            ConsoleSession.revoked_at.is_(None),
            ConsoleSession.expires_at > now,
            ConsoleSession.last_seen_at > idle_since,
        )
        .order_by(ConsoleSession.created_at.desc(), ConsoleSession.id)
    )
    return list(rows)


async def revoke_other_sessions(
    session: AsyncSession, user_id: str, keep: str | None, now: datetime
) -> int:
    """End every live session of the user but `keep`; how many there were."""
    query = update(ConsoleSession).where(
        ConsoleSession.user_id == user_id, ConsoleSession.revoked_at.is_(None)
    )
    if keep is not None:
        query = query.where(ConsoleSession.id != keep)
    result = await session.execute(query.values(revoked_at=now))
    return int(getattr(result, "rowcount", 0) or 0)


async def session_of_user(
    session: AsyncSession, user_id: str, session_id: str
) -> ConsoleSession | None:
    return await session.scalar(
        select(ConsoleSession).where(
            ConsoleSession.id == session_id, ConsoleSession.user_id == user_id
        )
    )
