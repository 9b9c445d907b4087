"""The shared store on both databases and a real Redis: entries expire; a claim is written
once until released or expired; a Redis outage turns reads and writes to the database (one
log line), and what was written during it is still found once Redis is back; a binding
another replica wrote is read once and then answered from memory; sealed stored responses
open only with the secret."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.shared.bindings import ResponseHomes, SharedAffinity
from llmrelay.shared.conversations import SharedConversations
from llmrelay.shared.store import RETRY_REDIS_S, DatabaseEntries, FallbackEntries, RedisEntries
from llmrelay.shared.writer import WriteBehind
from llmrelay.store.crypto import Sealer
from tests.support.redis_server import RedisServer


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_database_entries_expire_and_are_replaced(engine: AsyncEngine) -> None:
    clock = Clock()
    entries = DatabaseEntries(engine, clock)
    await entries.put("a:k", "r1", 10)
    await entries.put("b:x", "open", 10)
    assert await entries.get("a:k") == "r1"
    await entries.put("a:k", "r2", 10)
    assert await entries.get("a:k") == "r2"
    assert await entries.live("b") == [("b:x", "open")]
    clock.now += 11
    assert await entries.get("a:k") is None and await entries.live("b") == []


async def test_a_database_claim_is_written_once_until_released_or_expired(
    engine: AsyncEngine,
) -> None:
    clock = Clock()
    entries = DatabaseEntries(engine, clock)
    assert await entries.claim("t:route", "replica-a", 10)
    assert not await entries.claim("t:route", "replica-b", 10)
    await entries.release("t:route", "replica-b")  # not b's: a's claim stays
    assert await entries.get("t:route") == "replica-a"
    await entries.release("t:route", "replica-a")
    assert await entries.claim("t:route", "replica-b", 10)
    clock.now += 11  # b's claim expired: it is replaced
    assert await entries.claim("t:route", "replica-a", 10)
    assert await entries.get("t:route") == "replica-a"


@pytest.mark.postgres
@pytest.mark.redis
async def test_a_redis_outage_turns_to_the_database_and_back(postgres_engine: AsyncEngine) -> None:
    redis = RedisServer().start()
    database = DatabaseEntries(postgres_engine)
    clock = Clock()
    entries = FallbackEntries(RedisEntries(redis.url), database, clock)
    try:
        await entries.put("r:before", "in-redis", 60)
        assert await entries.get("r:before") == "in-redis"
        assert await database.get("r:before") is None  # Redis held it
        redis.stop()
        await entries.put("r:during", "in-database", 60)
        assert entries.degraded
        assert await database.get("r:during") == "in-database"
        assert await entries.get("r:during") == "in-database"
        redis.start()
        await entries.put("r:paused", "in-database", 60)  # Redis not asked again yet
        assert entries.degraded and await database.get("r:paused") == "in-database"
        clock.now += RETRY_REDIS_S
        await entries.put("r:after", "in-redis", 60)
        assert not entries.degraded
        assert await database.get("r:after") is None
        # Written during the outage, missing in Redis: the database still answers.
        assert await entries.get("r:during") == "in-database"
    finally:
        await entries.close()
        redis.stop()


@pytest.mark.redis
async def test_a_binding_written_elsewhere_is_read_once_then_from_memory() -> None:
    redis = RedisServer().start()
    try:
        a_entries, b_entries = RedisEntries(redis.url), RedisEntries(redis.url)
        a_writer, b_writer = WriteBehind(a_entries), WriteBehind(b_entries)
        a, b = SharedAffinity(a_entries, a_writer), SharedAffinity(b_entries, b_writer)
        a.remember("m:s:1", "route-2", 3600)
        await a_writer.flush()
        assert await b.bound("m:s:1") == "route-2"
        await redis_flush(redis)
        assert await b.bound("m:s:1") == "route-2"  # from memory: Redis no longer has it
        assert await b.bound("m:s:unknown") is None
        homes = ResponseHomes(a_entries, a_writer)
        homes.remember("resp_1", "route-2", "project-1")
        await homes.written()
        assert await ResponseHomes(b_entries, b_writer).home("resp_1") == ("route-2", "project-1")
        for closing in (a_writer, b_writer, a_entries, b_entries):
            await closing.close()
    finally:
        redis.stop()


async def redis_flush(server: RedisServer) -> None:
    from redis.asyncio import Redis

    client = Redis.from_url(server.url)
    try:
        await client.flushdb()
    finally:
        await client.aclose()


@pytest.mark.redis
async def test_stored_responses_are_sealed_and_open_only_with_the_secret() -> None:
    redis = RedisServer().start()
    try:
        entries = RedisEntries(redis.url)
        writer = WriteBehind(entries)
        sealer = Sealer("shared-store-secret-0123456789abcdef")
        kept = SharedConversations(entries, writer, sealer)
        answer = {"id": "resp_x", "output": [{"type": "message", "content": "secret tea"}]}
        kept.keep("resp_x", ("project-1", answer, [{"role": "user", "content": "tea?"}]))
        await writer.flush()
        raw = await entries.get("s:resp_x")
        assert raw is not None and "tea" not in raw
        other = SharedConversations(entries, writer, sealer)  # another replica: no memory
        assert await other.get("resp_x") == (
            "project-1",
            answer,
            [{"role": "user", "content": "tea?"}],
        )
        stranger = SharedConversations(entries, writer, Sealer("another-secret-0123456789abcdef00"))
        with pytest.raises(Exception):  # noqa: B017 - the crypto layer's own error
            await stranger.get("resp_x")
        await writer.close()
        await entries.close()
    finally:
        redis.stop()
