"""The low-balance alert on SQLite and PostgreSQL: one mail per recipient per crossing (running
again sends nothing), re-armed once the balance is back over the threshold, again at the next
fall; only verified, active tenant admins and billing members are mailed. Run through the real
job runner as `serve` runs it."""

from __future__ import annotations

import time

from sqlalchemy import text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.alerts.jobs import LOW_BALANCE_ALERTS
from llmrelay.billing import ledger
from llmrelay.jobs import queue
from llmrelay.store.crypto import Sealer
from llmrelay.store.models_billing import Wallet
from tests.alerts.support import ALERTED, alert_tenant
from tests.support.mail import mail_settings, mail_text, outbox, runner

SEALER = Sealer("alert-tests-secret-key-0123456789abcdefghi")


async def _round(engine: AsyncEngine) -> None:
    """One alert round, queued as the runner's schedule queues it, run by a real runner."""
    async with engine.begin() as conn:
        await queue.enqueue(conn, LOW_BALANCE_ALERTS, {}, now=time.time())
    await runner(engine, SEALER, mail_settings(None)).run_until_idle()


async def _move(engine: AsyncEngine, tenant_id: str, micros: int, key: str) -> None:
    async with engine.begin() as conn:
        await ledger.credit(conn, tenant_id, micros, kind="adjustment", key=key)


async def _alerts(engine: AsyncEngine) -> list[str]:
    return sorted(m["to_address"] for m in await outbox(engine) if m["kind"] == "low_balance")


async def test_one_alert_per_crossing(engine: AsyncEngine) -> None:
    acme = await alert_tenant(engine)
    async with engine.begin() as conn:
        await ledger.ensure_wallet(conn, acme.id, prepaid=True)
        await conn.execute(
            update(Wallet).where(Wallet.tenant_id == acme.id).values(low_balance_micros=5_000_000)
        )
    await _move(engine, acme.id, 10_000_000, "top-up-1")
    await _round(engine)
    assert await _alerts(engine) == []  # $10 is over the $5 threshold

    await _move(engine, acme.id, -7_500_000, "spent-1")  # $2.50 left
    await _round(engine)
    await _round(engine)  # again: the same crossing, no second mail
    assert await _alerts(engine) == sorted(ALERTED)
    mail = await mail_text(engine, SEALER, "boss@acme.example", "low_balance")
    assert "$2.50" in mail and "$5.00" in mail and "402" in mail
    async with engine.connect() as conn:
        marked = await conn.execute(text("SELECT low_balance_alerted_at FROM wallets"))
        assert marked.scalar() is not None

    await _move(engine, acme.id, 20_000_000, "top-up-2")  # back over: re-armed
    await _round(engine)
    async with engine.connect() as conn:
        marked = await conn.execute(text("SELECT low_balance_alerted_at FROM wallets"))
        assert marked.scalar() is None
    assert len(await _alerts(engine)) == 2

    await _move(engine, acme.id, -21_000_000, "spent-2")  # $1.50: the next crossing
    await _round(engine)
    assert await _alerts(engine) == sorted(ALERTED * 2)
    keys = {m["dedupe_key"] for m in await outbox(engine) if m["kind"] == "low_balance"}
    assert len(keys) == 4 and all(k.startswith(f"low_balance:{acme.id}:") for k in keys)


async def test_no_threshold_or_a_postpaid_wallet_is_never_alerted(engine: AsyncEngine) -> None:
    acme = await alert_tenant(engine)
    other = await alert_tenant(engine, "Other", domain="other.example")
    async with engine.begin() as conn:
        await ledger.ensure_wallet(conn, acme.id, prepaid=True)  # no threshold
        await ledger.ensure_wallet(conn, other.id, prepaid=False)  # requests do not draw it
        await conn.execute(
            update(Wallet).where(Wallet.tenant_id == other.id).values(low_balance_micros=5_000_000)
        )
    await _round(engine)
    assert await _alerts(engine) == []
