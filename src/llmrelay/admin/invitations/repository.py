"""The SQL of pending invitations: each pending account's latest invitation token, and the
latest invitation mail to an address."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.accounts import tokens
from llmrelay.store.models_access import Membership, User
from llmrelay.store.models_billing import AccountToken, EmailMessage


async def pending(session: AsyncSession, limit: int = 500) -> Sequence[tuple[User, AccountToken]]:
    """Pending accounts with their newest unused invitation token, newest first."""
    rows = await session.execute(
        select(User, AccountToken)
        .join(AccountToken, AccountToken.user_id == User.id)
        .where(
            User.pending.is_(True),
            AccountToken.purpose == tokens.INVITATION,
            AccountToken.used_at.is_(None),
        )
        .order_by(AccountToken.created_at.desc())
        .limit(limit * 4)
    )
    newest: dict[str, tuple[User, AccountToken]] = {}
    for user, token in rows:
        newest.setdefault(user.id, (user, token))
    return list(newest.values())[:limit]


async def latest_token(session: AsyncSession, user_id: str) -> AccountToken | None:
    return await session.scalar(
        select(AccountToken)
        .where(
            AccountToken.user_id == user_id,
            AccountToken.purpose == tokens.INVITATION,
            AccountToken.used_at.is_(None),
        )
        .order_by(AccountToken.created_at.desc())
        .limit(1)
    )


async def latest_mails(session: AsyncSession, addresses: Sequence[str]) -> dict[str, EmailMessage]:
    """The newest invitation mail to each address."""
    if not addresses:
        return {}
    rows = await session.scalars(
        select(EmailMessage)
        .where(EmailMessage.kind == "invitation", EmailMessage.to_address.in_(list(addresses)))
        .order_by(EmailMessage.created_at.desc())
    )
    found: dict[str, EmailMessage] = {}
    for mail in rows:
        found.setdefault(mail.to_address, mail)
    return found


async def remove_membership(session: AsyncSession, user_id: str, tenant_id: str) -> None:
    await session.execute(
        delete(Membership).where(Membership.user_id == user_id, Membership.tenant_id == tenant_id)
    )


async def has_memberships(session: AsyncSession, user_id: str) -> bool:
    found = await session.scalar(select(Membership.user_id).where(Membership.user_id == user_id))
    return found is not None
