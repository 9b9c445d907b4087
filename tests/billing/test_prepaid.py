"""The data plane's side of prepaid billing in process: reservations (once per request id,
refused when short), settles queued and written off the request path by the record's rule,
kept while the database is away and written when it is back, and one auto top-up job per
wallet when a settle leaves the balance under its threshold."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.billing import ledger
from llmrelay.billing.errors import InsufficientBalance, RequestIdUsed
from llmrelay.billing.estimate import ReservePolicy
from llmrelay.billing.prepaid import AUTO_TOPUP_KIND, Prepaid
from llmrelay.gateway.call import RECORD_COLUMNS
from llmrelay.store.bootstrap import ensure_default_tenant
from llmrelay.store.db import session_factory
from llmrelay.store.models_billing import Reservation, Wallet
from llmrelay.store.models_jobs import Job


def row(request_id: str, tenant: str, **values: Any) -> tuple[Any, ...]:
    """A finished request's record row (RECORD_COLUMNS order)."""
    found = dict.fromkeys(RECORD_COLUMNS)
    found |= {"request_id": request_id, "tenant_id": tenant, "status_code": 200, "attempts": 1}
    found |= {"usage_source": "reported", "price_source": "model"} | values
    return tuple(found[c] for c in RECORD_COLUMNS)


async def _wallet(engine: AsyncEngine, balance: int) -> str:
    async with session_factory(engine).begin() as session:
        tenant = (await ensure_default_tenant(session)).id
    async with engine.begin() as conn:
        await ledger.ensure_wallet(conn, tenant)
        await ledger.credit(conn, tenant, balance, kind="topup", key="seed")
    return tenant


async def _statuses(engine: AsyncEngine) -> dict[str, tuple[str, int | None]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(Reservation.request_id, Reservation.status, Reservation.charged_micros)
        )
        return {r[0]: (r[1], r[2]) for r in rows}


async def test_reserve_then_settle_by_the_records_rule(engine: AsyncEngine) -> None:
    tenant = await _wallet(engine, 1_000)
    prepaid = Prepaid(engine, ReservePolicy())
    prepaid.start()
    try:
        for request_id in ("answered", "refused-upstream", "left"):
            await prepaid.reserve(tenant, request_id, 300, project_id="p", key_id="k")
        with pytest.raises(RequestIdUsed):
            await prepaid.reserve(tenant, "answered", 300, project_id="p", key_id="k")
        with pytest.raises(InsufficientBalance):
            await prepaid.reserve(tenant, "one-too-many", 300, project_id="p", key_id="k")
        prepaid.settle(row("answered", tenant, cost_micros=120))
        prepaid.settle(row("refused-upstream", tenant, status_code=502, usage_source="none"))
        prepaid.settle(row("left", tenant, status_code=499, usage_source="none"))
    finally:
        await prepaid.stop(timeout_s=10)
    assert await _statuses(engine) == {
        "answered": ("settled", 120),
        "refused-upstream": ("released", 0),
        "left": ("metering_failed", None),
    }
    async with engine.connect() as conn:
        wallet = (await conn.execute(select(Wallet.balance_micros, Wallet.reserved_micros))).one()
    assert tuple(wallet) == (1_000 - 120 - 300, 300)


async def test_settles_wait_while_the_database_is_away(tmp_path: Any) -> None:
    """SQLite: the reservations table taken away (renamed) fails every settle, as an outage
    would; the settles stay queued and are written once it is back."""
    from llmrelay.store import migrate
    from llmrelay.store.db import create_engine

    engine = create_engine(f"sqlite:///{tmp_path / 'away.db'}")
    await migrate.upgrade(engine)
    try:
        tenant = await _wallet(engine, 1_000)
        prepaid = Prepaid(engine, ReservePolicy())
        prepaid.start()
        await prepaid.reserve(tenant, "kept", 500, project_id=None, key_id=None)
        async with engine.begin() as conn:
            await conn.execute(text("ALTER TABLE reservations RENAME TO reservations_away"))
        prepaid.settle(row("kept", tenant, cost_micros=42))
        for _ in range(100):  # the first attempt fails, and the settle goes back to the queue
            await asyncio.sleep(0.01)
            if prepaid.depth == 1 and prepaid.settled == 0:
                break
        await asyncio.sleep(0.3)
        assert (prepaid.depth, prepaid.settled) == (1, 0)
        async with engine.begin() as conn:
            await conn.execute(text("ALTER TABLE reservations_away RENAME TO reservations"))
        await prepaid.stop(timeout_s=10)
        assert prepaid.settled == 1
        assert await _statuses(engine) == {"kept": ("settled", 42)}
    finally:
        await engine.dispose()


async def test_a_settle_under_the_threshold_queues_one_auto_top_up(engine: AsyncEngine) -> None:
    tenant = await _wallet(engine, 1_000)
    async with engine.begin() as conn:
        await conn.execute(
            update(Wallet)
            .where(Wallet.tenant_id == tenant)
            .values(auto_topup_enabled=True, auto_topup_threshold_micros=900)
        )
    prepaid = Prepaid(engine, ReservePolicy())
    prepaid.start()
    try:
        for n in range(3):
            await prepaid.reserve(tenant, f"r{n}", 100, project_id=None, key_id=None)
            prepaid.settle(row(f"r{n}", tenant, cost_micros=60))
    finally:
        await prepaid.stop(timeout_s=10)
    async with engine.connect() as conn:
        jobs = (await conn.execute(select(Job.kind, Job.payload, Job.dedupe_key))).all()
    # 940 (above 900), then 880 and 820 (under): one job, the second's dedupe key holds it
    assert [(j[0], j[1], j[2]) for j in jobs] == [
        (AUTO_TOPUP_KIND, {"tenant_id": tenant}, f"auto_topup:{tenant}")
    ]


@pytest.mark.parametrize("granted", [False, True], ids=["own-transaction", "lease-grant"])
async def test_a_locked_sqlite_database_fails_the_reservation_within_its_timeout(
    tmp_path: Any, granted: bool
) -> None:
    """Another process holding SQLite's write lock (an `apply`, a backup) makes a
    reservation wait for it at most `reserve_timeout_s`, then fail as unavailable (a 503),
    not wait the connection's 30 s busy timeout; the connection is whole afterwards."""
    import sqlite3
    import time

    from llmrelay.billing.allowance import Leases
    from llmrelay.billing.errors import LedgerUnavailable
    from llmrelay.store.db import create_engine
    from tests.support.migrated import migrated_sqlite_url

    engine = create_engine(await migrated_sqlite_url(tmp_path))
    try:
        tenant = await _wallet(engine, 1_000_000)
        leases = Leases(engine, owner="test", reserve_timeout_s=1.0) if granted else None
        prepaid = Prepaid(engine, ReservePolicy(), reserve_timeout_s=1.0, leases=leases)
        holder = sqlite3.connect(tmp_path / "llmrelay.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        with pytest.raises(LedgerUnavailable):
            await prepaid.reserve(
                tenant, "waits", 100, project_id=None, key_id=None, minted=granted
            )
        waited = time.monotonic() - started
        holder.execute("ROLLBACK")
        holder.close()
        # 1 s asked; the ceiling leaves room for a loaded machine, far under the 30 s it was
        assert 0.9 <= waited < 8, waited
        await prepaid.reserve(tenant, "after", 100, project_id=None, key_id=None, minted=granted)
        async with engine.connect() as conn:  # the pool's connections wait 30 s again
            busy = {(await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar()}
        assert busy == {30_000}
    finally:
        await engine.dispose()
