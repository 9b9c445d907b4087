"""Limits shared by replicas through Redis, and what happens when Redis goes away: two real
`serve` processes on one PostgreSQL database and a Redis server of the test's own, which the
test stops and starts again."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream
from tests.support.redis_server import RedisServer
from tests.support.zygote import run_llmrelay

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

KEY_SHARED = "redis-limits-shared-0123456789"
KEY_SPLIT = "redis-limits-split-0123456789"
KEY_OPEN = "redis-limits-open-0123456789"
KEY_FREE = "redis-limits-free-0123456789"
#: A provider resource's quota bucket (requests a minute), for the whole deployment.
POOL_RPM = 6


def config(upstream: MockUpstream) -> str:
    return f"""
providers:
  - {{slug: up, type: openai_compatible, base_url: {upstream.base_url}}}
  - slug: pool
    type: openai_compatible
    base_url: {upstream.base_url}
    resources: [{{name: only, api_key: pool-only-key, rpm: {POOL_RPM}}}]
models:
  - {{name: chat, routes: [{{provider: up, upstream_model: echo}}]}}
  - {{name: pooled, routes: [{{provider: pool, upstream_model: echo}}]}}
projects:
  - name: p
    keys:
      - {{name: shared, key: {KEY_SHARED}, limits: {{rpm: 50}}}}
      - {{name: split, key: {KEY_SPLIT}, limits: {{rpm: 10}}}}
      - {{name: open, key: {KEY_OPEN}, limits: {{rpm: 1000, concurrency: 100}}}}
      - {{name: free, key: {KEY_FREE}}}
"""


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()


def chat(
    gateway: GatewayProcess, key: str, client: httpx.Client | None = None, *, model: str = "chat"
) -> httpx.Response:
    post = client.post if client is not None else httpx.post
    return post(
        f"{gateway.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
        timeout=10,
    )


@contextlib.contextmanager
def two_replicas(
    tmp_path: Path, upstream: MockUpstream, redis_server: RedisServer, pg_url: str
) -> Iterator[list[GatewayProcess]]:
    """Two `serve` processes on one PostgreSQL database and the test's Redis; each must
    stop cleanly (exit 0)."""
    _migrate(pg_url)
    env = {"LLMRELAY_REDIS_URL": redis_server.url}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    replicas = [
        GatewayProcess(tmp_path / name, config=config(upstream), env=env, database_url=pg_url)
        for name in ("a", "b")
    ]
    for replica in replicas:
        replica.start()
    try:
        yield replicas
    finally:
        for replica in replicas:
            assert replica.stop() == 0, replica.logs()


def _migrate(url: str) -> None:
    done = run_llmrelay(
        ["migrate"],
        env={**GatewayProcess(Path("/tmp")).env, "LLMRELAY_DATABASE_URL": url},
    )
    assert done.returncode == 0, done.stderr


def test_two_replicas_share_one_rpm_exactly_and_split_it_when_redis_fails(
    tmp_path: Path, upstream: MockUpstream, redis_server: RedisServer, pg_url: str
) -> None:
    with two_replicas(tmp_path, upstream, redis_server, pg_url) as replicas:
        before = len(upstream.chat_requests())
        with ThreadPoolExecutor(50) as pool:
            answers = list(pool.map(lambda n: chat(replicas[n % 2], KEY_SHARED), range(200)))
        statuses = [a.status_code for a in answers]
        assert statuses.count(200) == 50
        assert statuses.count(429) == 150
        assert len(upstream.chat_requests()) - before == 50
        # Both replicas admitted some: the limit is shared, not per process.
        served = {n % 2 for n, a in enumerate(answers) if a.status_code == 200}
        assert served == {0, 1}

        # Redis goes away: each replica keeps 1/2 of the limit (it saw two alive).
        _until(
            lambda: "llmrelay_limits_replicas 2.0" in httpx.get(f"{replicas[0].url}/metrics").text
        )
        redis_server.stop()
        split = [chat(replicas[0], KEY_SPLIT) for _ in range(10)]
        assert [a.status_code for a in split].count(200) == 5
        assert all(a.headers.get("x-ratelimit-degraded") == "true" for a in split[:5])


def test_a_resources_quota_holds_across_replicas(
    tmp_path: Path, upstream: MockUpstream, redis_server: RedisServer, pg_url: str
) -> None:
    """A resource's rpm bucket is kept in each process: once the replicas see each other
    (the limiter's heartbeat), each takes its half of the quota, so the two together serve
    at most POOL_RPM a minute (docs/configuration.md, "Provider resources")."""
    with two_replicas(tmp_path, upstream, redis_server, pg_url) as replicas:
        for replica in replicas:
            _until(
                lambda r=replica: (
                    "llmrelay_limits_replicas 2.0" in httpx.get(f"{r.url}/metrics").text
                ),
                60,
            )
        # One minute's bucket for the whole burst: not across the turn of a minute.
        while time.time() % 60 > 50:
            time.sleep(0.5)
        answers = [chat(replicas[n % 2], KEY_FREE, model="pooled") for n in range(4 * POOL_RPM)]
        served = [n % 2 for n, a in enumerate(answers) if a.status_code == 200]
        assert len(served) == POOL_RPM, [a.status_code for a in answers]
        assert served.count(0) == served.count(1) == POOL_RPM // 2
        refused = [a for a in answers if a.status_code != 200]
        assert {(a.status_code, a.json()["error"]["code"]) for a in refused} == {
            (503, "resources_exhausted")
        }
        assert all(0 < int(a.headers["retry-after"]) <= 60 for a in refused)


def _until(check: object, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_fail_open_serves_degraded_while_redis_is_down_then_recovers(
    tmp_path: Path, upstream: MockUpstream, redis_server: RedisServer
) -> None:
    env = {"LLMRELAY_REDIS_URL": redis_server.url}
    gateway = GatewayProcess(tmp_path, config=config(upstream), env=env).start()
    try:
        healthy = chat(gateway, KEY_OPEN)
        assert healthy.status_code == 200
        assert "x-ratelimit-degraded" not in healthy.headers
        redis_server.stop()
        degraded = chat(gateway, KEY_OPEN)
        assert degraded.status_code == 200
        assert degraded.headers["x-ratelimit-degraded"] == "true"
        assert chat(gateway, KEY_OPEN).headers["x-ratelimit-degraded"] == "true"
        metrics = httpx.get(f"{gateway.url}/metrics").text
        assert "llmrelay_limits_degraded 1.0" in metrics
        assert 'llmrelay_limits_degraded_transitions_total{to="degraded"} 1.0' in metrics
        redis_server.start()
        _until(lambda: "x-ratelimit-degraded" not in chat(gateway, KEY_OPEN).headers)
        metrics = httpx.get(f"{gateway.url}/metrics").text
        assert "llmrelay_limits_degraded 0.0" in metrics
        assert 'llmrelay_limits_degraded_transitions_total{to="shared"} 1.0' in metrics
    finally:
        assert gateway.stop() == 0, gateway.logs()
    assert gateway.logs().count("limits_redis_unreachable") == 1  # logged once per transition


def test_fail_closed_answers_503_while_redis_is_down_then_recovers(
    tmp_path: Path, upstream: MockUpstream, redis_server: RedisServer
) -> None:
    env = {
        "LLMRELAY_REDIS_URL": redis_server.url,
        "LLMRELAY_LIMITS_ON_REDIS_FAILURE": "fail_closed",
    }
    gateway = GatewayProcess(tmp_path, config=config(upstream), env=env).start()
    try:
        assert chat(gateway, KEY_OPEN).status_code == 200
        redis_server.stop()
        refused = chat(gateway, KEY_OPEN)
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "limits_unavailable"
        assert refused.headers["retry-after"] == "1"
        assert chat(gateway, KEY_FREE).status_code == 200  # no limits: Redis not needed
        redis_server.start()
        _until(lambda: chat(gateway, KEY_OPEN).status_code == 200)
    finally:
        assert gateway.stop() == 0, gateway.logs()
