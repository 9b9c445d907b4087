"""Breaker openings shared by the replicas: a route opened by failures on one replica is
skipped by the others within moments, with no shared read on the request path (each
replica's `Breakers.admit` stays a dict lookup; openings arrive in the background).

When a replica's own failures open a route (`Breakers.on_tripped`), a task publishes
"route open until T" (T in Unix seconds): on Redis pub/sub (channel `llmrelay:breakers`,
seen by the others at once) and, on PostgreSQL, as the shared entry `b:ROUTE` that every
replica polls (every `POLL_S`, or `POLL_WITH_REDIS_S` with Redis: the backstop for a
message missed while Redis was down). A replica that learns of an opening opens its own
breaker for what is left of the cooldown (`Breakers.opened_elsewhere`) and probes the
route itself when it ends; closings do not travel (each replica's trial closes its own).
The time is wall-clock time: replicas' clocks should agree within a second (NTP).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Any, Final

import structlog

from llmrelay.routing.breaker import Breakers
from llmrelay.shared.store import DatabaseEntries

log = structlog.get_logger("llmrelay.shared")

REDIS_CHANNEL: Final = "llmrelay:breakers"
#: How often the database's openings are read without Redis, and with it.
POLL_S: Final = 0.5
POLL_WITH_REDIS_S: Final = 5.0
#: After a failure, the Redis subscription is tried again after this.
RESUBSCRIBE_S: Final = 1.0


class SharedBreakers:
    def __init__(
        self, breakers: Breakers, redis_url: str | None, database: DatabaseEntries | None
    ) -> None:
        self._breakers = breakers
        self._redis_url = redis_url
        self._database = database
        #: This replica's name in what it publishes (its own messages come back to it).
        self._origin = os.urandom(8).hex()
        self._outbox: asyncio.Queue[tuple[str, float]] = asyncio.Queue(maxsize=10_000)
        #: Database entries already applied: key -> value.
        self._seen: dict[str, str] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._publisher: Any = None

    def start(self) -> None:
        self._breakers.on_tripped = self._tripped
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._publish_loop()))
        if self._redis_url is not None:
            self._tasks.append(loop.create_task(self._subscribe_loop()))
        if self._database is not None:
            self._tasks.append(loop.create_task(self._poll_loop()))

    async def close(self) -> None:
        self._breakers.on_tripped = None
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._publisher is not None:
            with contextlib.suppress(Exception):
                await self._publisher.aclose()

    def _tripped(self, route_id: str, window_s: float) -> None:
        with contextlib.suppress(asyncio.QueueFull):  # a flood of openings: the rest wait
            self._outbox.put_nowait((route_id, time.time() + window_s))

    def _apply(self, route_id: str, until: float) -> None:
        if self._breakers.opened_elsewhere(route_id, until - time.time()):
            log.info("breaker_opened_elsewhere", route=route_id)

    async def _publish_loop(self) -> None:
        while True:
            route_id, until = await self._outbox.get()
            message = f"{self._origin} {route_id} {until!r}"
            if self._database is not None:
                try:
                    await self._database.put(f"b:{route_id}", message, until - time.time())
                except Exception as exc:  # noqa: BLE001
                    log.warning("breaker_share_failed", store="database", error=repr(exc))
            if self._redis_url is not None:
                try:
                    await self._redis().publish(REDIS_CHANNEL, message)
                except Exception as exc:  # noqa: BLE001
                    log.warning("breaker_share_failed", store="redis", error=repr(exc))

    def _redis(self) -> Any:
        if self._publisher is None:
            from redis.asyncio import Redis

            assert self._redis_url is not None
            self._publisher = Redis.from_url(
                self._redis_url, socket_connect_timeout=1.0, socket_timeout=1.0
            )
        return self._publisher

    def _received(self, message: str) -> None:
        try:
            origin, route_id, until = message.split(" ")
            moment = float(until)
        except ValueError:
            return
        if origin != self._origin:
            self._apply(route_id, moment)

    async def _subscribe_loop(self) -> None:
        from redis.asyncio import Redis

        assert self._redis_url is not None
        while True:
            client = Redis.from_url(self._redis_url, socket_connect_timeout=1.0)
            try:
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                await pubsub.subscribe(REDIS_CHANNEL)
                while True:
                    got = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if got is not None and got.get("type") == "message":
                        self._received(bytes(got["data"]).decode())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - Redis down: the database poll covers
                log.warning("breaker_subscription_lost", error=repr(exc))
            finally:
                with contextlib.suppress(Exception):
                    await client.aclose()
            await asyncio.sleep(RESUBSCRIBE_S)

    async def _poll_loop(self) -> None:
        assert self._database is not None
        every = POLL_S if self._redis_url is None else POLL_WITH_REDIS_S
        while True:
            await asyncio.sleep(every)
            try:
                live = await self._database.live("b")
            except Exception as exc:  # noqa: BLE001
                log.warning("breaker_poll_failed", error=repr(exc))
                continue
            seen = self._seen
            for key, value in live:
                if seen.get(key) != value:
                    self._received(value)
            self._seen = dict(live)
