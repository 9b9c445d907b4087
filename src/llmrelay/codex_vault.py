"""Where `openai_codex` accounts are kept: the `codex_accounts` table, tokens sealed with the
provider-credentials key (store/crypto.py, context = the row's id). The AccountVault that
providers/codex/accounts.py reads through, and the sign-in's write (the CLI's and the admin
API's). Top-level, as stack.py is: it joins the store and the providers, which never import
each other.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from sqlalchemy import and_, delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from llmrelay.providers.codex import oauth
from llmrelay.providers.codex.accounts import StoredAccount
from llmrelay.providers.codex.oauth import Identity, Tokens
from llmrelay.store.crypto import Sealer
from llmrelay.store.models import ProviderResource, new_id
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
        resource_id=row.resource_id,
        limits=dict(row.limits or {}),
        exhausted_until=row.exhausted_until,
    )


def _seal(row: CodexAccount, tokens: Tokens, sealer: Sealer) -> None:
    row.tokens_sealed = sealer.seal(tokens.as_json(), context=row.id)
    row.tokens_key_id = sealer.key_id
    row.access_expires_at = oauth.expires_at(tokens)


async def first_account(session: AsyncSession, provider_id: str) -> CodexAccount | None:
    """The provider's first account in resource order (what a call that names no resource,
    the health probe's, uses)."""
    found = await accounts_of(session, provider_id)
    return found[0][0] if found else None


async def accounts_of(
    session: AsyncSession, provider_id: str
) -> list[tuple[CodexAccount, ProviderResource | None]]:
    """Every account signed in for the provider with its resource, in the order routing
    tries them (resource priority, then position)."""
    found = await session.execute(
        select(CodexAccount, ProviderResource)
        .outerjoin(ProviderResource, ProviderResource.id == CodexAccount.resource_id)
        .where(CodexAccount.provider_id == provider_id)
    )
    rows: list[tuple[CodexAccount, ProviderResource | None]] = [
        (account, resource) for account, resource in found
    ]
    rows.sort(
        key=lambda pair: (
            (pair[1].priority, pair[1].position, pair[1].name) if pair[1] else (0, 1 << 30, ""),
            pair[0].created_at,
        )
    )
    return rows


def resource_name(email: str | None, account_id: str, taken: set[str]) -> str:
    """A resource name for a new account: its email's local part (else its account id) as a
    slug, made unique within the provider."""
    base = (email or "").split("@", 1)[0] or account_id
    base = re.sub(r"[^a-z0-9._-]+", "-", base.lower()).strip("-._")[:48] or "account"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    return name


async def sign_in(
    session: AsyncSession,
    sealer: Sealer,
    provider_id: str,
    tokens: Tokens,
    *,
    issuer: str,
    client_id: str,
    resource: str | None = None,
) -> tuple[CodexAccount, ProviderResource]:
    """Keep a sign-in as one of the provider's accounts, leaving the others as they are: the
    same ChatGPT account signed in again gets the new tokens in its row (and keeps its
    resource); a new one gets a row and a resource of its own (named after its email), or
    the resource named `resource` (made when missing; an account it held before is
    replaced). The caller moves the config generation (every replica reads the accounts
    again) and commits."""
    who = oauth.identity(tokens)
    resources = {
        row.name: row
        for row in (
            await session.execute(
                select(ProviderResource).where(ProviderResource.provider_id == provider_id)
            )
        ).scalars()
    }
    found = await session.execute(
        select(CodexAccount).where(
            CodexAccount.provider_id == provider_id, CodexAccount.account_id == who.account_id
        )
    )
    row = found.scalar_one_or_none()
    target: ProviderResource | None = None
    if resource is not None:
        target = resources.get(resource)
    elif row is not None and row.resource_id is not None:
        target = next((r for r in resources.values() if r.id == row.resource_id), None)
    else:
        # Signed in again after a sign-out: the resource named after it, left empty by the
        # sign-out (it keeps the operator's priority and quotas), takes it back, rather than
        # a new one beside it that routing would try in vain before the account's own.
        named = resources.get(resource_name(who.email, who.account_id, set()))
        if named is not None and not await _holds_account(session, named.id):
            target = named
    if target is None:
        name = resource or resource_name(who.email, who.account_id, set(resources))
        position = max((r.position for r in resources.values()), default=-1) + 1
        target = ProviderResource(
            id=new_id(),
            provider_id=provider_id,
            name=name,
            priority=0,
            weight=1.0,
            disabled=False,
            position=position,
        )
        session.add(target)
        await session.flush()
    # The resource's account before, when it was another one: replaced.
    await session.execute(
        delete(CodexAccount).where(
            CodexAccount.resource_id == target.id, CodexAccount.account_id != who.account_id
        )
    )
    if row is None:
        row = CodexAccount(
            id=new_id(), provider_id=provider_id, account_id=who.account_id, token_generation=1
        )
        session.add(row)
    else:
        row.token_generation += 1  # processes holding the old tokens read the new ones
    row.resource_id = target.id
    row.email = who.email
    row.plan_type = who.plan_type
    row.issuer = issuer.rstrip("/")
    row.client_id = client_id
    row.refreshed_at = utcnow()
    # Its usage limits start afresh, as for a new account: its next answer tells them (a
    # sign-in is how an operator brings back an account they know is usable again).
    row.limits = None
    row.exhausted_until = None
    _seal(row, tokens, sealer)
    await session.flush()
    return row, target


async def _holds_account(session: AsyncSession, resource_id: str) -> bool:
    found = await session.execute(
        select(CodexAccount.id).where(CodexAccount.resource_id == resource_id).limit(1)
    )
    return found.first() is not None


async def sign_out(session: AsyncSession, provider_id: str, which: str | None = None) -> int:
    """Forget the provider's accounts, or the one `which` names (its resource's name, its
    email or its account id); how many. Their resources stay (they hold the operator's
    priority and quotas; an account signed in with `resource` takes one back). The caller
    moves the config generation and commits."""
    condition = CodexAccount.provider_id == provider_id
    if which is not None:
        named = select(ProviderResource.id).where(
            ProviderResource.provider_id == provider_id, ProviderResource.name == which
        )
        condition = and_(
            condition,
            or_(
                CodexAccount.resource_id.in_(named),
                CodexAccount.email == which,
                CodexAccount.account_id == which,
            ),
        )
    result = await session.execute(delete(CodexAccount).where(condition))
    return int(getattr(result, "rowcount", 0) or 0)


class DatabaseVault:
    """The AccountVault over the database."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], sealer: Sealer) -> None:
        self._sessions = sessions
        self._sealer = sealer

    async def load(self, provider_id: str, resource_id: str | None) -> StoredAccount | None:
        async with self._sessions() as session:
            if resource_id is None:
                row = await first_account(session, provider_id)
            else:
                found = await session.execute(
                    select(CodexAccount).where(
                        CodexAccount.provider_id == provider_id,
                        CodexAccount.resource_id == resource_id,
                    )
                )
                row = found.scalar_one_or_none()
            return stored(row, self._sealer) if row is not None else None

    async def refresh_locked(
        self,
        row_id: str,
        seen_generation: int,
        refresh: Callable[[StoredAccount], Awaitable[tuple[Tokens, Identity]]],
    ) -> StoredAccount | None:
        async with self._sessions() as session, session.begin():
            found = await session.execute(
                select(CodexAccount).where(CodexAccount.id == row_id).with_for_update()
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
