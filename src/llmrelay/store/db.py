"""Engines and sessions for SQLite (aiosqlite) and PostgreSQL (asyncpg) from one URL."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.ext.asyncio import AsyncSession as AsyncSession

_ASYNC_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg"}
#: How long a SQLite connection waits for another's write lock before "database is locked":
#: long, because config applies and backups hold it for a while (`begin_within` shortens it
#: for a transaction that must answer sooner).
SQLITE_BUSY_TIMEOUT_MS = 30_000


class DatabaseURLError(ValueError):
    """LLMRELAY_DATABASE_URL names a database this program cannot use."""


def async_url(url: str) -> str:
    """Pick the async driver for a `sqlite:///…` or `postgresql://…` URL.

    An explicit driver suffix is kept; `postgres://` (Heroku style) is accepted.
    """
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    try:
        parsed = make_url(url)
    except Exception as exc:
        raise DatabaseURLError(f"LLMRELAY_DATABASE_URL is not a database URL: {exc}") from exc
    backend = parsed.get_backend_name()
    if backend not in _ASYNC_DRIVERS:
        raise DatabaseURLError(
            f"LLMRELAY_DATABASE_URL: unsupported database {backend!r} "
            "(use sqlite:///path.db or postgresql://user@host:port/db)"
        )
    if "+" not in parsed.drivername:
        parsed = parsed.set(drivername=_ASYNC_DRIVERS[backend])
    return parsed.render_as_string(hide_password=False)


def is_sqlite(url: str) -> bool:
    return async_url(url).startswith("sqlite")


def create_engine(url: str, **kwargs: Any) -> AsyncEngine:
    """An engine with the pragmas SQLite needs to serve concurrent readers and one writer."""
    full = async_url(url)
    if full.startswith("sqlite"):
        engine = create_async_engine(
            full, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}, **kwargs
        )
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    kwargs.setdefault("pool_size", 10)
    kwargs.setdefault("max_overflow", 10)
    kwargs.setdefault("pool_pre_ping", True)
    return create_async_engine(full, **kwargs)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.close()


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


@contextlib.asynccontextmanager
async def background_connect(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """`engine.connect()` for periodic work beside the request path (polls, the job
    runner), with a turn of the event loop between the checkout and the first statement.
    Why: nothing between the two yields, so a poll's first slice on the loop was the checkout
    and the statement's whole preparation at once, 0.5-1.4 ms of CPU when it runs cold every
    few seconds, while every request ready meanwhile waits; split, each part stays under
    0.4 ms (docs/performance.md, "Stalls beside the request path")."""
    async with engine.connect() as conn:
        await asyncio.sleep(0)
        yield conn


@contextlib.asynccontextmanager
async def background_begin(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """`engine.begin()` for periodic work, split like `background_connect`."""
    async with engine.begin() as conn:
        await asyncio.sleep(0)
        yield conn


@contextlib.asynccontextmanager
async def begin_within(engine: AsyncEngine, timeout_s: float) -> AsyncIterator[AsyncConnection]:
    """`engine.begin()` that gives up on the database after `timeout_s` (TimeoutError, or
    SQLite's OperationalError "database is locked"), for a transaction a request waits on.

    PostgreSQL: `asyncio.timeout` around it (asyncpg's query is cancelled with the task).
    SQLite cannot be bounded that way: a wait for another connection's write lock happens in
    SQLite's busy handler on aiosqlite's thread, which no cancellation reaches, so
    `asyncio.timeout` got control back only after the connection's 30 s busy timeout, and
    then the rollback was refused. So the connection's busy timeout is lowered to what is left
    of `timeout_s` for this transaction and put back before it returns to the pool (a
    connection where that fails is discarded)."""
    if engine.dialect.name != "sqlite":
        async with asyncio.timeout(timeout_s), engine.begin() as conn:
            yield conn
        return
    deadline = time.monotonic() + timeout_s
    async with asyncio.timeout(timeout_s):  # a checkout waits on the pool, not on SQLite
        conn = await engine.connect()
    try:
        left_ms = max(1, round((deadline - time.monotonic()) * 1000))
        try:
            async with conn.begin():
                # Not a statement sqlite3 opens a transaction for: it takes effect at once.
                await conn.exec_driver_sql(f"PRAGMA busy_timeout={left_ms}")
                yield conn
        finally:
            try:
                await conn.exec_driver_sql(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
                await conn.rollback()  # ends the autobegun transaction the PRAGMA opened
            except BaseException:
                await conn.invalidate()
                raise
    finally:
        await conn.close()
