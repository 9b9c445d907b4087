"""Where `openai_codex` accounts are kept: the `codex_accounts` table, tokens sealed with the
provider-credentials key (store/crypto.py, context = the row's id). The AccountVault that
providers/codex/accounts.py reads through, and the sign-in's write (the CLI's and the admin
API's). Top-level, as stack.py is: it joins the store and the providers, which never import
each other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from llmrelay.providers.codex import oauth
from llmrelay.providers.codex.accounts import StoredAccount
from llmrelay.providers.codex.oauth import Identity, Tokens
from llmrelay.store.crypto import Sealer
from llmrelay.store.models import new_id
from llmrelay.store.models_codex import CodexAccount
from llmrelay.store.types import utcnow


def stored(row: CodexAccount, sealer: Sealer) -> StoredAccount:
    tokens = Tokens.from_json(sealer.open(row.tokens_sealed, context=row.id))
    return StoredAccount(
        id=row.id,
        provider_id=row.provider_id,
        account_id=row.account_id,
        email=row.email,
        plan_type=row.plan_type,
        issuer=row.issuer,
        client_id=row.client_id,
        tokens=tokens,
        expires_at=row.access_expires_at,
        generation=row.token_generation,
        limits=dict(row.limits or {}),
        exhausted_until=row.exhausted_until,
    )


def _seal(row: CodexAccount, tokens: Tokens, sealer: Sealer) -> None:
    row.tokens_sealed = sealer.seal(tokens.as_json(), context=row.id)
    row.tokens_key_id = sealer.key_id
    row.access_expires_at = oauth.expires_at(tokens)


async def first_account(session: AsyncSession, provider_id: str) -> CodexAccount | None:
    """The provider's account row (one per provider for now: the newest sign-in)."""
    found = await session.execute(
        select(CodexAccount)
        .where(CodexAccount.provider_id == provider_id)
        .order_by(CodexAccount.created_at.desc())
        .limit(1)
    )
    return found.scalar_one_or_none()


async def sign_in(
    session: AsyncSession,
    sealer: Sealer,
    provider_id: str,
    tokens: Tokens,
    *,
    issuer: str,
    client_id: str,
) -> CodexAccount:
    """Keep a new sign-in as the provider's account (replacing the one before: one account
    per provider until providers have resources). The caller moves the config generation
    (so every replica reads the new account) and commits."""
    who = oauth.identity(tokens)
    await session.execute(delete(CodexAccount).where(CodexAccount.provider_id == provider_id))
    row = CodexAccount(
        id=new_id(),
        provider_id=provider_id,
        account_id=who.account_id,
        email=who.email,
        plan_type=who.plan_type,
        issuer=issuer.rstrip("/"),
        client_id=client_id,
        token_generation=1,
        refreshed_at=utcnow(),
    )
    _seal(row, tokens, sealer)
    session.add(row)
    await session.flush()
    return row


async def sign_out(session: AsyncSession, provider_id: str) -> int:
    """Forget the provider's account(s); how many. The caller moves the config generation
    and commits."""
    result = await session.execute(
        delete(CodexAccount).where(CodexAccount.provider_id == provider_id)
    )
    return int(getattr(result, "rowcount", 0) or 0)


class DatabaseVault:
    """The AccountVault over the database."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], sealer: Sealer) -> None:
        self._sessions = sessions
        self._sealer = sealer

    async def load(self, provider_id: str) -> StoredAccount | None:
        async with self._sessions() as session:
            row = await first_account(session, provider_id)
            return stored(row, self._sealer) if row is not None else None

    async def refresh_locked(
        self,
        provider_id: str,
        seen_generation: int,
        refresh: Callable[[StoredAccount], Awaitable[tuple[Tokens, Identity]]],
    ) -> StoredAccount | None:
        async with self._sessions() as session, session.begin():
            found = await session.execute(
                select(CodexAccount)
                .where(CodexAccount.provider_id == provider_id)
                .order_by(CodexAccount.created_at.desc())
                .limit(1)
                .with_for_update()
            )
            row = found.scalar_one_or_none()
            if row is None:
                return None
            if row.token_generation != seen_generation:
                return stored(row, self._sealer)  # another process refreshed them
            tokens, who = await refresh(stored(row, self._sealer))
            _seal(row, tokens, self._sealer)
            row.token_generation += 1
            row.refreshed_at = utcnow()
            row.email = who.email or row.email
            row.plan_type = who.plan_type or row.plan_type
            await session.flush()
            return stored(row, self._sealer)

    async def save_limits(
        self, row_id: str, limits: dict[str, Any], exhausted_until: datetime | None
    ) -> None:
        async with self._sessions() as session, session.begin():
            await session.execute(
                update(CodexAccount)
                .where(CodexAccount.id == row_id)
                .values(limits=limits, exhausted_until=exhausted_until, updated_at=utcnow())
            )
