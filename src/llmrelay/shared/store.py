"""Where shared entries live: short strings under a key, each with a time to live.

`RedisEntries` keeps them in Redis (`SET ... PX`); `DatabaseEntries` in the main database's
`shared_entries` table (PostgreSQL, for deployments without Redis, and while Redis is down);
`FallbackEntries` asks Redis first and turns to the database when Redis fails, with one log
line per outage, trying Redis again every few seconds. `entries_for` picks what a
deployment gets: nothing (None) for one process on SQLite without Redis, whose state stays
in memory as before (no cost on the request path).

A read that misses in Redis also asks the database while the database holds entries written
during an outage (it does for `OUTAGE_MEMORY_S` after Redis came back), so a response
stored while Redis was down is still found once it is back.
"""

from __future__ import annotations

import time
from typing import Any, Final, Protocol

import structlog
from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.store.models_shared import SharedEntry

log = structlog.get_logger("llmrelay.shared")

#: Redis keys of shared entries start with this.
REDIS_PREFIX: Final = "llmrelay:shared:"
#: How long Redis is left alone after a failure before it is tried again.
RETRY_REDIS_S: Final = 5.0
#: How long after an outage a miss in Redis is also looked up in the database.
OUTAGE_MEMORY_S: Final = 24 * 3600.0
#: Redis calls give up after this (then the database answers).
REDIS_TIMEOUT_S: Final = 1.0


class Entries(Protocol):
    async def get(self, key: str) -> str | None: ...

    async def put(self, key: str, value: str, ttl_s: float) -> None: ...

    async def close(self) -> None: ...


class RedisEntries:
    def __init__(self, url: str) -> None:
        from redis.asyncio import Redis  # imported only when Redis is configured

        self._redis: Any = Redis.from_url(
            url, socket_connect_timeout=REDIS_TIMEOUT_S, socket_timeout=REDIS_TIMEOUT_S
        )

    async def get(self, key: str) -> str | None:
        value = await self._redis.get(REDIS_PREFIX + key)
        return None if value is None else bytes(value).decode()

    async def put(self, key: str, value: str, ttl_s: float) -> None:
        await self._redis.set(REDIS_PREFIX + key, value, px=max(int(ttl_s * 1000), 1))

    async def close(self) -> None:
        await self._redis.aclose()


class DatabaseEntries:
    """Entries in `shared_entries`; expired rows are ignored on read and deleted now and
    then by `put` (at most once a minute per process)."""

    def __init__(self, engine: AsyncEngine, clock: Any = time.time) -> None:
        self._engine = engine
        self._clock = clock
        self._insert = pg_insert if engine.dialect.name == "postgresql" else sqlite_insert
        self._swept_at = 0.0

    async def get(self, key: str) -> str | None:
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    select(SharedEntry.value).where(
                        SharedEntry.key == key, SharedEntry.expires_at > self._clock()
                    )
                )
            ).first()
        return None if row is None else str(row[0])

    async def live(self, kind: str) -> list[tuple[str, str]]:
        """Every entry of one kind (its key's prefix before ':') that has not expired."""
        async with self._engine.connect() as conn:
            rows = await conn.execute(
                select(SharedEntry.key, SharedEntry.value).where(
                    SharedEntry.kind == kind, SharedEntry.expires_at > self._clock()
                )
            )
            return [(str(key), str(value)) for key, value in rows]

    async def put(self, key: str, value: str, ttl_s: float) -> None:
        now = self._clock()
        statement = self._insert(SharedEntry).values(
            key=key, kind=key.partition(":")[0], value=value, expires_at=now + ttl_s
        )
        statement = statement.on_conflict_do_update(
            index_elements=[SharedEntry.key],
            set_={"value": statement.excluded.value, "expires_at": statement.excluded.expires_at},
        )
        async with self._engine.begin() as conn:
            await conn.execute(statement)
            if now - self._swept_at > 60.0:
                self._swept_at = now
                await conn.execute(delete(SharedEntry).where(SharedEntry.expires_at <= now))

    async def claim(self, key: str, value: str, ttl_s: float) -> bool:
        """Write the entry only if none is live under `key` (an expired one is replaced):
        whether this call wrote it. One statement, so of several callers exactly one wins."""
        now = self._clock()
        statement = self._insert(SharedEntry).values(
            key=key, kind=key.partition(":")[0], value=value, expires_at=now + ttl_s
        )
        claimed = statement.on_conflict_do_update(
            index_elements=[SharedEntry.key],
            set_={"value": statement.excluded.value, "expires_at": statement.excluded.expires_at},
            where=SharedEntry.expires_at <= now,
        ).returning(SharedEntry.key)
        async with self._engine.begin() as conn:
            return (await conn.execute(claimed)).first() is not None

    async def release(self, key: str, value: str) -> None:
        """Delete the entry if it still holds `value` (the caller's own claim)."""
        async with self._engine.begin() as conn:
            await conn.execute(
                delete(SharedEntry).where(SharedEntry.key == key, SharedEntry.value == value)
            )

    async def close(self) -> None:
        pass  # the engine is the stack's


class FallbackEntries:
    """Redis, and the database when Redis fails (see the module's docstring)."""

    def __init__(self, redis: Entries, database: Entries, clock: Any = time.monotonic) -> None:
        self._redis = redis
        self._database = database
        self._clock = clock
        #: Redis is not asked before this (monotonic time); 0: Redis is up.
        self._down_until = 0.0
        #: Until when a miss in Redis is also looked up in the database (monotonic time).
        self._database_holds_until = 0.0

    @property
    def degraded(self) -> bool:
        return self._down_until > 0.0

    async def get(self, key: str) -> str | None:
        if self._redis_usable():
            try:
                value = await self._redis.get(key)
            except Exception as exc:  # noqa: BLE001 - any Redis failure: the database answers
                self._failed(exc)
            else:
                self._recovered()
                if value is not None or self._clock() > self._database_holds_until:
                    return value
        return await self._database.get(key)

    async def put(self, key: str, value: str, ttl_s: float) -> None:
        if self._redis_usable():
            try:
                await self._redis.put(key, value, ttl_s)
            except Exception as exc:  # noqa: BLE001
                self._failed(exc)
            else:
                self._recovered()
                return
        self._database_holds_until = self._clock() + OUTAGE_MEMORY_S
        await self._database.put(key, value, ttl_s)

    async def close(self) -> None:
        await self._redis.close()
        await self._database.close()

    def _redis_usable(self) -> bool:
        return self._down_until == 0.0 or self._clock() >= self._down_until

    def _failed(self, exc: Exception) -> None:
        if self._down_until == 0.0:
            log.warning("shared_state_on_database", error=f"{type(exc).__name__}: {exc}")
        self._down_until = self._clock() + RETRY_REDIS_S
        self._database_holds_until = self._clock() + OUTAGE_MEMORY_S

    def _recovered(self) -> None:
        if self._down_until != 0.0:
            self._down_until = 0.0
            log.info("shared_state_on_redis")


class _Nothing:
    """No database to turn to (SQLite): while Redis is down each process keeps its own state
    (its local caches answer) until Redis is back."""

    async def get(self, key: str) -> str | None:
        return None

    async def put(self, key: str, value: str, ttl_s: float) -> None:
        pass

    async def close(self) -> None:
        pass


def entries_for(redis_url: str | None, engine: AsyncEngine) -> Entries | None:
    """The shared store of a deployment: Redis with PostgreSQL behind it; PostgreSQL alone;
    Redis alone on SQLite; None for SQLite without Redis (in memory, one process)."""
    on_postgres = engine.dialect.name == "postgresql"
    if redis_url is None:
        return DatabaseEntries(engine) if on_postgres else None
    redis = RedisEntries(redis_url)
    if on_postgres:
        return FallbackEntries(redis, DatabaseEntries(engine))
    return FallbackEntries(redis, _Nothing())
