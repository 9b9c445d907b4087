"""The driver-level multi-row INSERTs of a lease's round (billing/rows_sql.py), on each backend:
every row of a round is written, in statements of a power of two rows (so the statement
texts are few and stay in the drivers' caches), with the shared columns' one value in every
row (one parameter each), and RETURNING gives back the rows it wrote."""

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
@pytest.mark.parametrize("shared", [(), ("tenant_id", "created_at")], ids=["per-row", "shared"])
async def test_every_row_is_written_and_returned(
    engine: AsyncEngine, rows: int, shared: tuple[str, ...]
) -> None:
    async with session_factory(engine).begin() as session:
        tenant = (await ensure_default_tenant(session)).id
    table = ledger.reservations
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        created = bind_time(conn, table, "created_at", now)
        full = {"tenant_id": tenant, "created_at": created, "status": ledger.HELD}
        values = [
            tuple({"request_id": f"rid-{rows}-{n}", "amount_micros": n, **full}[c]
                  for c in COLUMNS if c not in shared)
            for n in range(rows)
        ]  # fmt: skip
        insert = insert_for(conn, table, COLUMNS, " RETURNING request_id", shared)
        returned = await insert.run(conn, values, tuple(full[c] for c in shared))
    assert sorted(returned) == sorted(f"rid-{rows}-{n}" for n in range(rows))
    async with engine.connect() as conn:
        written = (
            await conn.execute(
                select(
                    table.c.request_id,
                    table.c.amount_micros,
                    table.c.tenant_id,
                    table.c.status,
                    table.c.created_at,
                )
            )
        ).all()
    assert sorted((r, a) for r, a, *_ in written) == [
        (f"rid-{rows}-{n}", n) for n in sorted(range(rows), key=lambda n: f"rid-{rows}-{n}")
    ]
    assert {(t, s) for _, _, t, s, _ in written} == {(tenant, ledger.HELD)}
    assert {c.replace(tzinfo=UTC) if c.tzinfo is None else c for *_, c in written} == {now}
