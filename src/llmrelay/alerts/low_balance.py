"""The low-balance alert: a prepaid wallet whose available balance is under its `low_balance_micros`
and not alerted yet is claimed by one UPDATE (setting `low_balance_alerted_at`: two runners
cannot both claim it), and its mails are queued in that same transaction, one per recipient,
each with the dedupe key `low_balance:<tenant>:<crossing>:<user>` (the crossing: the claim's
time). Once the balance is back at or over the threshold (a top-up, a lower threshold), the
mark is cleared and the next fall alerts again."""

from __future__ import annotations

from datetime import datetime

import structlog
from sqlalchemy import Table, or_, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.alerts import recipients
from llmrelay.alerts.money import usd
from llmrelay.mail import links, outbox
from llmrelay.mail.templates import render
from llmrelay.store.crypto import Sealer
from llmrelay.store.db import background_begin, background_connect
from llmrelay.store.models import Tenant
from llmrelay.store.models_billing import Wallet

log = structlog.get_logger(__name__)

wallets: Table = Wallet.__table__  # type: ignore[assignment]


async def run(engine: AsyncEngine, sealer: Sealer, base: str, now: datetime) -> dict[str, int]:
    """One round: re-arm wallets back over their threshold, alert those under it. Counts."""
    # Prepaid wallets only: a postpaid one's balance is not drawn by requests, so being
    # "under" a threshold would mean nothing.
    threshold_set = wallets.c.low_balance_micros.is_not(None) & wallets.c.prepaid.is_(True)
    async with background_begin(engine) as conn:
        rearmed = await conn.execute(
            update(wallets)
            .where(
                wallets.c.low_balance_alerted_at.is_not(None),
                or_(
                    ~threshold_set,
                    wallets.c.balance_micros >= wallets.c.low_balance_micros,
                ),
            )
            .values(low_balance_alerted_at=None)
        )
    async with background_connect(engine) as conn:
        due = (
            await conn.execute(
                select(wallets.c.tenant_id).where(
                    threshold_set,
                    wallets.c.low_balance_alerted_at.is_(None),
                    wallets.c.balance_micros < wallets.c.low_balance_micros,
                )
            )
        ).scalars()
        tenant_ids = list(due)
    alerted = mailed = 0
    for tenant_id in tenant_ids:
        async with background_begin(engine) as conn:
            claimed = (
                await conn.execute(
                    update(wallets)
                    .where(
                        wallets.c.tenant_id == tenant_id,
                        threshold_set,
                        wallets.c.low_balance_alerted_at.is_(None),
                        wallets.c.balance_micros < wallets.c.low_balance_micros,
                    )
                    .values(low_balance_alerted_at=now)
                    .returning(
                        wallets.c.balance_micros, wallets.c.low_balance_micros, wallets.c.prepaid
                    )
                )
            ).first()
            if claimed is None:
                continue  # another runner claimed it, or the balance moved
            alerted += 1
            balance, threshold, prepaid = int(claimed[0]), int(claimed[1]), bool(claimed[2])
            name = (await conn.execute(select(Tenant.name).where(Tenant.id == tenant_id))).scalar()
            consequence = (
                " Requests are refused (402) once it cannot cover them." if prepaid else ""
            )
            mail = render(
                "low_balance",
                tenant=str(name or tenant_id),
                balance=usd(balance),
                threshold=usd(threshold),
                consequence=consequence,
                link=links.link(base, links.BILLING),
            )
            crossing = int(now.timestamp() * 1_000_000)  # the claim's moment, in µs
            people = await recipients.of_tenant(conn, tenant_id)
            for person in people:
                queued = await outbox.queue_mail(
                    conn,
                    outbox.LOW_BALANCE,
                    person.email,
                    mail.subject,
                    mail.text,
                    mail.html,
                    sealer=sealer,
                    tenant_id=tenant_id,
                    dedupe_key=f"low_balance:{tenant_id}:{crossing}:{person.user_id}",
                )
                mailed += queued is not None
            if not people:
                log.warning("low_balance_alert_without_recipient", tenant_id=tenant_id)
    return {"rearmed": rearmed.rowcount or 0, "alerted": alerted, "mails": mailed}
