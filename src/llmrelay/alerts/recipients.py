"""Who a tenant's alerts go to: its members with the tenant_admin or billing role whose
account is active (not disabled, not pending) and whose address is verified. Anyone else is
skipped: an alert never goes to an address nobody confirmed."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from llmrelay.store.models_access import Membership, User

ALERTED_ROLES = ("tenant_admin", "billing")


@dataclass(frozen=True, slots=True)
class Recipient:
    user_id: str
    email: str


async def of_tenant(conn: AsyncConnection, tenant_id: str) -> list[Recipient]:
    rows = await conn.execute(
        select(User.id, User.email)
        .join(Membership, Membership.user_id == User.id)
        .where(
            Membership.tenant_id == tenant_id,
            Membership.role.in_(ALERTED_ROLES),
            User.disabled.is_(False),
            User.pending.is_(False),
            User.email_verified_at.is_not(None),
        )
        .order_by(User.email)
    )
    return [Recipient(str(user_id), str(email)) for user_id, email in rows.all()]
