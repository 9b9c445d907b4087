"""The limiter's Redis client against the real Redis (and against servers that misbehave):
pipelined answers reach their own callers, errors stay per call, and a dead or silent
server fails every pending call promptly instead of leaving it waiting."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis

from llmrelay.limits.resp import (
    RespClient,
    RespConnectionError,
    RespError,
    Script,
    pack,
    pack_args,
    parse_url,
)
from tests.conftest import need_redis
from tests.support.ports import free_port
from tests.support.redis_server import RedisServer
from tests.support.services import REDIS_URL
from tests.support.silent_server import silent_server
from tests.support.tls import make_certificates

pytestmark = pytest.mark.redis


@pytest.fixture
async def client() -> AsyncIterator[RespClient]:
    need_redis()
    client = RespClient(REDIS_URL, timeout_s=2.0)
    yield client
    await client.close()


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    value = f"test:resp:{uuid.uuid4().hex}:"
    yield value
    raw: Redis = Redis.from_url(REDIS_URL)
    keys = [k async for k in raw.scan_iter(match=f"{value}*")]
    if keys:
        await raw.delete(*keys)
    await raw.aclose()


async def test_concurrent_calls_each_get_their_own_answer(client: RespClient, prefix: str) -> None:
    async def one(i: int) -> tuple[int, bytes]:
        incremented = await client.call(b"INCRBY", f"{prefix}{i}", i)
        return incremented, await client.call(b"GET", f"{prefix}{i}")

    results = await asyncio.gather(*(one(i) for i in range(500)))
    assert results == [(i, str(i).encode()) for i in range(500)]
    ids = await asyncio.gather(*(client.call(b"CLIENT", b"ID") for _ in range(50)))
    assert len(set(ids)) == 1  # one connection carried them all


async def test_replies_keep_their_types(client: RespClient, prefix: str) -> None:
    assert await client.call(b"SET", f"{prefix}a", 1.5) == b"OK"
    assert await client.call(b"MGET", f"{prefix}a", f"{prefix}missing") == [b"1.5", None]
    assert await client.call(b"INCRBYFLOAT", f"{prefix}a", 0.25) == b"1.75"
    assert await client.call(b"RPUSH", f"{prefix}l", "é", b"\x00\xff") == 2
    assert await client.call(b"LRANGE", f"{prefix}l", 0, -1) == ["é".encode(), b"\x00\xff"]
    assert await client.ping()


async def test_an_error_reply_fails_its_call_only(client: RespClient, prefix: str) -> None:
    await client.call(b"SET", f"{prefix}text", b"not a number")
    results = await asyncio.gather(
        client.call(b"INCR", f"{prefix}n"),
        client.call(b"INCR", f"{prefix}text"),
        client.call(b"NOSUCHCOMMAND"),
        client.call(b"INCR", f"{prefix}n"),
        return_exceptions=True,
    )
    assert results[0] == 1
    assert isinstance(results[1], RespError)
    assert "not an integer" in str(results[1])
    assert isinstance(results[2], RespError)
    assert results[3] == 2
    assert await client.call(b"GET", f"{prefix}n") == b"2"


async def test_a_script_is_loaded_again_after_script_flush(client: RespClient, prefix: str) -> None:
    script = Script(client, f"-- {uuid.uuid4().hex}\nreturn {{KEYS[1], ARGV[1], #ARGV}}")
    key = f"{prefix}k"
    assert await script([key], ["x", 2]) == [key.encode(), b"x", 2]
    await client.call(b"SCRIPT", b"FLUSH")
    assert await client.call(b"SCRIPT", b"EXISTS", script.sha) == [0]
    assert await asyncio.gather(*(script([key], [i]) for i in range(20))) == [
        [key.encode(), str(i).encode(), 1] for i in range(20)
    ]
    command = script.command(1, 2, pack_args((key, "y")))
    assert command == pack((b"EVALSHA", script.sha, 1, key, "y"))
    assert await script.run(command) == [key.encode(), b"y", 1]
    with pytest.raises(RespError, match="nonexistent global"):
        await Script(client, "return nothing()")([], [])


async def test_a_silent_server_fails_pending_calls_within_the_timeout() -> None:
    async with silent_server() as (url, accepted):
        client = RespClient(url, timeout_s=0.2)
        try:
            started = time.monotonic()
            results = await asyncio.gather(
                *(client.call(b"GET", f"k{i}") for i in range(10)), return_exceptions=True
            )
            elapsed = time.monotonic() - started
            assert all(isinstance(r, RespConnectionError) for r in results), results
            assert 0.2 <= elapsed < 10  # at the timeout: the silent server never answers
            with pytest.raises(RespConnectionError, match=r"within 0\.2 s"):
                await client.call(b"PING")  # a new connection, just as silent
            assert len(accepted) == 2
        finally:
            await client.close()


async def test_connection_refused_fails_promptly() -> None:
    client = RespClient(f"redis://127.0.0.1:{free_port()}/0", timeout_s=5.0)
    started = time.monotonic()
    results = await asyncio.gather(
        *(client.call(b"PING") for _ in range(5)), return_exceptions=True
    )
    assert all(isinstance(r, RespConnectionError) for r in results), results
    with pytest.raises(RespConnectionError, match="cannot connect"):
        await client.ping()
    assert time.monotonic() - started < 1.0
    await client.close()


async def test_a_killed_connection_fails_pending_calls_and_the_next_call_reconnects(
    client: RespClient, prefix: str
) -> None:
    first = await client.call(b"CLIENT", b"ID")
    blocked = [asyncio.ensure_future(client.call(b"BLPOP", f"{prefix}empty", 60)) for _ in "ab"]
    killer = RespClient(REDIS_URL)
    # Kill the connection once Redis has the first BLPOP (the second is queued behind it).
    while b"cmd=blpop" not in await killer.call(b"CLIENT", b"LIST", b"ID", first):  # noqa: ASYNC110 - Redis's state, not ours
        await asyncio.sleep(0.01)
    assert await killer.call(b"CLIENT", b"KILL", b"ID", first) == 1
    await killer.close()
    started = time.monotonic()
    for pending in blocked:
        with pytest.raises(RespConnectionError):
            await pending
    assert time.monotonic() - started < 30  # at the kill, not at the BLPOPs' minute
    second = await client.call(b"CLIENT", b"ID")
    assert second != first
    assert await client.call(b"INCR", f"{prefix}n") == 1


async def test_a_cancelled_call_leaves_the_others_their_answers(
    client: RespClient, prefix: str
) -> None:
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(client.call(b"BLPOP", f"{prefix}empty", 1), 0.05)
    assert await client.call(b"SET", f"{prefix}a", "1") == b"OK"  # after the BLPOP's reply
    assert await client.call(b"GET", f"{prefix}a") == b"1"


async def test_close_fails_pending_and_later_calls(client: RespClient, prefix: str) -> None:
    pending = asyncio.ensure_future(client.call(b"BLPOP", f"{prefix}empty", 5))
    await asyncio.sleep(0.05)
    await client.close()
    with pytest.raises(RespConnectionError):
        await pending
    with pytest.raises(RespConnectionError, match="closed"):
        await client.call(b"PING")


async def test_the_url_selects_the_database(prefix: str) -> None:
    need_redis()
    client = RespClient("redis://127.0.0.1:6379/3")
    raw: Redis = Redis.from_url("redis://127.0.0.1:6379/3")
    try:
        await client.call(b"SET", f"{prefix}db", "three", b"EX", 60)
        assert await raw.get(f"{prefix}db") == b"three"
    finally:
        await raw.delete(f"{prefix}db")
        await raw.aclose()
        await client.close()


async def test_a_refused_password_is_a_connection_error() -> None:
    need_redis()
    client = RespClient("redis://:wrong@127.0.0.1:6379/0")
    with pytest.raises(RespConnectionError, match="refused"):
        await client.ping()
    await client.close()


def test_urls() -> None:
    address = parse_url("redis://user:p%40ss@redis.internal:6380/2")
    assert (address.host, address.port, address.db) == ("redis.internal", 6380, 2)
    assert (address.username, address.password) == ("user", "p@ss")
    assert "p@ss" not in repr(address)
    bare = parse_url("redis://127.0.0.1")
    assert (bare.port, bare.db, bare.username, bare.password) == (6379, 0, None, None)
    assert parse_url("redis://:secret@h:1/0").password == "secret"
    assert not bare.tls
    secure = parse_url("rediss://:pw@cache.example.com:6380/1?ssl_ca_certs=/etc/ca.pem")
    assert (secure.tls, secure.ca_file, secure.verify, secure.db) == (True, "/etc/ca.pem", True, 1)
    assert not parse_url("rediss://h/0?ssl_cert_reqs=none").verify
    with pytest.raises(ValueError, match="scheme"):
        parse_url("http://h:1/0")
    with pytest.raises(ValueError, match="ssl_cert_reqs"):
        parse_url("rediss://h/0?ssl_cert_reqs=maybe")
    with pytest.raises(ValueError, match="cannot read"):
        RespClient("rediss://h/0?ssl_ca_certs=/nonexistent/ca.pem")


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis server that speaks TLS only and wants a password, as managed services do."""
    certificates = make_certificates(tmp_path_factory.mktemp("redis-tls"))
    server = RedisServer(tls=certificates, password="s3cret p@ss").start()
    yield server
    server.stop()


async def test_tls_with_a_password(tls_redis: RedisServer) -> None:
    client = RespClient(tls_redis.url, timeout_s=2.0)
    try:
        assert await client.ping()
        assert await client.call(b"SET", b"k", b"v") == b"OK"
        assert await client.call(b"GET", b"k") == b"v"
    finally:
        await client.close()
    # The same URL serves redis-py (the config signals' connections).
    other = Redis.from_url(tls_redis.url)
    try:
        assert await other.get("k") == b"v"
    finally:
        await other.aclose()


async def test_tls_refusals(tls_redis: RedisServer) -> None:
    assert tls_redis.tls is not None
    wrong = tls_redis.url.replace("s3cret%20p%40ss", "wrong")
    unverified = tls_redis.url.split("?")[0]  # the system's CAs do not know the test CA
    plain = f"redis://:x@127.0.0.1:{tls_redis.port}/0"
    for url, reason in ((wrong, "refused"), (unverified, "CERTIFICATE_VERIFY_FAILED")):
        client = RespClient(url, timeout_s=2.0)
        with pytest.raises(RespConnectionError, match=reason):
            await client.ping()
        await client.close()
    client = RespClient(plain, timeout_s=1.0)
    with pytest.raises(RespConnectionError):
        await client.ping()
    await client.close()
    insecure = RespClient(unverified + "?ssl_cert_reqs=none", timeout_s=2.0)
    try:
        assert await insecure.ping()
    finally:
        await insecure.close()
