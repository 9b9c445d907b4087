"""Two `llmrelay serve` replicas behind nginx (deploy/nginx.conf as shipped), on one
PostgreSQL database and one Redis, every request through the balancer: a key's rpm shared
exactly, streams relayed event by event, a change made through the admin API (of whichever
replica nginx picked) served by both within seconds, background jobs run exactly once by the
replicas' in-process runners; then Redis goes away: limits degrade to each replica's share
(fail_open), config changes still arrive (by polling), jobs still run.

One cluster for the module (it is expensive). The test that stops Redis starts it again on
the same port and waits until both replicas use it once more, so the tests hold in any order."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import orjson
import pytest

from llmrelay.database_setup import migrate_database
from tests.conftest import need_postgres
from tests.support.databases import create_postgres_database, drop_postgres_database
from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream
from tests.support.nginx_server import NginxServer
from tests.support.redis_server import RedisServer
from tests.support.replicas import Cluster, within
from tests.support.webhook_receiver import WebhookReceiver

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.e2e]

SECRET = "replicas-nginx-secret-0123456789abcdef"
ADMIN = "replicas-nginx-admin-0123456789abcdef"
KEY = "replicas-nginx-key-0123456789"
KEY_LIMITED = "replicas-nginx-limited-0123456789"
#: Limited too, far above what any test sends: its answers say whether limits are degraded.
KEY_WATCH = "replicas-nginx-watch-0123456789"
RPM = 30
#: Each replica polls the config generation this often: the backstop while Redis is down.
POLL_S = 3.0


def _config(upstream: MockUpstream) -> str:
    return f"""
providers: [{{slug: up, type: openai_compatible, base_url: {upstream.base_url}}}]
models:
  - {{name: chat, routes: [{{provider: up, upstream_model: echo}}]}}
  - {{name: paced, routes: [{{provider: up, upstream_model: paced-300}}]}}
projects:
  - name: p
    keys:
      - {{name: k, key: {KEY}}}
      - {{name: limited, key: {KEY_LIMITED}, limits: {{rpm: {RPM}}}}}
      - {{name: watch, key: {KEY_WATCH}, limits: {{rpm: 100000}}}}
"""


@dataclass
class Balanced:
    """The replicas, nginx in front, and what the tests need to reach."""

    replicas: list[GatewayProcess]
    nginx: NginxServer
    redis: RedisServer
    receiver: WebhookReceiver
    database_url: str
    admin: httpx.Client

    def chat(self, key: str = KEY, model: str = "chat", base: str | None = None) -> httpx.Response:
        return httpx.post(
            f"{base or self.nginx.url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {key}"},
            json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
            timeout=10,
        )

    def served_by_each(self, key: str) -> bool:
        """Both replicas (asked directly) serve this key."""
        return all(self.chat(key, base=replica.url).status_code == 200 for replica in self.replicas)

    def new_key(self, name: str) -> str:
        project = self.admin.get("/projects", params={"name": "p"}).json()["data"][0]
        created = self.admin.post(f"/projects/{project['id']}/keys", json={"name": name})
        assert created.status_code == 201, created.text
        return str(created.json()["key"])


@pytest.fixture(scope="module")
def balanced(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Balanced]:
    need_postgres()
    redis = RedisServer().start()
    receiver = WebhookReceiver().start()
    url = asyncio.run(create_postgres_database())
    cluster = Cluster(
        tmp_path_factory.mktemp("replicas-nginx"),
        url,
        redis.url,
        secret=SECRET,
        env={
            "LLMRELAY_ADMIN_TOKEN": ADMIN,
            "LLMRELAY_SNAPSHOT_POLL_S": str(POLL_S),
            "LLMRELAY_TRUSTED_PROXIES": "127.0.0.1/32",
            "LLMRELAY_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1",
            "LLMRELAY_WEBHOOK_ALLOW_LOOPBACK": "true",
            "LLMRELAY_JOBS_POLL_S": "0.2",
            "LLMRELAY_JOBS_IDLE_POLL_S": "0.5",
        },
    )
    nginx: NginxServer | None = None
    try:
        asyncio.run(migrate_database(url))
        with ThreadPoolExecutor(2) as pool:  # side by side: b learns the config by signal
            replicas = list(pool.map(cluster.start, ["a", "b"], [_config(upstream), None]))
        nginx = NginxServer(cluster.folder / "nginx", [r.port for r in replicas]).start()
        admin = httpx.Client(
            base_url=f"{nginx.url}/api/admin",
            headers={"Authorization": f"Bearer {ADMIN}"},
            timeout=10,
        )
        with admin:
            yield Balanced(replicas, nginx, redis, receiver, url, admin)
    finally:
        try:
            if nginx is not None:
                nginx.stop()
            cluster.stop()
        finally:
            receiver.stop()
            redis.stop()
            asyncio.run(drop_postgres_database(url))


def _requests_served(replica: GatewayProcess, status: str) -> float:
    """llmrelay_requests_total of this replica for that status, all labels summed."""
    text = httpx.get(f"{replica.url}/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("llmrelay_requests_total{") and f'status="{status}"' in line
    )


def test_a_keys_rpm_is_shared_exactly_by_the_replicas(balanced: Balanced) -> None:
    before = [_requests_served(r, "200") for r in balanced.replicas]
    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda _: balanced.chat(KEY_LIMITED), range(3 * RPM)))
    statuses = Counter(answer.status_code for answer in answers)
    assert statuses == {200: RPM, 429: 2 * RPM}
    refused = next(a for a in answers if a.status_code == 429)
    assert refused.json()["error"]["type"] and refused.headers["x-ratelimit-limit"] == str(RPM)
    after = [_requests_served(r, "200") for r in balanced.replicas]
    # nginx spread them: both replicas admitted some, RPM in all.
    assert all(a > b for a, b in zip(after, before, strict=True))
    assert sum(after) - sum(before) == RPM


def test_a_stream_through_nginx_arrives_event_by_event(balanced: Balanced) -> None:
    words = "one two three four five six seven eight"  # one every 300 ms upstream
    started = time.monotonic()
    first_at = None
    body = b""
    with httpx.stream(
        "POST",
        f"{balanced.nginx.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {KEY}"},
        json={"model": "paced", "stream": True, "messages": [{"role": "user", "content": words}]},
        timeout=30,
    ) as answer:
        assert answer.status_code == 200
        for chunk in answer.iter_bytes():
            if first_at is None and b'"content":"one ' in body + chunk:
                first_at = time.monotonic() - started
            body += chunk
    took = time.monotonic() - started
    assert body.endswith(b"data: [DONE]\n\n")
    assert first_at is not None and first_at < took / 2  # not held back until the end


def test_a_change_through_the_admin_api_is_served_by_both_within_seconds(
    balanced: Balanced,
) -> None:
    key = balanced.new_key("made-through-nginx")
    within(POLL_S + 2, lambda: balanced.served_by_each(key))


def _generate(balanced: Balanced, prompt: str, path: str) -> str:
    answer = httpx.post(
        f"{balanced.nginx.url}/v1/generate",
        headers={"Authorization": f"Bearer {KEY}"},
        json={"model": "chat", "prompt": prompt, "webhook_url": balanced.receiver.url(path)},
        timeout=10,
    )
    assert answer.status_code == 202, answer.text
    return str(answer.json()["id"])


def _delivered_once(
    balanced: Balanced, upstream: MockUpstream, path: str, prompts: list[str]
) -> dict[str, Any]:
    """Wait for one event per prompt on `path`; check each job ran and reported once."""
    deadline = time.monotonic() + 30
    while len(balanced.receiver.on(path)) < len(prompts):
        assert time.monotonic() < deadline, f"{len(balanced.receiver.on(path))} events"
        time.sleep(0.1)
    time.sleep(0.5)  # a duplicate, were there one, would arrive now
    events = [orjson.loads(r.body) for r in balanced.receiver.on(path)]
    contents = Counter(event["data"]["content"] for event in events)
    assert contents == dict.fromkeys(prompts, 1)
    asked = Counter(
        r.body["messages"][-1]["content"]
        for r in upstream.chat_requests()
        if r.body["messages"][-1]["content"] in prompts
    )
    assert asked == dict.fromkeys(prompts, 1)  # each provider call made once
    return {event["data"]["id"]: event for event in events}


def test_background_jobs_are_claimed_exactly_once_across_the_replicas(
    balanced: Balanced, upstream: MockUpstream
) -> None:
    prompts = [f"job number {n}" for n in range(12)]
    ids = [_generate(balanced, prompt, "/ok-jobs") for prompt in prompts]
    events = _delivered_once(balanced, upstream, "/ok-jobs", prompts)
    assert sorted(events) == sorted(ids)
    rows = asyncio.run(_claims(balanced.database_url, ids))
    assert rows == dict.fromkeys(ids, ("succeeded", 1))  # one claim each (epoch 1)


async def _claims(url: str, ids: list[str]) -> dict[str, tuple[str, int]]:
    """generation id (gen_ + job id) -> (status, epoch) of its job."""
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT id, status, epoch FROM jobs WHERE id = ANY($1::text[])",
            [i.removeprefix("gen_") for i in ids],
        )
    finally:
        await conn.close()
    return {f"gen_{row['id']}": (row["status"], row["epoch"]) for row in rows}


def test_with_redis_down_limits_degrade_changes_still_arrive_and_jobs_still_run(
    balanced: Balanced, upstream: MockUpstream
) -> None:
    """The declared policy (fail_open, the default): each replica admits its share of a
    limit, answers say `X-RateLimit-Degraded: true`; the config signal is lost, so changes
    arrive by polling; jobs live in the database and run as before."""
    balanced.redis.stop()
    try:
        _run_without_redis(balanced, upstream)
    finally:
        balanced.redis.start()
        within(60, lambda: _using_redis_again(balanced))


def _using_redis_again(balanced: Balanced) -> bool:
    """Each replica listens for config signals again and counts limits in Redis."""
    for replica in balanced.replicas:
        signal = httpx.get(f"{replica.url}/readyz", timeout=5).json()["config_signal"]
        if signal["state"] != "listening":
            return False
        answer = balanced.chat(KEY_WATCH, base=replica.url)
        if answer.status_code != 200 or answer.headers.get("x-ratelimit-degraded") == "true":
            return False
    return True


def _run_without_redis(balanced: Balanced, upstream: MockUpstream) -> None:
    answers = [balanced.chat(KEY_LIMITED) for _ in range(4)]
    assert all(a.headers.get("x-ratelimit-degraded") == "true" for a in answers)
    assert {a.status_code for a in answers} <= {200, 429}

    key = balanced.new_key("made-while-redis-is-down")
    within(2 * POLL_S + 2, lambda: balanced.served_by_each(key))
    for replica in balanced.replicas:
        signal = httpx.get(f"{replica.url}/readyz", timeout=5).json()["config_signal"]
        assert signal["state"] == "reconnecting"

    prompts = [f"job while redis is down {n}" for n in range(4)]
    ids = [_generate(balanced, prompt, "/ok-no-redis") for prompt in prompts]
    assert sorted(_delivered_once(balanced, upstream, "/ok-no-redis", prompts)) == sorted(ids)
