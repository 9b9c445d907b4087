"""Rows every database has: the default tenant and the config generation counter."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from llmrelay.store.models import DEFAULT_TENANT_SLUG, ConfigGeneration, Tenant
from llmrelay.store.types import utcnow


async def ensure_default_tenant(session: AsyncSession) -> Tenant:
    tenant = await session.scalar(select(Tenant).where(Tenant.slug == DEFAULT_TENANT_SLUG))
    if tenant is None:
        tenant = Tenant(slug=DEFAULT_TENANT_SLUG, name="Default")
        session.add(tenant)
        await session.flush()
    return tenant


#: Built once: every replica reads it every few seconds (the snapshot poll), and building and
#: caching a statement anew costs the event loop about twice what running it does.
_GENERATION = select(ConfigGeneration.generation).where(ConfigGeneration.id == 1)


async def current_generation(conn: AsyncSession | AsyncConnection) -> int:
    value = await conn.scalar(_GENERATION)
    return value or 0


async def bump_generation(session: AsyncSession) -> int:
    """Move the counter replicas poll; call inside the transaction that changed config."""
    result = await session.execute(
        update(ConfigGeneration)
        .where(ConfigGeneration.id == 1)
        .values(generation=ConfigGeneration.generation + 1, updated_at=utcnow())
        .returning(ConfigGeneration.generation)
    )
    value = result.scalar_one_or_none()
    if value is None:
        session.add(ConfigGeneration(id=1, generation=1))
        await session.flush()
        return 1
    return int(value)
