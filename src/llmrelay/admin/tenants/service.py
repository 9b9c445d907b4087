"""The rules of tenants: only a platform admin creates one; slugs are unique; an update
names the version it read. Flushes, never commits."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.access import Actor
from llmrelay.admin.errors import AdminError
from llmrelay.admin.kit.problems import Conflict
from llmrelay.admin.tenants import repository
from llmrelay.admin.tenants.schemas import TenantIn, TenantPatch
from llmrelay.store.models import Tenant


async def create(session: AsyncSession, actor: Actor, data: TenantIn) -> Tenant:
    if not actor.platform_admin:
        raise AdminError(403, "only a platform admin creates tenants", "permission_error")
    if await repository.by_slug(session, data.slug) is not None:
        raise Conflict(f"slug: a tenant {data.slug!r} exists", "slug")
    row = Tenant(slug=data.slug, name=data.name, require_2fa=data.require_2fa)
    session.add(row)
    await session.flush()
    return row


def update(row: Tenant, data: TenantPatch) -> list[str]:
    """Apply the fields sent; the names of those that changed."""
    changed = []
    for name in ("name", "require_2fa"):
        value = getattr(data, name)
        if value is not None and getattr(row, name) != value:
            setattr(row, name, value)
            changed.append(name)
    return changed
