"""Wallet leases (billing/allowance.py) over real databases (SQLite and PostgreSQL):
admissions in memory never overshoot a small wallet, batched settles are exact and
idempotent by request id, a killed process's lease is reclaimed exactly, and a settle under a
lease reclaimed meanwhile is still charged once. After each, the ledger adds up to the wallet
to the micro-unit and every entry's balances follow from the one before."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.billing import ledger
from llmrelay.billing.allowance import Leases
from llmrelay.billing.errors import InsufficientBalance
from llmrelay.billing.estimate import ReservePolicy
from llmrelay.billing.lease_reclaim import reclaim_expired
from llmrelay.billing.lease_store import leases as lease_table
from llmrelay.billing.prepaid import Prepaid
from llmrelay.store.bootstrap import ensure_default_tenant
from llmrelay.store.db import session_factory
from llmrelay.store.models import RequestRecord
from tests.billing.test_prepaid import row


async def _wallet(engine: AsyncEngine, balance: int) -> str:
    async with session_factory(engine).begin() as session:
        tenant = (await ensure_default_tenant(session)).id
    async with engine.begin() as conn:
        await ledger.ensure_wallet(conn, tenant)
        await ledger.credit(conn, tenant, balance, kind="topup", key="seed")
    return tenant


async def _balances(engine: AsyncEngine, tenant: str) -> tuple[int, int]:
    async with engine.connect() as conn:
        return await ledger.balances(conn, tenant)


async def _assert_balanced(engine: AsyncEngine, tenant: str) -> None:
    """The wallet is the sum of its entries, and each entry's balances after it are the
    previous entry's plus its own changes."""
    async with engine.connect() as conn:
        entries = (
            await conn.execute(
                text(
                    "SELECT amount_micros, reserved_delta_micros, balance_after_micros,"
                    " reserved_after_micros FROM ledger_entries WHERE tenant_id = :t ORDER BY id"
                ),
                {"t": tenant},
            )
        ).all()
    balance = held = 0
    for amount, delta, after, held_after in entries:
        balance, held = balance + amount, held + delta
        assert (balance, held) == (after, held_after)
    assert (balance, held) == await _balances(engine, tenant)


async def _statuses(engine: AsyncEngine) -> dict[str, tuple[str, int | None]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(
                ledger.reservations.c.request_id,
                ledger.reservations.c.status,
                ledger.reservations.c.charged_micros,
            )
        )
        return {r[0]: (r[1], r[2]) for r in rows}


def _prepaid(engine: AsyncEngine, **kwargs: Any) -> Prepaid:
    leases = Leases(engine, owner="test", **kwargs)
    return Prepaid(engine, ReservePolicy(), leases=leases, gather_s=0.01)


async def _reserve(prepaid: Prepaid, tenant: str, request_id: str, amount: int) -> bool:
    try:
        await prepaid.reserve(tenant, request_id, amount, project_id=None, key_id=None, minted=True)
    except InsufficientBalance:
        return False
    return True


async def test_concurrent_admissions_never_overshoot_a_small_wallet(engine: AsyncEngine) -> None:
    tenant = await _wallet(engine, 1_000)
    prepaid = _prepaid(engine)
    prepaid.start()
    try:
        admitted = await asyncio.gather(
            *(_reserve(prepaid, tenant, f"r{n}", 100) for n in range(50))
        )
        assert admitted.count(True) == 10
        winners = [f"r{n}" for n, ok in enumerate(admitted) if ok]
        assert await _balances(engine, tenant) == (0, 1_000)  # all of it is leased
        for request_id in winners:  # each costs 30: 70 back to the allowance each
            prepaid.settle(row(request_id, tenant, cost_micros=30))
        # What came back is admitted again without the database: 700 / 100 = 7 more.
        again = await asyncio.gather(*(_reserve(prepaid, tenant, f"s{n}", 100) for n in range(20)))
        assert again.count(True) == 7
        for n, ok in enumerate(again):
            if ok:
                prepaid.settle(row(f"s{n}", tenant, status_code=502, usage_source="none"))
    finally:
        await prepaid.stop(timeout_s=10)
    statuses = await _statuses(engine)
    assert sorted(statuses) == sorted(winners + [f"s{n}" for n, ok in enumerate(again) if ok])
    assert {statuses[w] for w in winners} == {("settled", 30)}
    assert await _balances(engine, tenant) == (1_000 - 10 * 30, 0)
    await _assert_balanced(engine, tenant)


async def test_batched_settles_are_idempotent_by_request_id(engine: AsyncEngine) -> None:
    tenant = await _wallet(engine, 1_000_000)
    prepaid = _prepaid(engine)
    leases, writer = prepaid.leases, prepaid.lease_writer
    assert leases is not None and writer is not None
    for n in range(40):
        assert await _reserve(prepaid, tenant, f"b{n}", 1_000)
        prepaid.settle(row(f"b{n}", tenant, cost_micros=n))
    batch = list(leases.ended)
    await writer.round()
    assert writer.rounds == 1 and writer.settled == 40  # one transaction for all forty
    after = await _balances(engine, tenant)
    leases.ended.extend(batch)  # the same settles again (a retry after an unknown commit)
    await writer.round()
    assert writer.settled == 40
    assert await _balances(engine, tenant) == after
    async with engine.connect() as conn:
        keys = (
            await conn.execute(
                text("SELECT count(*) FROM ledger_entries WHERE idempotency_key LIKE 'settle:b%'")
            )
        ).scalar()
    assert keys == 40
    await writer.stop()
    assert await _balances(engine, tenant) == (1_000_000 - sum(range(40)), 0)
    await _assert_balanced(engine, tenant)


async def _record(engine: AsyncEngine, request_id: str, tenant: str, cost: int) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            insert(RequestRecord).values(
                request_id=request_id,
                created_at=datetime.now(UTC),
                tenant_id=tenant,
                endpoint="chat",
                stream=False,
                status_code=200,
                latency_ms=1.0,
                attempts=1,
                usage_source="reported",
                cost_micros=cost,
                price_source="model",
            )
        )


async def _expire_leases(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            update(lease_table).values(expires_at=datetime.now(UTC) - timedelta(seconds=1))
        )


async def test_a_killed_process_lease_is_reclaimed_exactly(engine: AsyncEngine) -> None:
    """A process admits five requests and dies without stopping: two were settled and
    written; two were in flight long enough for their held rows (one has its record, one
    never got it); one was admitted a moment before the kill (nothing written). Its lease
    expires; reconciliation charges the record's cost, keeps the unrecorded one's
    reservation (metering_failed) and gives the rest back."""
    tenant = await _wallet(engine, 100_000)
    prepaid = _prepaid(engine)
    leases, writer = prepaid.leases, prepaid.lease_writer
    assert leases is not None and writer is not None
    for request_id in ("done-1", "done-2", "recorded", "unrecorded", "young"):
        assert await _reserve(prepaid, tenant, request_id, 1_000)
    prepaid.settle(row("done-1", tenant, cost_micros=100))
    prepaid.settle(row("done-2", tenant, cost_micros=0, usage_source="none", status_code=502))
    await writer.round()
    leases.recent = type(leases.recent)(x for x in leases.recent if x[1] != "young")
    await writer.round(every_hold=True)  # the held rows of "recorded" and "unrecorded"
    await _record(engine, "recorded", tenant, 250)
    # killed here: nothing more is written by this process
    assert await reclaim_expired(engine, grace_s=0) == 0  # not expired yet: left alone
    await _expire_leases(engine)
    assert await reclaim_expired(engine, grace_s=0) == 1
    assert await _statuses(engine) == {
        "done-1": ("settled", 100),
        "done-2": ("released", 0),
        "recorded": ("settled", 250),
        "unrecorded": ("metering_failed", None),
    }
    assert await _balances(engine, tenant) == (100_000 - 100 - 250 - 1_000, 1_000)
    await _assert_balanced(engine, tenant)
    async with engine.connect() as conn:
        lease = (await conn.execute(select(lease_table))).one()._mapping
    assert lease["status"] == "closed"
    assert lease["granted_micros"] - lease["consumed_micros"] == lease["returned_micros"]
    assert await reclaim_expired(engine, grace_s=0) == 0  # once


async def test_a_settle_after_its_lease_was_reclaimed_is_charged_once(
    engine: AsyncEngine,
) -> None:
    """A process that could not renew its lease in time (it was reclaimed) still charges
    the requests that end afterwards: from available, or through their held rows."""
    tenant = await _wallet(engine, 100_000)
    prepaid = _prepaid(engine)
    leases, writer = prepaid.leases, prepaid.lease_writer
    assert leases is not None and writer is not None
    for request_id in ("held-long", "short"):
        assert await _reserve(prepaid, tenant, request_id, 1_000)
    leases.recent = type(leases.recent)(x for x in leases.recent if x[1] != "short")
    await writer.round(every_hold=True)
    await _expire_leases(engine)
    assert await reclaim_expired(engine, grace_s=0) == 1  # "held-long": no record yet
    assert await _balances(engine, tenant) == (99_000, 1_000)
    prepaid.settle(row("held-long", tenant, cost_micros=400))
    prepaid.settle(row("short", tenant, cost_micros=300))
    await writer.round()
    await writer.upkeep()  # finds its lease closed
    assert leases.wallets[tenant].lease_id is None
    assert await _statuses(engine) == {
        "held-long": ("settled", 400),
        "short": ("settled", 300),
    }
    assert await _balances(engine, tenant) == (100_000 - 400 - 300, 0)
    await _assert_balanced(engine, tenant)
    await writer.stop()


@pytest.mark.parametrize("minted", [False, True])
async def test_a_client_request_id_still_reserves_with_its_own_transaction(
    engine: AsyncEngine, minted: bool
) -> None:
    """Only ids this process minted use the allowance: a client's id is proven unused by
    its own reservation (and reused: refused)."""
    tenant = await _wallet(engine, 10_000)
    prepaid = _prepaid(engine)
    await prepaid.reserve(tenant, "given", 500, project_id=None, key_id=None, minted=minted)
    async with engine.connect() as conn:
        kinds = (await conn.execute(text("SELECT kind FROM ledger_entries ORDER BY id"))).all()
    assert [k[0] for k in kinds] == ["topup", "lease" if minted else "reserve"]
    assert prepaid.leases is not None and prepaid.lease_writer is not None
    await prepaid.lease_writer.stop()


async def test_stopping_waits_for_a_grant_in_flight_and_leaves_no_lease_open(
    engine: AsyncEngine,
) -> None:
    """A grant made ahead of need (a background task) may still be in flight when the
    process stops: stop waits for it, then closes the lease it made. Otherwise the grant
    opens a lease after the close (its money held until reclaimed) and its connection is
    left to the garbage collector."""
    tenant = await _wallet(engine, 10_000)
    prepaid = _prepaid(engine)
    assert prepaid.leases is not None and prepaid.lease_writer is not None
    # The first grant takes half the wallet (5,000); 4,500 left is under 16 reservations
    # of 500, so the admission starts a grant ahead of need and does not wait for it.
    await prepaid.reserve(tenant, "ahead", 500, project_id=None, key_id=None, minted=True)
    allowance = prepaid.leases.wallets[tenant]
    assert allowance.granting is not None and not allowance.granting.done()
    await prepaid.lease_writer.stop()
    assert allowance.granting is None and allowance.lease_id is None
    async with engine.connect() as conn:
        still_open = (
            await conn.execute(select(lease_table.c.id).where(lease_table.c.status == "open"))
        ).all()
    assert still_open == []
    # Nothing is admitted in memory once stopped: a request after it waits for no grant.
    assert not prepaid.leases.try_admit(tenant, "late", 500, None, None)
    await _assert_balanced(engine, tenant)


async def test_a_busy_wallet_gets_larger_grants_and_a_quiet_one_smaller(
    engine: AsyncEngine,
) -> None:
    """Grants asked within a second of the last double the chunk (up to 128 times); one
    asked after ten seconds halves it. Each is one `lease` entry of the granted amount."""
    tenant = await _wallet(engine, 10**12)
    now = [1_000.0]
    prepaid = _prepaid(engine, chunk_requests=4, clock=lambda: now[0])
    leases = prepaid.leases
    assert leases is not None
    prepaid.start()
    try:
        served = 0

        async def drain(step_s: float) -> None:
            """Admit and end requests of 100 until one needs a grant, `step_s` apart."""
            nonlocal served
            grants = leases.grants
            while leases.grants == grants:
                assert await _reserve(prepaid, tenant, f"g{served}", 100)
                prepaid.settle(row(f"g{served}", tenant, cost_micros=100))
                served += 1
                now[0] += step_s

        for _ in range(9):  # busy: a grant every few hundredths of a second
            await drain(0.001)
        now[0] += 11.0  # quiet, then one more grant
        await drain(0.001)
    finally:
        await prepaid.stop(timeout_s=10)
    async with engine.connect() as conn:
        granted = [
            -int(r[0])
            for r in await conn.execute(
                text(
                    "SELECT amount_micros FROM ledger_entries WHERE tenant_id = :t"
                    " AND kind = 'lease' ORDER BY id"
                ),
                {"t": tenant},
            )
        ]
    chunk = 4 * 100
    # ... 128 times at most; after the quiet spell 64 times. (The next is asked when less
    # than one such chunk is left, which the admission that took it may already find: then
    # one more, quick again, follows.)
    scales = (1, 2, 4, 8, 16, 32, 64, 128, 128, 64)
    assert granted[:10] == [chunk * s for s in scales], str(granted)
    assert granted[10:] in ([], [chunk * 128]), str(granted)
    await _assert_balanced(engine, tenant)
