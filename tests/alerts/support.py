"""A tenant with members of every kind an alert must tell apart: verified tenant admin and
billing members (alerted), a verified viewer, an unverified admin, a disabled and a pending
billing member (all skipped)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.store.db import session_factory
from llmrelay.store.models import Tenant
from llmrelay.store.models_access import Membership, User
from llmrelay.store.types import utcnow

ALERTED = ("boss@acme.example", "money@acme.example")


@dataclass(frozen=True)
class AlertTenant:
    id: str
    users: dict[str, str]  # email -> user id


async def alert_tenant(
    engine: AsyncEngine, name: str = "Acme", domain: str = "acme.example"
) -> AlertTenant:
    members = [
        (f"boss@{domain}", "tenant_admin", True, False, False),
        (f"money@{domain}", "billing", True, False, False),
        (f"look@{domain}", "viewer", True, False, False),
        (f"unverified@{domain}", "tenant_admin", False, False, False),
        (f"gone@{domain}", "billing", True, True, False),
        (f"wait@{domain}", "billing", True, False, True),
    ]
    async with session_factory(engine)() as session:
        tenant = Tenant(slug=name.lower(), name=name)
        session.add(tenant)
        await session.flush()
        users = {}
        for email, role, verified, disabled, pending in members:
            user = User(
                email=email,
                password_hash="unused",
                email_verified_at=utcnow() if verified else None,
                disabled=disabled,
                pending=pending,
            )
            session.add(user)
            await session.flush()
            session.add(Membership(user_id=user.id, tenant_id=tenant.id, role=role))
            users[email] = user.id
        await session.commit()
        return AlertTenant(tenant.id, users)
