"""Live config reload across replicas: real `serve` processes on one PostgreSQL database,
with Redis pub/sub or PostgreSQL NOTIFY carrying the change signal.

Every replica polls only once a minute here (LLMRELAY_SNAPSHOT_POLL_S=60), so a change seen
within 2 s can only have come by the signal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from llmrelay.database_setup import migrate_database
from llmrelay.snapshot.listener import PG_APPLICATION_NAME
from tests.support.mock_upstream import MockUpstream
from tests.support.redis_server import RedisServer
from tests.support.replicas import Cluster, chat, ready, within

pytestmark = pytest.mark.postgres

SECRET = "live-reload-secret-key-0123456789abcdef"
WRONG_SECRET = "another-secret-key-nobody-else-has-0123"
KEY_KEEP = "live-reload-keep-0123456789"
KEY_REVOKE = "live-reload-revoke-0123456789"
PROPAGATION_S = 2.0


def config(upstream: MockUpstream, *, revoked: bool = False, extra_model: str = "") -> str:
    model = f"\n  - {{name: {extra_model}, routes: [{{provider: up, upstream_model: echo}}]}}"
    return f"""
providers:
  - {{slug: up, type: openai_compatible, base_url: {upstream.base_url}, api_key: sk-up-0001}}
models:
  - {{name: chat, routes: [{{provider: up, upstream_model: echo}}]}}{model if extra_model else ""}
projects:
  - name: p
    keys:
      - {{name: keep, key: {KEY_KEEP}}}
      - {{name: revoke, key: {KEY_REVOKE}, disabled: {str(revoked).lower()}}}
"""


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture
def cluster_factory(tmp_path: Path, pg_url: str) -> Iterator[Callable[[str | None], Cluster]]:
    made: list[Cluster] = []

    def make(redis_url: str | None) -> Cluster:
        asyncio.run(migrate_database(pg_url))  # in this process: a second less per test
        cluster = Cluster(tmp_path, pg_url, redis_url, secret=SECRET)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.stop()


def signal_url(request: pytest.FixtureRequest, transport: str) -> str | None:
    """LLMRELAY_REDIS_URL for the transport under test (a Redis server of the test's own)."""
    if transport == "postgres":
        return None
    server: RedisServer = request.getfixturevalue("redis_server")
    return server.url


@pytest.mark.parametrize("transport", [pytest.param("redis", marks=pytest.mark.redis), "postgres"])
def test_a_change_reaches_both_replicas_by_signal_within_2s(
    request: pytest.FixtureRequest,
    transport: str,
    cluster_factory: Callable[[str | None], Cluster],
    upstream: MockUpstream,
) -> None:
    cluster = cluster_factory(signal_url(request, transport))
    a = cluster.start("a", config(upstream))  # applied by `serve --config` on its way up
    b = cluster.start("b")
    for replica in (a, b):
        assert chat(replica, KEY_REVOKE) == 200
        assert chat(replica, KEY_KEEP, "chat-new") == 404
        signal = ready(replica)["config_signal"]
        assert (signal["transport"], signal["state"]) == (transport, "listening")

    # A key revoked and a model added, by `llmrelay apply` in a third process.
    generation = cluster.apply(config(upstream, revoked=True, extra_model="chat-new"))
    within(PROPAGATION_S, lambda: all(chat(r, KEY_REVOKE) == 401 for r in (a, b)))
    for replica in (a, b):
        assert chat(replica, KEY_KEEP, "chat-new") == 200
        assert chat(replica, KEY_KEEP) == 200
        body = ready(replica)
        assert body["snapshot_generation"] == generation
        assert body["config_signal"]["received"] >= 1

    # Another replica starting with `serve --config` applies a change on its way up.
    # (It publishes before it listens itself: counted from the moment it is ready, the
    # others must already have it or be about to.)
    c = cluster.start("c", config(upstream, revoked=True, extra_model="chat-third"))
    within(PROPAGATION_S, lambda: all(chat(r, KEY_KEEP, "chat-third") == 200 for r in (a, b)))
    assert ready(a)["snapshot_generation"] == ready(c)["snapshot_generation"] == generation + 1


@pytest.mark.redis
def test_a_generation_that_fails_to_build_keeps_the_last_good_snapshot_on_both(
    redis_server: RedisServer,
    cluster_factory: Callable[[str | None], Cluster],
    upstream: MockUpstream,
) -> None:
    cluster = cluster_factory(redis_server.url)
    a = cluster.start("a", config(upstream))
    b = cluster.start("b")
    good = ready(a)["snapshot_generation"]

    # Applied by a process with the wrong LLMRELAY_SECRET_KEY: the provider's credential is
    # sealed under a key the replicas do not have, so no replica can build the generation.
    bad = cluster.apply(config(upstream, revoked=True, extra_model="chat-new"), secret=WRONG_SECRET)
    assert bad == good + 1
    within(PROPAGATION_S, lambda: all("snapshot_last_error" in ready(r) for r in (a, b)))
    for replica in (a, b):
        body = ready(replica)  # still 200: the database answers and a snapshot is loaded
        assert body["snapshot_generation"] == good
        assert body["snapshot_failed_generation"] == bad
        assert "LLMRELAY_SECRET_KEY" in body["snapshot_last_error"]
        metrics = httpx.get(f"{replica.url}/metrics").text
        assert "llmrelay_snapshot_build_failures_total 1.0" in metrics
        # Nothing of the bad generation is in use: the revoked key still works, the new
        # model is unknown, and requests keep being served.
        assert chat(replica, KEY_REVOKE) == 200
        assert chat(replica, KEY_KEEP, "chat-new") == 404
        assert chat(replica, KEY_KEEP) == 200
        assert "snapshot_build_failed" in replica.logs()

    # The same file with the right key re-seals the credential: both recover.
    fixed = cluster.apply(config(upstream, revoked=True, extra_model="chat-new"))
    within(PROPAGATION_S, lambda: all(chat(r, KEY_REVOKE) == 401 for r in (a, b)))
    for replica in (a, b):
        body = ready(replica)
        assert body["snapshot_generation"] == fixed
        assert "snapshot_last_error" not in body
        assert chat(replica, KEY_KEEP, "chat-new") == 200
        metrics = httpx.get(f"{replica.url}/metrics").text
        assert "llmrelay_snapshot_build_failures_total 1.0" in metrics  # counted once


@pytest.mark.redis
def test_the_listener_comes_back_after_redis_restarts(
    redis_server: RedisServer,
    cluster_factory: Callable[[str | None], Cluster],
    upstream: MockUpstream,
) -> None:
    cluster = cluster_factory(redis_server.url)
    a = cluster.start("a", config(upstream))
    redis_server.stop()
    within(10, lambda: ready(a)["config_signal"]["state"] == "reconnecting")
    metrics = httpx.get(f"{a.url}/metrics").text
    assert "llmrelay_config_signal_listening 0.0" in metrics
    redis_server.start()
    within(10, lambda: ready(a)["config_signal"]["state"] == "listening")
    assert ready(a)["config_signal"]["reconnects"] == 1

    cluster.apply(config(upstream, revoked=True))
    within(PROPAGATION_S, lambda: chat(a, KEY_REVOKE) == 401)
    assert "llmrelay_config_signal_listening 1.0" in httpx.get(f"{a.url}/metrics").text
    assert a.logs().count("config_signal_lost") == 1  # once per transition, not per attempt


def test_the_listener_comes_back_after_its_postgres_connection_is_killed(
    cluster_factory: Callable[[str | None], Cluster],
    upstream: MockUpstream,
    pg_url: str,
) -> None:
    cluster = cluster_factory(None)
    a = cluster.start("a", config(upstream))
    assert asyncio.run(_kill_listener(pg_url)) == 1
    within(10, lambda: ready(a)["config_signal"]["reconnects"] == 1)
    assert ready(a)["config_signal"]["state"] == "listening"

    cluster.apply(config(upstream, revoked=True))
    within(PROPAGATION_S, lambda: chat(a, KEY_REVOKE) == 401)
    assert a.logs().count("config_signal_lost") == 1


async def _kill_listener(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        killed: int = await conn.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = $1 AND datname = current_database()",
            PG_APPLICATION_NAME,
        )
        return killed
    finally:
        await conn.close()
