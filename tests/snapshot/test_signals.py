"""Publishing and receiving config change signals over the real Redis and PostgreSQL, and the
listener finding its way back after the line dropped."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.snapshot.listener import (
    PG_APPLICATION_NAME,
    ListenerState,
    SignalListener,
    listener_transport,
)
from llmrelay.snapshot.signals import ConfigPublisher, parse_generation, publish_generation
from llmrelay.store.db import create_engine
from tests.conftest import need_redis
from tests.support.databases import sqlite_url
from tests.support.ports import free_port
from tests.support.redis_server import RedisServer
from tests.support.services import REDIS_URL


async def until(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


class Running:
    """A listener task and what it received."""

    def __init__(self, database_url: str, redis_url: str | None) -> None:
        self.got: list[int | None] = []
        self.states: list[ListenerState] = []
        self.listener = SignalListener(
            self.got.append,
            database_url=database_url,
            redis_url=redis_url,
            on_state=self.states.append,
            backoff_min_s=0.05,
            backoff_max_s=0.2,
            ping_s=0.5,
        )
        self.task = asyncio.create_task(self.listener.run())

    async def listening(self) -> None:
        await until(lambda: self.listener.state is ListenerState.LISTENING)

    async def stop(self) -> None:
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task
        assert self.listener.state is ListenerState.STOPPED


@pytest.fixture
async def sqlite_engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(sqlite_url(tmp_path))
    yield engine
    await engine.dispose()


@pytest.fixture
def private_redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()


def test_the_transport_follows_the_settings() -> None:
    assert listener_transport("sqlite:///x.db", None) is None
    assert listener_transport("postgresql://u@h/db", None) == "postgres"
    assert listener_transport("postgres://u@h/db", "redis://h") == "redis"
    assert listener_transport("sqlite:///x.db", "redis://h") == "redis"
    assert parse_generation(b"42") == 42 and parse_generation("x") is None


@pytest.mark.postgres
async def test_postgres_notify_reaches_the_listener_and_survives_a_killed_backend(
    postgres_engine: AsyncEngine, postgres_url: str
) -> None:
    running = Running(postgres_url, None)
    try:
        await running.listening()
        assert running.got == [None]  # connecting asks for one catch-up refresh
        await publish_generation(7, engine=postgres_engine, redis_url=None)
        await until(lambda: 7 in running.got)

        async with postgres_engine.connect() as conn:
            killed = await conn.scalar(
                text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE application_name = :name AND datname = current_database()"
                ),
                {"name": PG_APPLICATION_NAME},
            )
        assert killed == 1
        await until(lambda: running.listener.reconnects == 1)
        await running.listening()
        assert running.states == [
            ListenerState.LISTENING,
            ListenerState.RECONNECTING,
            ListenerState.LISTENING,
        ]
        assert running.got == [None, 7, None]  # and a catch-up after the reconnection
        await publish_generation(8, engine=postgres_engine, redis_url=None)
        await until(lambda: 8 in running.got)
        assert running.listener.describe()["received"] == 2
    finally:
        await running.stop()


@pytest.mark.redis
async def test_redis_publish_reaches_the_listener_and_survives_a_restart(
    private_redis: RedisServer, sqlite_engine: AsyncEngine, tmp_path: Path
) -> None:
    running = Running(sqlite_url(tmp_path), private_redis.url)
    publisher = ConfigPublisher(engine=sqlite_engine, redis_url=private_redis.url)
    try:
        await running.listening()
        assert publisher.transports == ("redis",)
        await publisher.publish(3)
        await until(lambda: 3 in running.got)

        private_redis.stop()
        await until(lambda: running.listener.state is ListenerState.RECONNECTING)
        await publisher.publish(4)  # lost, and says so without raising
        assert publisher.publish_failures == 1
        description = running.listener.describe()
        assert description["state"] == "reconnecting" and "last_error" in description
        await asyncio.sleep(0.5)  # a few failed attempts: one transition, not one per try
        assert running.states.count(ListenerState.RECONNECTING) == 1

        private_redis.start()
        await until(lambda: running.listener.reconnects == 1)
        assert running.got[-1] is None  # the catch-up for what was lost while away
        await publisher.publish(5)
        await until(lambda: 5 in running.got)
        assert 4 not in running.got
    finally:
        await publisher.close()
        await running.stop()


@pytest.mark.redis
@pytest.mark.postgres
async def test_a_publisher_sends_on_every_transport_it_has(
    postgres_engine: AsyncEngine, postgres_url: str
) -> None:
    need_redis()
    by_redis = Running(postgres_url, REDIS_URL)
    by_postgres = Running(postgres_url, None)
    try:
        await by_redis.listening()
        await by_postgres.listening()
        publisher = ConfigPublisher(engine=postgres_engine, redis_url=REDIS_URL)
        assert publisher.transports == ("redis", "postgres")
        generation = 1_000_000 + free_port()  # the shared Redis: not another test's number
        await publisher.publish(generation)
        await publisher.close()
        await until(lambda: generation in by_redis.got and generation in by_postgres.got)
    finally:
        await by_redis.stop()
        await by_postgres.stop()


async def test_sqlite_without_redis_has_no_transport(
    sqlite_engine: AsyncEngine, tmp_path: Path
) -> None:
    running = Running(sqlite_url(tmp_path), None)
    await running.task  # returns at once: polling alone
    assert running.listener.describe()["transport"] == "none"
    assert running.listener.state is ListenerState.OFF  # what /readyz shows
    publisher = ConfigPublisher(engine=sqlite_engine, redis_url=None)
    assert publisher.transports == ()
    await publisher.publish(1)
    assert publisher.publish_failures == 0


async def test_a_failed_publish_is_counted_and_never_raised(sqlite_engine: AsyncEngine) -> None:
    failed: list[str] = []
    dead = f"redis://127.0.0.1:{free_port()}/0"
    publisher = ConfigPublisher(engine=sqlite_engine, redis_url=dead, on_failure=failed.append)
    await publisher.publish(1)
    await publisher.publish(2)
    await publisher.close()
    assert publisher.publish_failures == 2
    assert failed == ["redis", "redis"]
