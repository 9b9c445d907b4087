"""Limits shared by replicas through PostgreSQL when there is no Redis: two real `serve`
processes on one PostgreSQL database admit against the same counters (limits/postgres.py),
so a limit is not multiplied by the replicas; and with `LLMRELAY_LIMITS_ON_DATABASE=false`
each counts alone, as before (the test would fail against that)."""

from __future__ import annotations

import asyncio
from collections.abc import Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import httpx
import pytest

from llmrelay.database_setup import migrate_database
from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream
from tests.support.replicas import within

pytestmark = [pytest.mark.postgres, pytest.mark.e2e]

KEY_RPM = "pg-limits-rpm-0123456789"
KEY_CONCURRENT = "pg-limits-conc-0123456789"


def config(upstream: MockUpstream) -> str:
    return f"""
providers: [{{slug: up, type: openai_compatible, base_url: {upstream.base_url}}}]
models:
  - {{name: chat, routes: [{{provider: up, upstream_model: echo}}]}}
  - {{name: slow-long, routes: [{{provider: up, upstream_model: slow-8000}}]}}
projects:
  - name: p
    keys:
      - {{name: rpm, key: {KEY_RPM}, limits: {{rpm: 10}}}}
      - {{name: conc, key: {KEY_CONCURRENT}, limits: {{concurrency: 2}}}}
"""


def chat(gateway: GatewayProcess, key: str, model: str = "chat") -> httpx.Response:
    return httpx.post(
        f"{gateway.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
        timeout=60,
    )


def _pair(
    folder: Path, upstream: MockUpstream, url: str, env: dict[str, str]
) -> Generator[list[GatewayProcess]]:
    asyncio.run(migrate_database(url))
    replicas = []
    for name in ("a", "b"):
        (folder / name).mkdir()
        replicas.append(
            GatewayProcess(folder / name, config=config(upstream), env=env, database_url=url)
        )
    try:
        for replica in replicas:
            replica.start(timeout_s=240)  # a loaded machine: starts take minutes
        yield replicas
    finally:
        for replica in replicas:
            assert replica.stop() == 0, replica.logs()


@pytest.fixture
def replicas(tmp_path: Path, upstream: MockUpstream, pg_url: str) -> Iterator[list[GatewayProcess]]:
    yield from _pair(tmp_path, upstream, pg_url, {})


def test_rpm_10_is_10_across_two_replicas_without_redis(
    replicas: list[GatewayProcess], upstream: MockUpstream
) -> None:
    before = len(upstream.chat_requests())
    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda n: chat(replicas[n % 2], KEY_RPM), range(40)))
    statuses = [a.status_code for a in answers]
    assert statuses.count(200) == 10, statuses
    assert statuses.count(429) == 30, statuses
    assert len(upstream.chat_requests()) - before == 10
    refused = next(a for a in answers if a.status_code == 429)
    body = refused.json()
    assert body["error"]["code"] == "rpm_limit_exceeded"
    assert body["error"]["type"] == "rate_limit_error"
    assert set(body["error"]) >= {"message", "type", "code", "param"}
    assert body["request_id"] == refused.headers["x-request-id"]
    assert refused.headers["x-ratelimit-limit"] == "10"
    assert refused.headers["x-ratelimit-remaining"] == "0"
    assert 1 <= int(refused.headers["retry-after"]) <= 61
    # Both replicas served some: the one limit is shared, not split.
    assert {n % 2 for n, a in enumerate(answers) if a.status_code == 200} == {0, 1}
    served = next(a for a in answers if a.status_code == 200)
    assert "x-ratelimit-degraded" not in served.headers


def test_concurrency_is_shared_and_leases_come_back(
    replicas: list[GatewayProcess], upstream: MockUpstream
) -> None:
    before = len(upstream.chat_requests())
    with ThreadPoolExecutor(2) as pool:
        # One slow request in flight on each replica: the limit of 2 is taken.
        slow = [pool.submit(chat, replica, KEY_CONCURRENT, "slow-long") for replica in replicas]
        within(60, lambda: len(upstream.chat_requests()) - before >= 2)
        for replica in replicas:
            refused = chat(replica, KEY_CONCURRENT)
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["code"] == "concurrency_limit_exceeded"
        assert [f.result().status_code for f in slow] == [200, 200]
    # Every lease was given back: either replica serves again. A lease goes back when its
    # answer ends, written off the request path (docs/limits.md): the client may see the
    # end first (R18, under load, was refused once right after), so wait for the write.
    for replica in replicas:
        within(10, partial(_serves, replica))


def _serves(replica: GatewayProcess) -> bool:
    return chat(replica, KEY_CONCURRENT).status_code == 200


def test_without_the_database_limiter_each_replica_counts_alone(
    tmp_path: Path, upstream: MockUpstream, pg_url: str
) -> None:
    """What the issue reported, kept as the opt-out: 10 per replica."""
    pair = _pair(tmp_path, upstream, pg_url, {"LLMRELAY_LIMITS_ON_DATABASE": "false"})
    replicas = next(pair)
    try:
        answers = [chat(replicas[n % 2], KEY_RPM) for n in range(40)]
        assert [a.status_code for a in answers].count(200) == 20
    finally:
        pair.close()
