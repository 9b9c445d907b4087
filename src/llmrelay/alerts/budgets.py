"""The budget alerts: a project or (active) key with a monthly budget whose month-to-date spend (the
usage rollups, limits/spend.py) reaches 80 % or 100 % of it gets one mail per threshold and
month, to each recipient, with the dedupe key `budget:<scope>:<id>:<YYYY-MM>:<pct>:<user>`.

A threshold is done once any mail for it (or for a higher one) exists this month: spending
from 50 % to 120 % between two rounds sends the 100 % mail alone, and someone who verifies
their address later in the month is not sent an old alert. Budgets are in force per UTC
calendar month, as the limits count them."""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from llmrelay.alerts import recipients
from llmrelay.alerts.money import usd
from llmrelay.limits.base import month_of
from llmrelay.limits.spend import month_spend
from llmrelay.mail import links, outbox
from llmrelay.mail.templates import render
from llmrelay.store.crypto import Sealer
from llmrelay.store.db import background_begin, background_connect
from llmrelay.store.models import ApiKey, Project, Tenant

log = structlog.get_logger(__name__)

THRESHOLDS = (80, 100)


@dataclass(frozen=True, slots=True)
class Budgeted:
    scope: str  # "project" or "key"
    id: str
    tenant_id: str
    label: str
    budget_micros: int


def crossed(spend: int, budget: int) -> int | None:
    """The highest threshold `spend` reached, or None."""
    reached = [pct for pct in THRESHOLDS if spend * 100 >= budget * pct]
    return max(reached) if reached and budget > 0 else None


async def _budgeted(conn: AsyncConnection) -> list[Budgeted]:
    found = [
        Budgeted("project", str(i), str(t), f"Project {name}", int(b or 0))
        for i, t, name, b in await conn.execute(
            select(
                Project.id, Project.tenant_id, Project.name, Project.monthly_budget_micros
            ).where(Project.monthly_budget_micros.is_not(None))
        )
    ]
    found += [
        Budgeted("key", str(i), str(t), f"Key {name} (project {project})", int(b or 0))
        for i, t, name, project, b in await conn.execute(
            select(
                ApiKey.id, ApiKey.tenant_id, ApiKey.name, Project.name, ApiKey.monthly_budget_micros
            )
            .join(Project, Project.id == ApiKey.project_id)
            .where(ApiKey.monthly_budget_micros.is_not(None), ApiKey.status == "active")
        )
    ]
    return found


async def _done(conn: AsyncConnection, month: str) -> set[tuple[str, str, int]]:
    """(scope, id, pct) of the alerts mailed this month, from the outbox's dedupe keys."""
    table = outbox.outbox
    keys = await conn.execute(
        select(table.c.dedupe_key).where(
            table.c.kind == outbox.BUDGET_ALERT,
            table.c.dedupe_key.like(f"budget:%:{month}:%"),
        )
    )
    done = set()
    for (key,) in keys:
        parts = str(key).split(":")
        if len(parts) >= 5 and parts[4].isdigit():
            done.add((parts[1], parts[2], int(parts[4])))
    return done


async def run(engine: AsyncEngine, sealer: Sealer, base: str, now: float) -> dict[str, int]:
    """One round over every budget; counts."""
    month = month_of(now)
    async with background_connect(engine) as conn:
        budgeted = await _budgeted(conn)
        if not budgeted:
            return {"alerts": 0, "mails": 0}
        done = await _done(conn, month)
    spend = await month_spend(engine, now)
    alerts = mailed = 0
    for item in budgeted:
        used = spend.get(f"{item.scope}:{item.id}", 0)
        pct = crossed(used, item.budget_micros)
        if pct is None or any((item.scope, item.id, p) in done for p in THRESHOLDS if p >= pct):
            continue
        async with background_begin(engine) as conn:
            people = await recipients.of_tenant(conn, item.tenant_id)
            if not people:
                log.warning("budget_alert_without_recipient", scope=item.scope, id=item.id)
                continue
            tenant = (
                await conn.execute(select(Tenant.name).where(Tenant.id == item.tenant_id))
            ).scalar()
            consequence = (
                " Its requests are refused (429) until the month ends or the budget is raised."
                if pct >= 100
                else ""
            )
            mail = render(
                "budget_alert",
                tenant=str(tenant or item.tenant_id),
                scope=item.label,
                spend=usd(used),
                budget=usd(item.budget_micros),
                month=month,
                percent=str(pct),
                consequence=consequence,
                link=links.link(base, links.USAGE),
            )
            alerts += 1
            for person in people:
                queued = await outbox.queue_mail(
                    conn,
                    outbox.BUDGET_ALERT,
                    person.email,
                    mail.subject,
                    mail.text,
                    mail.html,
                    sealer=sealer,
                    tenant_id=item.tenant_id,
                    dedupe_key=f"budget:{item.scope}:{item.id}:{month}:{pct}:{person.user_id}",
                )
                mailed += queued is not None
    return {"alerts": alerts, "mails": mailed}
