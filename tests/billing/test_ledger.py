"""The ledger on SQLite and PostgreSQL: every movement exact to the micro-unit, at most once
per key, never overdrawn by concurrent reservations, and always balanced (the entries sum to
the wallet's balances)."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.billing import ledger
from llmrelay.billing.ledger import InsufficientBalance, Movement, NoWallet
from llmrelay.store.bootstrap import ensure_default_tenant
from llmrelay.store.db import create_engine, session_factory
from llmrelay.store.models_billing import LedgerEntry, Reservation, Wallet


async def _tenant(engine: AsyncEngine, balance: int = 0) -> str:
    async with session_factory(engine).begin() as session:
        tenant = (await ensure_default_tenant(session)).id
    async with engine.begin() as conn:
        await ledger.ensure_wallet(conn, tenant)
        if balance:
            await ledger.credit(conn, tenant, balance, kind="topup", key="seed")
    return tenant


async def _wallet(engine: AsyncEngine, tenant: str) -> tuple[int, int]:
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                select(Wallet.balance_micros, Wallet.reserved_micros).where(
                    Wallet.tenant_id == tenant
                )
            )
        ).one()
    return int(row[0]), int(row[1])


async def _assert_balanced(engine: AsyncEngine, tenant: str) -> None:
    """The wallet is exactly what its entries add up to, and the last entry says so."""
    async with engine.connect() as conn:
        sums = (
            await conn.execute(
                select(
                    func.coalesce(func.sum(LedgerEntry.amount_micros), 0),
                    func.coalesce(func.sum(LedgerEntry.reserved_delta_micros), 0),
                ).where(LedgerEntry.tenant_id == tenant)
            )
        ).one()
        last = (
            await conn.execute(
                select(LedgerEntry.balance_after_micros, LedgerEntry.reserved_after_micros)
                .where(LedgerEntry.tenant_id == tenant)
                .order_by(LedgerEntry.id.desc())
                .limit(1)
            )
        ).first()
    wallet = await _wallet(engine, tenant)
    assert (int(sums[0]), int(sums[1])) == wallet
    if last is not None:
        assert tuple(last) == wallet


async def test_reserve_then_settle_charges_the_cost_and_frees_the_rest(
    engine: AsyncEngine,
) -> None:
    tenant = await _tenant(engine, 1_000_000)
    async with engine.begin() as conn:
        moved = await ledger.reserve(conn, tenant, "req-1", 300_000, project_id="p")
    assert moved == Movement(700_000, 300_000, applied=True)
    async with engine.begin() as conn:  # a retried reserve changes nothing
        again = await ledger.reserve(conn, tenant, "req-1", 300_000)
    assert again == Movement(700_000, 300_000, applied=False)
    async with engine.begin() as conn:
        settled = await ledger.settle(conn, "req-1", 123_456)
    assert settled == Movement(876_544, 0, applied=True)
    async with engine.begin() as conn:  # settled once
        assert await ledger.settle(conn, "req-1", 123_456) is None
        assert await ledger.settle(conn, "no-such-request", 5) is None
    async with engine.connect() as conn:
        reservation = (await conn.execute(select(Reservation.__table__))).one()
    assert (reservation.status, reservation.charged_micros) == ("settled", 123_456)
    await _assert_balanced(engine, tenant)


async def test_a_refused_reservation_changes_nothing(engine: AsyncEngine) -> None:
    tenant = await _tenant(engine, 100)
    with pytest.raises(InsufficientBalance, match="cannot cover") as refused:
        async with engine.begin() as conn:
            await ledger.reserve(conn, tenant, "req-big", 101)
    assert (refused.value.needed, refused.value.available) == (101, 100)
    assert await _wallet(engine, tenant) == (100, 0)
    async with engine.begin() as conn:  # the request id was not used up
        assert (await ledger.reserve(conn, tenant, "req-big", 100)).applied
    await _assert_balanced(engine, tenant)
    with pytest.raises(NoWallet):
        async with engine.begin() as conn:
            await ledger.reserve(conn, "no-tenant", "req-x", 1)


async def test_costs_above_the_reservation_and_failed_metering(engine: AsyncEngine) -> None:
    tenant = await _tenant(engine, 1_000)
    async with engine.begin() as conn:
        await ledger.reserve(conn, tenant, "over", 600)
        await ledger.reserve(conn, tenant, "unknown", 400)
    async with engine.begin() as conn:
        await ledger.settle(conn, "over", 700)  # the provider was paid: charged whole
        held = await ledger.settle(conn, "unknown", None)
    assert held is not None and held.reserved_micros == 400
    assert await _wallet(engine, tenant) == (-100, 400)
    async with engine.begin() as conn:  # a late settle does not close it; reconcile does
        assert await ledger.settle(conn, "unknown", 50) is None
        reconciled = await ledger.reconcile(conn, "unknown", 50, actor="admin")
    assert reconciled == Movement(250, 0, applied=True)
    await _assert_balanced(engine, tenant)


async def test_credits_happen_once_per_key(engine: AsyncEngine) -> None:
    tenant = await _tenant(engine)
    for _ in range(3):
        async with engine.begin() as conn:
            await ledger.credit(conn, tenant, 5_000_000, kind="topup", key="topup:order-1")
    async with engine.begin() as conn:
        await ledger.credit(conn, tenant, 250, kind="refund", key="refund:r1", note="goodwill")
        await ledger.credit(conn, tenant, -250, kind="adjustment", key="adj:1", actor="u1")
    assert await _wallet(engine, tenant) == (5_000_000, 0)
    with pytest.raises(InsufficientBalance):
        async with engine.begin() as conn:
            await ledger.credit(conn, tenant, -5_000_001, kind="adjustment", key="adj:2")
    with pytest.raises(ledger.BillingError):
        async with engine.begin() as conn:
            await ledger.credit(conn, tenant, -1, kind="topup", key="topup:neg")
    await _assert_balanced(engine, tenant)


async def test_concurrent_reservations_never_overdraw(database_url: str) -> None:
    """100 requests race for a wallet that covers 10 (on PostgreSQL 30 transactions at a
    time, each on its own connection)."""
    setup = create_engine(database_url)
    from llmrelay.store import migrate

    await migrate.upgrade(setup)
    tenant = await _tenant(setup, 10 * 7_000)
    await setup.dispose()
    if database_url.startswith("postgresql"):
        engine = create_engine(database_url, pool_size=30, max_overflow=0)
    else:
        engine = create_engine(database_url)

    async def one(n: int) -> bool:
        try:
            async with engine.begin() as conn:
                await ledger.reserve(conn, tenant, f"race-{n}", 7_000)
        except InsufficientBalance:
            return False
        return True

    try:
        won = await asyncio.gather(*(one(n) for n in range(100)))
        assert sum(won) == 10
        assert await _wallet(engine, tenant) == (0, 70_000)
        winners = [n for n, ok in enumerate(won) if ok]
        for n in winners:
            async with engine.begin() as conn:
                await ledger.settle(conn, f"race-{n}", 1_234)
        assert await _wallet(engine, tenant) == (70_000 - 10 * 1_234, 0)
        await _assert_balanced(engine, tenant)
    finally:
        await engine.dispose()


async def test_concurrent_movements_are_entered_in_the_order_they_happened(
    database_url: str,
) -> None:
    """Racing credits, reservations and settles on one wallet (on PostgreSQL 30 at a time):
    read by id, each entry's balances after it are the running sums of the entries up to it,
    so the last entry shows the wallet (an auditor reads the ledger in id order)."""
    setup = create_engine(database_url)
    from llmrelay.store import migrate

    await migrate.upgrade(setup)
    tenant = await _tenant(setup, 1_000_000)
    await setup.dispose()
    if database_url.startswith("postgresql"):
        engine = create_engine(database_url, pool_size=30, max_overflow=0)
    else:
        engine = create_engine(database_url)

    async def one(n: int) -> None:
        async with engine.begin() as conn:
            await ledger.credit(conn, tenant, 1_000 + n, kind="topup", key=f"order-topup:{n}")
        async with engine.begin() as conn:
            await ledger.reserve(conn, tenant, f"order-{n}", 5_000)
        async with engine.begin() as conn:
            await ledger.settle(conn, f"order-{n}", 1_000 + 7 * n)

    try:
        await asyncio.gather(*(one(n) for n in range(120)))
        async with engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(
                        LedgerEntry.amount_micros,
                        LedgerEntry.reserved_delta_micros,
                        LedgerEntry.balance_after_micros,
                        LedgerEntry.reserved_after_micros,
                    )
                    .where(LedgerEntry.tenant_id == tenant)
                    .order_by(LedgerEntry.id)
                )
            ).all()
        balance = held = 0
        out_of_order = []
        for n, (amount, delta, balance_after, held_after) in enumerate(rows):
            balance, held = balance + amount, held + delta
            if (balance_after, held_after) != (balance, held):
                out_of_order.append(n)
        assert len(rows) == 1 + 3 * 120
        assert not out_of_order, out_of_order[:10]
        await _assert_balanced(engine, tenant)
    finally:
        await engine.dispose()
