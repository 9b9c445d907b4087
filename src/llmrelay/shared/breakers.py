"""Breakers shared by the replicas: a route opened by failures on one replica is skipped by
the others within moments, a route closed on one (its trial succeeded, or a health probe found
its provider online) is used again by the others, and when a cooldown ends one replica sends
the timer's trial for all, with no shared read on the request path (each replica's
`Breakers.admit` stays a dict lookup; openings and closings arrive in the background).

When a replica's own failures open a route (`Breakers.on_tripped`), a task publishes
"route open until T" (T in Unix seconds); when its trial or a probe closes one
(`Breakers.on_closed`), "route closed at C". Both go on Redis pub/sub (channel
`llmrelay:breakers`, seen by the others at once) and, on PostgreSQL, into the shared entry
`b:ROUTE` that every replica polls (every `POLL_S`, or `POLL_WITH_REDIS_S` with Redis: the
backstop for a message missed while Redis was down; a closing stays there `CLOSED_KEPT_S`).
A replica that learns of an opening opens its own breaker for what is left of the cooldown
(`Breakers.opened_elsewhere`); one that learns of a closing closes its breaker if it opened
before C (`Breakers.closed_elsewhere`: an opening of its own since then stands).

The timer's trial (gateway/trials.py) is claimed first: `claim` writes
`llmrelay:breakers:trial:ROUTE` with Redis `SET NX PX` (or the entry `t:ROUTE` with one
conditional upsert on PostgreSQL), for as long as a trial may take (the route's cooldown);
the replica that wrote it sends the trial, and its outcome reaches the others as an opening
(for twice as long) or a closing while the claim lasts (it is deleted early only when no
trial was sent). With neither
store reachable the claim is granted: a second trial costs one small call, a missed one a
whole cooldown. Requests keep their own half-open rule on each replica.
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
#: After a failure, the Redis subscription is tried again after this, doubled after each
#: failure in a row up to RESUBSCRIBE_MAX_S: while a name does not resolve, each attempt's
#: lookup holds a thread of the loop's default executor for the resolver's whole timeout
#: (the connect timeout gives up on it, the thread does not), and attempts every 2 s filled
#: the executor so every other lookup and connect of the process waited behind them (a
#: replica started 40 s late in the smoke test while podman's DNS was reloading). The
#: database poll covers the openings meanwhile.
RESUBSCRIBE_S: Final = 1.0
RESUBSCRIBE_MAX_S: Final = 15.0
#: How long a closing stays in the database for the replicas that poll it.
CLOSED_KEPT_S: Final = 30.0
#: Redis keys of trial claims start with this.
TRIAL_KEY: Final = "llmrelay:breakers:trial:"
#: Deletes a trial claim only if it is still the caller's.
_RELEASE: Final = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
)
_CLOSED: Final = "closed"


class SharedBreakers:
    def __init__(
        self, breakers: Breakers, redis_url: str | None, database: DatabaseEntries | None
    ) -> None:
        self._breakers = breakers
        self._redis_url = redis_url
        self._database = database
        #: This replica's name in what it publishes (its own messages come back to it).
        self._origin = os.urandom(8).hex()
        #: (route id, moment, closed): an opening until the moment, or a closing at it.
        self._outbox: asyncio.Queue[tuple[str, float, bool]] = asyncio.Queue(maxsize=10_000)
        #: Database entries already applied: key -> value.
        self._seen: dict[str, str] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._publisher: Any = None
        #: Set once the Redis subscription is made (what is published from then on arrives).
        self.listening = asyncio.Event()
        #: Trial claims this replica holds: route id -> the store that holds it.
        self._claims: dict[str, str] = {}

    def start(self) -> None:
        self._breakers.on_tripped = self._tripped
        self._breakers.on_closed = self._closed
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._publish_loop()))
        if self._redis_url is not None:
            self._tasks.append(loop.create_task(self._subscribe_loop()))
        if self._database is not None:
            self._tasks.append(loop.create_task(self._poll_loop()))

    async def close(self) -> None:
        self._breakers.on_tripped = None
        self._breakers.on_closed = None
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._publisher is not None:
            with contextlib.suppress(Exception):
                await self._publisher.aclose()

    async def claim(self, route_id: str, ttl_s: float) -> bool:
        """Whether this replica sends the route's trial (no other replica holds the claim)."""
        if self._redis_url is not None:
            try:
                won = await self._redis().set(
                    TRIAL_KEY + route_id, self._origin, nx=True, px=max(int(ttl_s * 1000), 1)
                )
            except Exception as exc:  # noqa: BLE001 - Redis down: the database, or granted
                log.warning("breaker_trial_claim_failed", store="redis", error=repr(exc))
            else:
                if won:
                    self._claims[route_id] = "redis"
                return bool(won)
        if self._database is not None:
            try:
                won = await self._database.claim(f"t:{route_id}", self._origin, ttl_s)
            except Exception as exc:  # noqa: BLE001
                log.warning("breaker_trial_claim_failed", store="database", error=repr(exc))
            else:
                if won:
                    self._claims[route_id] = "database"
                return bool(won)
        return True

    async def release(self, route_id: str) -> None:
        """No trial was sent under the claim: the next one may be claimed at once. A claim
        left behind (a trial's, this failed, or the replica died) lapses by itself."""
        store = self._claims.pop(route_id, None)
        try:
            if store == "redis":
                await self._redis().eval(_RELEASE, 1, TRIAL_KEY + route_id, self._origin)
            elif store == "database" and self._database is not None:
                await self._database.release(f"t:{route_id}", self._origin)
        except Exception as exc:  # noqa: BLE001
            log.warning("breaker_trial_release_failed", store=store, error=repr(exc))

    def _tripped(self, route_id: str, window_s: float) -> None:
        with contextlib.suppress(asyncio.QueueFull):  # a flood of openings: the rest wait
            self._outbox.put_nowait((route_id, time.time() + window_s, False))

    def _closed(self, route_id: str) -> None:
        with contextlib.suppress(asyncio.QueueFull):
            self._outbox.put_nowait((route_id, time.time(), True))

    def _apply(self, route_id: str, moment: float, closed: bool) -> None:
        if closed:
            if self._breakers.closed_elsewhere(route_id, time.time() - moment):
                log.info("breaker_closed_elsewhere", route=route_id)
        elif self._breakers.opened_elsewhere(route_id, moment - time.time()):
            log.info("breaker_opened_elsewhere", route=route_id)

    async def _publish_loop(self) -> None:
        while True:
            route_id, moment, closed = await self._outbox.get()
            if closed:
                # A fourth field: a replica of an earlier version ignores the message.
                message = f"{self._origin} {route_id} {moment!r} {_CLOSED}"
                kept = CLOSED_KEPT_S
            else:
                message = f"{self._origin} {route_id} {moment!r}"
                kept = moment - time.time()
            if self._database is not None:
                try:
                    await self._database.put(f"b:{route_id}", message, kept)
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
        fields = message.split(" ")
        closed = len(fields) == 4 and fields[3] == _CLOSED
        if len(fields) != 3 and not closed:
            return
        try:
            moment = float(fields[2])
        except ValueError:
            return
        if fields[0] != self._origin:
            self._apply(fields[1], moment, closed)

    async def _subscribe_loop(self) -> None:
        from redis.asyncio import Redis

        assert self._redis_url is not None
        pause = RESUBSCRIBE_S
        while True:
            client = Redis.from_url(self._redis_url, socket_connect_timeout=1.0)
            try:
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                await pubsub.subscribe(REDIS_CHANNEL)
                self.listening.set()
                pause = RESUBSCRIBE_S
                while True:
                    got = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if got is not None and got.get("type") == "message":
                        self._received(bytes(got["data"]).decode())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - Redis down: the database poll covers
                log.warning("breaker_subscription_lost", error=repr(exc), retry_in_s=pause)
            finally:
                with contextlib.suppress(Exception):
                    await client.aclose()
            await asyncio.sleep(pause)
            pause = min(pause * 2, RESUBSCRIBE_MAX_S)

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
