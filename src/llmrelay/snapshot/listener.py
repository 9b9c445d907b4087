"""Receiving "the config generation moved" (see signals.py) and keeping the line open.

One transport per process: Redis pub/sub when `LLMRELAY_REDIS_URL` is set, else a dedicated
asyncpg connection doing `LISTEN llmrelay_config` when the database is PostgreSQL, else none
(SQLite: polling alone). The connection is not taken from the engine's pool: a LISTEN lives
as long as its session, and a pooled connection would be handed to queries.

When the connection drops (Redis restarted, the backend killed, a network cut found by a
periodic ping) the listener reconnects with exponential backoff and, once back, asks for one
refresh: signals sent while it was away are lost, and that refresh catches up at once instead
of at the next poll. State changes are logged once per transition, not once per attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any, cast

import structlog
from sqlalchemy.engine import make_url

from llmrelay.snapshot.signals import PG_CHANNEL, REDIS_CHANNEL, parse_generation
from llmrelay.store.db import async_url

log = structlog.get_logger(__name__)

#: How the listening PostgreSQL session names itself in pg_stat_activity (operators, tests).
PG_APPLICATION_NAME = "llmrelay-config-listener"
CONNECT_TIMEOUT_S = 5.0


class ListenerState(StrEnum):
    OFF = "off"  # no transport (SQLite without Redis): polling alone
    CONNECTING = "connecting"  # the first connection is being made
    LISTENING = "listening"
    RECONNECTING = "reconnecting"  # the line dropped; retrying with backoff
    STOPPED = "stopped"


class ConnectionLost(ConnectionError):
    """The listening connection closed without raising anything itself."""


def listener_transport(database_url: str, redis_url: str | None) -> str | None:
    """Which transport a replica listens on: "redis", "postgres" or None (polling only)."""
    if redis_url:
        return "redis"
    if async_url(database_url).startswith("postgresql"):
        return "postgres"
    return None


class SignalListener:
    """Calls `on_signal(generation or None)` for each signal and after each (re)connection.

    `on_signal` runs on the event loop and must return at once (the refresher queues work).
    """

    def __init__(
        self,
        on_signal: Callable[[int | None], None],
        *,
        database_url: str,
        redis_url: str | None,
        on_state: Callable[[ListenerState], None] | None = None,
        backoff_min_s: float = 0.1,
        backoff_max_s: float = 5.0,
        ping_s: float = 10.0,
    ) -> None:
        self._on_signal = on_signal
        self._database_url = database_url
        self._redis_url = redis_url
        self._on_state = on_state
        self._backoff_min_s = backoff_min_s
        self._backoff_max_s = backoff_max_s
        self._ping_s = ping_s
        self.transport = listener_transport(database_url, redis_url)
        self.state = ListenerState.CONNECTING if self.transport else ListenerState.OFF
        self._since = time.monotonic()
        self.received = 0
        self.reconnects = 0
        self.last_error: str | None = None

    def describe(self) -> dict[str, object]:
        """For `/readyz`: where signals come from and whether the line is open."""
        report: dict[str, object] = {
            "transport": self.transport or "none",
            "state": self.state.value,
            "state_for_s": round(time.monotonic() - self._since, 3),
            "received": self.received,
            "reconnects": self.reconnects,
        }
        if self.state is not ListenerState.LISTENING and self.last_error:
            report["last_error"] = self.last_error
        return report

    async def run(self) -> None:
        """Listen until cancelled, reconnecting whenever the connection is lost."""
        if self.transport is None:
            return
        delay = self._backoff_min_s
        try:
            while True:
                try:
                    if self.transport == "redis":
                        await self._listen_redis()
                    else:
                        await self._listen_postgres()
                    raise ConnectionLost("the listening connection closed")
                except Exception as exc:  # noqa: BLE001 - any failure: reconnect, polling covers
                    self.last_error = f"{type(exc).__name__}: {exc}"
                if self.state is ListenerState.LISTENING:
                    delay = self._backoff_min_s  # it worked a while: retry quickly
                self._set_state(ListenerState.RECONNECTING)
                await asyncio.sleep(delay * random.uniform(0.8, 1.2))
                delay = min(delay * 2, self._backoff_max_s)
        finally:
            self._set_state(ListenerState.STOPPED)

    # -- transports -------------------------------------------------------------------

    async def _listen_redis(self) -> None:
        # Imported here: a process that does not use Redis never pays for importing it.
        from redis.asyncio import Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        assert self._redis_url is not None
        # No retries inside redis-py: a reconnection it made silently would skip the
        # catch-up refresh below, and the transition would go unlogged.
        client = Redis.from_url(
            self._redis_url,
            socket_connect_timeout=CONNECT_TIMEOUT_S,
            socket_keepalive=True,
            health_check_interval=self._ping_s,
            retry=Retry(NoBackoff(), 0),
        )
        try:
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(REDIS_CHANNEL)
                self._listening()
                while True:
                    message = await pubsub.get_message(
                        ignore_subscribe_messages=True, timeout=self._ping_s
                    )
                    if message is not None and message.get("type") == "message":
                        self._signal(message["data"])
            finally:
                with contextlib.suppress(Exception):
                    await cast(Any, pubsub).aclose()  # typed in some redis releases, not others
        finally:
            with contextlib.suppress(Exception):
                await client.aclose()

    async def _listen_postgres(self) -> None:
        import asyncpg

        dsn = make_url(async_url(self._database_url)).set(drivername="postgresql")
        conn: Any = await asyncpg.connect(
            dsn.render_as_string(hide_password=False),
            timeout=CONNECT_TIMEOUT_S,
            server_settings={"application_name": PG_APPLICATION_NAME},
        )
        closed = asyncio.Event()
        conn.add_termination_listener(lambda _conn: closed.set())
        try:
            await conn.add_listener(PG_CHANNEL, self._on_notify)
            self._listening()
            while not closed.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(closed.wait(), self._ping_s)
                if not closed.is_set():  # a cut network closes nothing: ask
                    await conn.execute("SELECT 1", timeout=CONNECT_TIMEOUT_S)
        finally:
            conn.terminate()

    def _on_notify(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        self._signal(payload)

    # -- state ------------------------------------------------------------------------

    def _listening(self) -> None:
        if self.state is ListenerState.RECONNECTING:
            self.reconnects += 1
        self._set_state(ListenerState.LISTENING)
        # Whatever was published while the line was down (or before it first opened) was
        # lost: one refresh now catches up.
        self._on_signal(None)

    def _signal(self, payload: str | bytes) -> None:
        self.received += 1
        self._on_signal(parse_generation(payload))

    def _set_state(self, state: ListenerState) -> None:
        if state is self.state:
            return
        previous, self.state = self.state, state
        self._since = time.monotonic()
        if state is ListenerState.LISTENING:
            log.info("config_signal_listening", transport=self.transport, previous=previous)
        elif state is ListenerState.RECONNECTING:
            log.warning(
                "config_signal_lost",
                transport=self.transport,
                previous=previous,
                error=self.last_error,
            )
        if self._on_state is not None:
            self._on_state(state)
