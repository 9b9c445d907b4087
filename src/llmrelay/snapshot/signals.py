"""Telling the other replicas that the config generation moved.

Every change to the configuration bumps `config_generation` in the database (see
`store.bootstrap.bump_generation`); this module announces the new number so replicas rebuild
their snapshot at once instead of at their next poll. The announcement goes out on every
transport the publisher can reach:

- Redis pub/sub, channel `llmrelay:config`, when `LLMRELAY_REDIS_URL` is set;
- PostgreSQL `NOTIFY llmrelay_config, '<generation>'` when the database is PostgreSQL;
- nothing on SQLite (one serving process; polling covers `apply` from another process).

Replicas listen on one of them (Redis when configured, else PostgreSQL: `listener.py`), so a
publisher whose environment lacks the Redis URL still reaches PostgreSQL-only replicas.

Publishing never fails the change that caused it: the change is committed by then, and every
replica polls the generation (`LLMRELAY_SNAPSHOT_POLL_S`) as the backstop for a signal that
was lost. A failed publish is logged and counted (`publish_failures`, and the metric
`llmrelay_config_signal_publish_failures_total` in a serving process).

How to call it after a change (the admin API's service layer, `llmrelay apply`)::

    async with sessions.begin() as session:        # the unit of work that changed config
        ...                                        # the change itself
        generation = await bump_generation(session)
    await publisher.publish(generation)            # after the commit, never inside it

A replica that receives the signal before the commit would read the old generation and do
nothing, so the publish must follow the commit. In a serving process one `ConfigPublisher` is
built at start-up (app.py) and shared; a one-shot command uses `publish_generation`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

if TYPE_CHECKING:  # redis is imported only where it is used (start-up time of commands)
    from redis.asyncio import Redis

log = structlog.get_logger(__name__)

#: Redis pub/sub channel; the message is the generation as decimal text.
REDIS_CHANNEL = "llmrelay:config"
#: PostgreSQL LISTEN/NOTIFY channel (an identifier: no colon); the payload is the generation.
PG_CHANNEL = "llmrelay_config"
#: A publish waits at most this long per transport: the change is committed already, and
#: polling catches up when the signal is late or lost.
PUBLISH_TIMEOUT_S = 2.0


def parse_generation(payload: str | bytes) -> int | None:
    """The generation a signal carries; None when the payload is not a number (the receiver
    then refreshes anyway: a malformed signal still says that something moved)."""
    try:
        return int(payload)
    except ValueError:
        return None


class ConfigPublisher:
    """Announces new generations; built once per process, closed at shutdown.

    `on_failure(transport)` is called for each failed publish (the serving process counts it
    in a metric); `publish_failures` counts them too, for processes without metrics.
    `on_publish(generation)` is called first, for the publishing process itself: a serving
    process rebuilds its own snapshot at once, whatever the transports (on SQLite there is
    none, and its own signal would come back only by the round trip). `served()` is awaited
    last: a serving process returns once it serves the change itself (bounded; see
    reload.py), so whoever made the change through this process's admin API can use it at
    once (a key created, then a request with it).
    """

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        redis_url: str | None,
        on_failure: Callable[[str], None] | None = None,
        on_publish: Callable[[int], None] | None = None,
        served: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._engine = engine
        self._postgres = engine.dialect.name == "postgresql"
        self._redis_url = redis_url
        self._redis: Redis | None = None
        self._on_failure = on_failure
        self._on_publish = on_publish
        self._served = served
        self.publish_failures = 0

    @property
    def transports(self) -> tuple[str, ...]:
        """Where `publish` sends: empty on SQLite without Redis (polling alone)."""
        found = ("redis",) if self._redis_url else ()
        return found + (("postgres",) if self._postgres else ())

    async def publish(self, generation: int) -> None:
        """Announce `generation` on every transport; never raises (see the module doc)."""
        if self._on_publish is not None:
            self._on_publish(generation)
        if self._redis_url:
            await self._guarded("redis", generation, self._publish_redis(generation))
        if self._postgres:
            await self._guarded("postgres", generation, self._publish_postgres(generation))
        if self._served is not None:
            await self._served()

    async def close(self) -> None:
        if self._redis is not None:
            redis, self._redis = self._redis, None
            try:
                await redis.aclose()
            except Exception as exc:  # noqa: BLE001 - closing a broken client may fail too
                log.debug("config_signal_close_failed", error=f"{type(exc).__name__}: {exc}")

    async def _guarded(self, transport: str, generation: int, sending: Awaitable[None]) -> None:
        try:
            async with asyncio.timeout(PUBLISH_TIMEOUT_S):
                await sending
        except Exception as exc:  # noqa: BLE001 - a lost signal is covered by polling
            self.publish_failures += 1
            log.warning(
                "config_signal_publish_failed",
                transport=transport,
                generation=generation,
                error=f"{type(exc).__name__}: {exc}",
            )
            if self._on_failure is not None:
                self._on_failure(transport)
            if transport == "redis":
                await self.close()  # a fresh client next time
        else:
            log.info("config_signal_published", transport=transport, generation=generation)

    async def _publish_redis(self, generation: int) -> None:
        if self._redis is None:
            from redis.asyncio import Redis

            assert self._redis_url is not None
            self._redis = Redis.from_url(
                self._redis_url,
                socket_connect_timeout=PUBLISH_TIMEOUT_S,
                socket_timeout=PUBLISH_TIMEOUT_S,
            )
        await self._redis.publish(REDIS_CHANNEL, str(generation))

    async def _publish_postgres(self, generation: int) -> None:
        # pg_notify() takes the channel and payload as values (NOTIFY takes only literals);
        # outside a transaction of its own change it is delivered when this one commits.
        async with self._engine.connect() as conn:
            await conn.execute(
                text("SELECT pg_notify(:channel, :payload)"),
                {"channel": PG_CHANNEL, "payload": str(generation)},
            )
            await conn.commit()


async def publish_generation(
    generation: int, *, engine: AsyncEngine, redis_url: str | None
) -> None:
    """One-shot publish for commands that exit afterwards (`llmrelay apply`)."""
    publisher = ConfigPublisher(engine=engine, redis_url=redis_url)
    try:
        await publisher.publish(generation)
    finally:
        await publisher.close()
