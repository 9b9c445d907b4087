"""A gateway on a managed-style Redis: TLS only (`rediss://`, the CA named in the URL) and a
password. Limits are kept in that Redis (not the local fallback) and the config signal
listens on it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from redis import Redis

from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream
from tests.support.redis_server import RedisServer
from tests.support.tls import make_certificates

pytestmark = pytest.mark.redis

KEY = "redis-tls-key-0123456789"


@pytest.fixture
def tls_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tls=make_certificates(tmp_path / "tls"), password="managed-pw").start()
    yield server
    server.stop()


def test_limits_and_config_signals_over_tls_with_a_password(
    tmp_path: Path, upstream: MockUpstream, tls_redis: RedisServer
) -> None:
    config = f"""
providers: [{{slug: up, type: openai_compatible, base_url: {upstream.base_url}}}]
models: [{{name: chat, routes: [{{provider: up, upstream_model: echo}}]}}]
projects: [{{name: p, keys: [{{name: k, key: {KEY}, limits: {{rpm: 2}}}}]}}]
"""
    gateway = GatewayProcess(
        tmp_path, config=config, env={"LLMRELAY_REDIS_URL": tls_redis.url}
    ).start()
    try:
        deadline = time.monotonic() + 10
        while True:
            signal = httpx.get(f"{gateway.url}/readyz").json()["config_signal"]
            if signal.get("state") == "listening" or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert signal["transport"] == "redis" and signal["state"] == "listening", signal
        answers = [
            httpx.post(
                f"{gateway.base_url}/chat/completions",
                headers={"Authorization": f"Bearer {KEY}"},
                json={"model": "chat", "messages": [{"role": "user", "content": "hi"}]},
                timeout=10,
            )
            for _ in range(3)
        ]
        assert [a.status_code for a in answers] == [200, 200, 429]
        assert all("x-ratelimit-degraded" not in a.headers for a in answers)
        redis = Redis.from_url(tls_redis.url)
        try:
            assert redis.dbsize() > 0  # the windows live in the TLS Redis
        finally:
            redis.close()
    finally:
        assert gateway.stop() == 0, gateway.logs()
