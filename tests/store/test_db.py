import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.store.db import (
    SQLITE_BUSY_TIMEOUT_MS,
    DatabaseURLError,
    async_url,
    background_begin,
    background_connect,
    begin_within,
)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("sqlite:///./llmrelay.db", "sqlite+aiosqlite:///./llmrelay.db"),
        ("sqlite:////abs/path.db", "sqlite+aiosqlite:////abs/path.db"),
        ("postgresql://u@h:5432/db", "postgresql+asyncpg://u@h:5432/db"),
        ("postgres://u:p@h/db", "postgresql+asyncpg://u:p@h/db"),
        ("postgresql+asyncpg://u@h/db", "postgresql+asyncpg://u@h/db"),
    ],
)
def test_async_driver_is_picked(given: str, expected: str) -> None:
    assert async_url(given) == expected


@pytest.mark.parametrize("bad", ["mysql://u@h/db", "not a url"])
def test_unsupported_urls_are_refused(bad: str) -> None:
    with pytest.raises(DatabaseURLError, match="LLMRELAY_DATABASE_URL"):
        async_url(bad)


async def _loop_turned_before_first_statement(
    engine: AsyncEngine, open_: Callable[[AsyncEngine], Any]
) -> bool:
    """Whether a callback queued when the connection is checked out runs before the first
    statement is sent: that is, whether the loop got a turn between the two."""
    loop = asyncio.get_running_loop()
    turned: list[bool] = []
    seen: list[bool] = []

    def on_checkout(*_: Any) -> None:
        loop.call_soon(turned.append, True)

    def before_statement(*_: Any) -> None:
        seen.append(bool(turned))

    event.listen(engine.sync_engine.pool, "checkout", on_checkout)
    event.listen(engine.sync_engine, "before_execute", before_statement)
    try:
        async with open_(engine) as conn:
            assert await conn.scalar(text("SELECT 1")) == 1
    finally:
        event.remove(engine.sync_engine.pool, "checkout", on_checkout)
        event.remove(engine.sync_engine, "before_execute", before_statement)
    assert len(seen) == 1
    return seen[0]


@pytest.mark.parametrize("open_", [background_connect, background_begin])
async def test_background_work_lets_the_loop_turn_after_the_checkout(
    engine: AsyncEngine, open_: Callable[[AsyncEngine], Any]
) -> None:
    # A poll's checkout and its statement's preparation are two slices of the loop, not one
    # (docs/performance.md, "Stalls beside the request path"); a plain connect is one.
    assert await _loop_turned_before_first_statement(engine, open_)
    assert not await _loop_turned_before_first_statement(engine, lambda e: e.connect())


async def _insert_then_fail(engine: AsyncEngine) -> None:
    async with background_begin(engine) as conn:
        await conn.execute(text("INSERT INTO scratch_background VALUES (2)"))
        raise RuntimeError("undo")


async def test_background_begin_commits_and_rolls_back(engine: AsyncEngine) -> None:
    async with background_begin(engine) as conn:
        await conn.execute(text("CREATE TABLE scratch_background (n INTEGER)"))
        await conn.execute(text("INSERT INTO scratch_background VALUES (1)"))
    with pytest.raises(RuntimeError, match="undo"):
        await _insert_then_fail(engine)
    async with background_connect(engine) as conn:
        rows = (await conn.execute(text("SELECT n FROM scratch_background"))).all()
        await conn.execute(text("DROP TABLE scratch_background"))
        await conn.commit()
    assert [tuple(row) for row in rows] == [(1,)]


async def test_begin_within_commits_rolls_back_and_leaves_the_connection_as_it_was(
    engine: AsyncEngine,
) -> None:
    async with begin_within(engine, 5.0) as conn:
        await conn.execute(text("CREATE TABLE scratch_within (n INTEGER)"))
        await conn.execute(text("INSERT INTO scratch_within VALUES (1)"))
    with pytest.raises(RuntimeError, match="undo"):
        await _insert_within_then_fail(engine)
    async with engine.connect() as conn:
        rows = (await conn.execute(text("SELECT n FROM scratch_within"))).all()
        if engine.dialect.name == "sqlite":  # the lowered busy timeout was put back
            busy = (await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar()
            assert busy == SQLITE_BUSY_TIMEOUT_MS
        await conn.execute(text("DROP TABLE scratch_within"))
        await conn.commit()
    assert [tuple(row) for row in rows] == [(1,)]


async def _insert_within_then_fail(engine: AsyncEngine) -> None:
    async with begin_within(engine, 5.0) as conn:
        await conn.execute(text("INSERT INTO scratch_within VALUES (2)"))
        raise RuntimeError("undo")
