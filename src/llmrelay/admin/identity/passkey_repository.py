"""All SQL of passkeys: a user's credentials, one by credential id, the signature counter's
compare-and-set, and the single-use challenges (issued, consumed by deleting the row, and
pruned once expired)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.store.models_passkeys import Passkey, PasskeyChallenge


async def of_user(session: AsyncSession, user_id: str) -> Sequence[Passkey]:
    rows = await session.scalars(
        select(Passkey).where(Passkey.user_id == user_id).order_by(Passkey.created_at, Passkey.id)
    )
    return list(rows)


async def count_of_user(session: AsyncSession, user_id: str) -> int:
    found = await session.scalar(select(func.count()).where(Passkey.user_id == user_id))
    return int(found or 0)


async def one_of_user(session: AsyncSession, user_id: str, passkey_id: str) -> Passkey | None:
    return await session.scalar(
        select(Passkey).where(Passkey.id == passkey_id, Passkey.user_id == user_id)
    )


async def by_credential_id(session: AsyncSession, credential_id: str) -> Passkey | None:
    return await session.scalar(select(Passkey).where(Passkey.credential_id == credential_id))


async def advance(
    session: AsyncSession, passkey_id: str, seen: int, new_count: int, now: datetime
) -> bool:
    """Move the signature counter from `seen` to `new_count` (and note the use); False when
    another sign-in moved it first (two uses of one assertion race: one wins)."""
    result = await session.execute(
        update(Passkey)
        .where(Passkey.id == passkey_id, Passkey.sign_count == seen)
        .values(sign_count=new_count, last_used_at=now)
    )
    return bool(getattr(result, "rowcount", 0))


async def add_challenge(
    session: AsyncSession, digest: str, purpose: str, user_id: str | None, expires_at: datetime
) -> None:
    session.add(
        PasskeyChallenge(digest=digest, purpose=purpose, user_id=user_id, expires_at=expires_at)
    )


async def prune_challenges(session: AsyncSession, now: datetime) -> None:
    await session.execute(delete(PasskeyChallenge).where(PasskeyChallenge.expires_at <= now))


async def challenge(session: AsyncSession, digest: str) -> PasskeyChallenge | None:
    return await session.get(PasskeyChallenge, digest)


async def consume_challenge(session: AsyncSession, digest: str) -> bool:
    """Delete the challenge; False when it was already gone (used by a racing request)."""
    result = await session.execute(
        delete(PasskeyChallenge).where(PasskeyChallenge.digest == digest)
    )
    return bool(getattr(result, "rowcount", 0))
