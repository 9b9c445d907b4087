"""Single-use link tokens (`account_tokens`): 256 random bits each, only their SHA-256 digest
stored, bound to one user and one purpose, expiring. Using one is one UPDATE whose condition
(unused, unexpired, this purpose) decides: two requests racing with the same token cannot
both succeed."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.identity.credentials import digest, new_token
from llmrelay.admin.kit.problems import Invalid
from llmrelay.store.models_billing import AccountToken
from llmrelay.store.types import utcnow

INVITATION = "invitation"
VERIFICATION = "verification"
PASSWORD_RESET = "password_reset"


class InvalidToken(Invalid):
    def __init__(self) -> None:
        super().__init__(
            "token: the link is not valid: it was used already, has expired, or was replaced "
            "by a newer one; ask for a new one",
            "token",
        )


@dataclass(frozen=True, slots=True)
class Issued:
    #: The token itself: goes into the mail's link, never into the database or a log.
    token: str
    id: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class Used:
    user_id: str
    data: dict[str, Any]


async def issue(
    session: AsyncSession,
    user_id: str,
    purpose: str,
    ttl_s: float,
    data: dict[str, Any] | None = None,
) -> Issued:
    token = new_token()
    now = utcnow()
    row = AccountToken(
        user_id=user_id,
        purpose=purpose,
        token_digest=digest(token),
        data=data or {},
        expires_at=now + timedelta(seconds=ttl_s),
        created_at=now,
    )
    session.add(row)
    await session.flush()
    return Issued(token, row.id, row.expires_at)


async def use(session: AsyncSession, token: str, purpose: str) -> Used:
    """Spend the token (InvalidToken when it is unknown, used, expired or for another
    purpose: one message for all, nothing said about which)."""
    now = utcnow()
    row = (
        await session.execute(
            update(AccountToken)
            .where(
                AccountToken.token_digest == digest(token),
                AccountToken.purpose == purpose,
                AccountToken.used_at.is_(None),
                AccountToken.expires_at > now,
            )
            .values(used_at=now)
            .returning(AccountToken.user_id, AccountToken.data)
            .execution_options(synchronize_session=False)
        )
    ).first()
    if row is None:
        raise InvalidToken()
    return Used(str(row[0]), dict(row[1] or {}))


async def retire(session: AsyncSession, user_id: str, purpose: str) -> None:
    """Every unused token of the user for `purpose` stops working (a newer link replaces
    older ones; a used one ends its siblings)."""
    await session.execute(
        update(AccountToken)
        .where(
            AccountToken.user_id == user_id,
            AccountToken.purpose == purpose,
            AccountToken.used_at.is_(None),
        )
        .values(used_at=utcnow())
        .execution_options(synchronize_session=False)
    )
