"""The driver-level multi-row INSERTs of a lease's round (billing/rows_sql.py), on each backend:
every row of a round is written, in statements of a power of two rows (so the statement
texts are few and stay in the drivers' caches), and RETURNING gives back the rows it wrote."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.billing import ledger
from llmrelay.billing.rows_sql import CHUNK_ROWS, bind_time, chunk_sizes, insert_for
from llmrelay.store.bootstrap import ensure_default_tenant
from llmrelay.store.db import session_factory

COLUMNS = ("request_id", "tenant_id", "amount_micros", "status", "created_at")


@given(st.integers(min_value=0, max_value=5 * CHUNK_ROWS))
def test_a_round_is_cut_into_power_of_two_statements_largest_first(rows: int) -> None:
    sizes = chunk_sizes(rows)
    assert sum(sizes) == rows
    assert sizes == sorted(sizes, reverse=True)
    assert all(size & (size - 1) == 0 and 0 < size <= CHUNK_ROWS for size in sizes)
    below = [size for size in sizes if size < CHUNK_ROWS]
    assert len(below) == len(set(below))  # one statement per bit: at most 8 under a full one


@pytest.mark.parametrize("rows", [1, 37, CHUNK_ROWS + 3])
async def test_every_row_is_written_and_returned(engine: AsyncEngine, rows: int) -> None:
    async with session_factory(engine).begin() as session:
        tenant = (await ensure_default_tenant(session)).id
    table = ledger.reservations
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        created = bind_time(conn, table, "created_at", now)
        values = [(f"rid-{rows}-{n}", tenant, n, ledger.HELD, created) for n in range(rows)]
        insert = insert_for(conn, table, COLUMNS, " RETURNING request_id")
        returned = await insert.run(conn, values)
    assert sorted(returned) == sorted(v[0] for v in values)
    async with engine.connect() as conn:
        written = (
            await conn.execute(
                select(table.c.request_id, table.c.amount_micros, table.c.created_at)
            )
        ).all()
    assert sorted((r, a) for r, a, _ in written) == sorted((v[0], v[2]) for v in values)
    assert {c.replace(tzinfo=UTC) if c.tzinfo is None else c for _, _, c in written} == {now}
