"""Two `llmrelay serve` replicas on one PostgreSQL database behave as one gateway: a stored
Response made through replica A is read, continued (`previous_response_id`) and cancelled
through replica B; a background response queued through A is read through B; a
conversation bound to a route on A keeps that route when its next turn reaches B; a
breaker opened by failures on A makes B skip the route, and a health probe on A that finds
the provider online closes it on B too. Once with Redis as the shared store, once with
PostgreSQL alone (no Redis).

Two mock upstreams, each holding only the responses it gave out (another one's id is a
404), behind routes of priority 0 (x) and 1 (y): a request reaches y only when the gateway
knew to send it there."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import pytest
import redis

from llmrelay.database_setup import migrate_database
from tests.conftest import need_postgres
from tests.support.databases import create_postgres_database, drop_postgres_database
from tests.support.gateway_process import GatewayProcess
from tests.support.kept import KeptPerParam, kept_per_param
from tests.support.mock_upstream import MockUpstream
from tests.support.redis_server import RedisServer
from tests.support.replicas import Cluster, within

pytestmark = [pytest.mark.postgres, pytest.mark.e2e]

SECRET = "replicas-shared-secret-0123456789abcdef"
ADMIN = "rs-admin-9f3c2b7e1d4a6f8e0b5c7d9a2e4f6a8c"
KEY = "replicas-shared-key-0123456789"


def _config(x: MockUpstream, y: MockUpstream) -> str:
    return f"""
providers:
  - {{slug: rx, type: openai, base_url: {x.base_url}, api_key: sk-x}}
  - {{slug: ry, type: openai, base_url: {y.base_url}, api_key: sk-y}}
  - {{slug: cx, type: openai_compatible, base_url: {x.base_url}}}
  - {{slug: cy, type: openai_compatible, base_url: {y.base_url}}}
  - {{slug: fx, type: openai_compatible, base_url: {x.base_url}}}
  - {{slug: gx, type: openai_compatible, base_url: {x.base_url}}}
models:
  - name: resp
    strategy: priority
    routes:
      - {{provider: rx, upstream_model: echo, priority: 0}}
      - {{provider: ry, upstream_model: echo, priority: 1}}
  - name: chat-only
    strategy: priority
    routes:
      - {{provider: cx, upstream_model: echo, priority: 0}}
      - {{provider: cy, upstream_model: echo, priority: 1}}
  - name: sticky
    strategy: priority
    routes:
      - {{provider: cx, upstream_model: echo, priority: 0}}
      - {{provider: cy, upstream_model: echo, priority: 1}}
  - name: brk
    strategy: priority
    routes:
      - {{provider: fx, upstream_model: status-500, priority: 0}}
      - {{provider: cy, upstream_model: echo, priority: 1}}
  - name: probed
    strategy: priority
    routes:
      - {{provider: gx, upstream_model: status-502, priority: 0}}
      - {{provider: cy, upstream_model: echo, priority: 1}}
routing:
  breaker: {{failures: 2, cooldown_s: 120, max_cooldown_s: 120}}
projects:
  - name: p
    keys:
      - {{name: k, key: {KEY}}}
"""


@dataclass
class Pair:
    a: GatewayProcess
    b: GatewayProcess
    x: MockUpstream
    y: MockUpstream
    database_url: str
    redis_url: str | None

    def shared_keys(self, pattern: str) -> list[str]:
        """Keys of shared entries matching `pattern` (`*` for any text): in Redis when the
        replicas have it, else in PostgreSQL."""
        if self.redis_url is not None:
            client = redis.Redis.from_url(self.redis_url, decode_responses=True)
            try:
                return [str(k) for k in client.keys(f"llmrelay:shared:{pattern}")]
            finally:
                client.close()

        async def read() -> list[str]:
            conn = await asyncpg.connect(self.database_url)
            try:
                rows = await conn.fetch(
                    "SELECT key FROM shared_entries WHERE key LIKE $1", pattern.replace("*", "%")
                )
            finally:
                await conn.close()
            return [row["key"] for row in rows]

        return asyncio.run(read())

    def post(
        self, replica: GatewayProcess, path: str, body: dict[str, Any], **kw: Any
    ) -> httpx.Response:
        return httpx.post(
            f"{replica.base_url}{path}",
            headers={"Authorization": f"Bearer {KEY}", **kw.pop("headers", {})},
            json=body,
            timeout=15,
        )

    def get(self, replica: GatewayProcess, path: str) -> httpx.Response:
        return httpx.get(
            f"{replica.base_url}{path}", headers={"Authorization": f"Bearer {KEY}"}, timeout=15
        )


@contextmanager
def _pair(transport: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    need_postgres()
    redis = RedisServer().start() if transport == "redis" else None
    x, y = MockUpstream().start(), MockUpstream().start()
    url = asyncio.run(create_postgres_database())
    cluster = Cluster(
        tmp_path_factory.mktemp("replicas-shared"),
        url,
        None if redis is None else redis.url,
        secret=SECRET,
        env={
            "LLMRELAY_JOBS_POLL_S": "0.2",
            "LLMRELAY_JOBS_IDLE_POLL_S": "0.5",
            "LLMRELAY_ADMIN_TOKEN": ADMIN,
        },
    )
    try:
        asyncio.run(migrate_database(url))
        a = cluster.start("a", _config(x, y))
        b = cluster.start("b")
        yield Pair(a, b, x, y, url, None if redis is None else redis.url)
    finally:
        try:
            cluster.stop()
        finally:
            x.stop()
            y.stop()
            if redis is not None:
                redis.stop()
            asyncio.run(drop_postgres_database(url))


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KeptPerParam[Pair]]:
    yield from kept_per_param(lambda transport: _pair(transport, tmp_path_factory))


@pytest.fixture(params=["redis", "postgres-only"])
def pair(request: pytest.FixtureRequest, pairs: KeptPerParam[Pair]) -> Pair:
    """The module's two replicas on the test's transport (tests/support/kept.py)."""
    return pairs.get(request.param)


def test_a_stored_response_made_on_one_replica_is_read_continued_and_cancelled_on_another(
    pair: Pair,
) -> None:
    made = pair.post(pair.a, "/responses", {"model": "resp:ry", "input": "first turn"})
    assert made.status_code == 200, made.text
    assert made.headers["x-llmrelay-provider"] == "ry"
    response_id = made.json()["id"]

    read = pair.get(pair.b, f"/responses/{response_id}")
    assert read.status_code == 200, read.text
    assert read.json()["id"] == response_id and read.json()["model"] == "resp"

    # Unpinned, the priority would send it to rx, which does not hold the conversation.
    continued = pair.post(
        pair.b,
        "/responses",
        {"model": "resp", "input": "second turn", "previous_response_id": response_id},
    )
    assert continued.status_code == 200, continued.text
    assert continued.headers["x-llmrelay-provider"] == "ry"
    assert continued.json()["output"][0]["content"][0]["text"].startswith("second turn")

    cancelled = pair.post(pair.b, f"/responses/{response_id}/cancel", {})
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    assert pair.y.requests[-1].path == f"/v1/responses/{response_id}/cancel"


def test_a_response_the_gateway_stored_is_read_continued_and_refused_cancel_on_another(
    pair: Pair,
) -> None:
    made = pair.post(pair.a, "/responses", {"model": "chat-only", "input": "remember tea"})
    assert made.status_code == 200, made.text
    response_id = made.json()["id"]
    assert made.json()["store"] is True

    read = pair.get(pair.b, f"/responses/{response_id}")
    assert read.status_code == 200, read.text
    assert read.json() == made.json()

    continued = _continued_on_b(pair, response_id, "remember tea")
    assert continued.json()["output"][0]["content"][0]["text"].startswith("and now?")
    # The continuation is stored too: a third turn through A carries both before it.
    third = pair.post(
        pair.a,
        "/responses",
        {"model": "chat-only", "input": "third", "previous_response_id": continued.json()["id"]},
    )
    assert third.status_code == 200, third.text
    assert len(pair.x.requests[-1].body["messages"]) == 5

    cancel = pair.post(pair.b, f"/responses/{response_id}/cancel", {})
    assert cancel.status_code == 400, cancel.text
    assert "synchronous" in cancel.json()["error"]["message"]


def test_a_streamed_response_made_on_one_replica_is_read_on_another(pair: Pair) -> None:
    with httpx.stream(
        "POST",
        f"{pair.a.base_url}/responses",
        headers={"Authorization": f"Bearer {KEY}"},
        json={"model": "resp:ry", "input": "streamed", "stream": True},
        timeout=15,
    ) as made:
        assert made.status_code == 200
        body = made.read().decode()
    response_id = body.split('"id":"', 1)[1].split('"', 1)[0]
    # Written behind the stream: visible to the other replica within moments.
    within(5, lambda: pair.get(pair.b, f"/responses/{response_id}").status_code == 200)


def test_a_streamed_response_the_gateway_stored_is_read_and_continued_on_another(
    pair: Pair,
) -> None:
    """Streamed through chat (a chat-only provider): every event's Response carries the
    gateway's id, and the completed one is kept before the stream ends, so another replica
    reads it back at once and continues it."""
    with httpx.stream(
        "POST",
        f"{pair.a.base_url}/responses",
        headers={"Authorization": f"Bearer {KEY}"},
        json={"model": "chat-only", "input": "remember coffee", "stream": True},
        timeout=15,
    ) as made:
        assert made.status_code == 200
        events = [
            json.loads(line.removeprefix("data: "))
            for line in made.read().decode().splitlines()
            if line.startswith("data: ")
        ]
    ids = {e["response"]["id"] for e in events if isinstance(e.get("response"), dict)}
    assert len(ids) == 1, ids
    (response_id,) = ids
    assert re.fullmatch(r"resp_[0-9a-f]{32}", response_id)
    completed = next(e["response"] for e in events if e["type"] == "response.completed")
    assert completed["store"] is True

    # The other replica reads it back (eventually: written behind, shared within moments)
    within(5, lambda: pair.get(pair.b, f"/responses/{response_id}").status_code == 200)
    read = pair.get(pair.b, f"/responses/{response_id}").json()
    assert read["id"] == response_id and read["output"] == completed["output"]

    _continued_on_b(pair, response_id, "remember coffee")

    # store: false keeps nothing, streamed as not
    with httpx.stream(
        "POST",
        f"{pair.a.base_url}/responses",
        headers={"Authorization": f"Bearer {KEY}"},
        json={"model": "chat-only", "input": "forget", "stream": True, "store": False},
        timeout=15,
    ) as unkept:
        body = unkept.read().decode()
    unkept_id = body.split('"id":"', 1)[1].split('"', 1)[0]
    assert pair.get(pair.a, f"/responses/{unkept_id}").status_code == 404


def _continued_on_b(pair: Pair, response_id: str, first: str) -> httpx.Response:
    """Continue a response the gateway stored through replica B: the provider gets the
    whole conversation through chat (the first turn, its answer, the new input)."""
    continued = pair.post(
        pair.b,
        "/responses",
        {"model": "chat-only", "input": "and now?", "previous_response_id": response_id},
    )
    assert continued.status_code == 200, continued.text
    sent = pair.x.requests[-1].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[0]["content"] == first and sent[2]["content"] == "and now?"
    return continued


def test_an_unknown_response_id_is_a_404_on_every_replica(pair: Pair) -> None:
    for replica in (pair.a, pair.b):
        missing = pair.get(replica, "/responses/resp_not_given_out")
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "response_not_found"


def test_a_background_response_queued_on_one_replica_is_read_on_another(pair: Pair) -> None:
    queued = pair.post(
        pair.a, "/responses", {"model": "resp", "input": "later", "background": True}
    )
    assert queued.status_code == 200, queued.text
    response_id = queued.json()["id"]

    def done() -> bool:
        read = pair.get(pair.b, f"/responses/{response_id}")
        assert read.status_code == 200, read.text
        return bool(read.json()["status"] == "completed")

    within(20, done)


def test_a_conversation_bound_on_one_replica_keeps_its_route_on_another(pair: Pair) -> None:
    session = {"x-llmrelay-session-id": uuid.uuid4().hex}
    first = pair.post(
        pair.a,
        "/chat/completions",
        {"model": "sticky:cy", "messages": [{"role": "user", "content": "one"}]},
        headers=session,
    )
    assert first.status_code == 200, first.text
    assert first.headers["x-llmrelay-provider"] == "cy"

    def next_turn(replica: GatewayProcess) -> str:
        turn = pair.post(
            replica,
            "/chat/completions",
            {"model": "sticky", "messages": [{"role": "user", "content": "two"}]},
            headers=session,
        )
        assert turn.status_code == 200, turn.text
        return str(turn.headers["x-llmrelay-provider"])

    # Written behind the answer: the other replica sees the binding within moments (a turn
    # before that would take the strategy's route and bind it, so it waits for the entry).
    within(5, lambda: bool(pair.shared_keys(f"a:*:s:{session['x-llmrelay-session-id']}")))
    assert next_turn(pair.b) == "cy"
    fresh = {"x-llmrelay-session-id": uuid.uuid4().hex}
    assert (
        pair.post(
            pair.b,
            "/chat/completions",
            {"model": "sticky", "messages": [{"role": "user", "content": "new"}]},
            headers=fresh,
        ).headers["x-llmrelay-provider"]
        == "cx"
    )


def _breaker_states(replica: GatewayProcess) -> dict[str, float]:
    """This replica's breakers: route id -> llmrelay_breaker_state (0 closed, 2 open)."""
    text = httpx.get(f"{replica.url}/metrics", timeout=5).text
    return {
        line.split('route="', 1)[1].split('"', 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("llmrelay_breaker_state{")
    }


def _open_breakers(replica: GatewayProcess) -> int:
    """How many routes this replica's breakers hold open (llmrelay_breaker_state == 2)."""
    return sum(1 for state in _breaker_states(replica).values() if state == 2)


def test_a_breaker_opened_on_one_replica_is_skipped_by_another(pair: Pair) -> None:
    def failing_calls() -> int:
        return sum(1 for r in pair.x.requests if r.body.get("model") == "status-500")

    def chat(text: str) -> dict[str, Any]:  # each a conversation of its own (none is bound)
        return {"model": "brk", "messages": [{"role": "user", "content": text}]}

    assert _open_breakers(pair.b) == 0
    for n in range(2):  # two failures open it (each request still served by the next route)
        served = pair.post(pair.a, "/chat/completions", chat(f"turn {n}"))
        assert served.status_code == 200, served.text
        assert served.headers["x-llmrelay-provider"] == "cy"
    assert failing_calls() == 2 and _open_breakers(pair.a) == 1

    within(5, lambda: _open_breakers(pair.b) == 1)
    served = pair.post(pair.b, "/chat/completions", chat("on b"))
    assert served.status_code == 200 and served.headers["x-llmrelay-provider"] == "cy"
    assert failing_calls() == 2  # B never tried the open route


def test_a_breaker_a_probe_closed_on_one_replica_is_closed_on_another(pair: Pair) -> None:
    def chat(text: str) -> dict[str, Any]:
        return {"model": "probed", "messages": [{"role": "user", "content": text}]}

    def open_on(replica: GatewayProcess) -> set[str]:
        return {route for route, state in _breaker_states(replica).items() if state == 2}

    before = open_on(pair.a)
    for n in range(2):
        served = pair.post(pair.a, "/chat/completions", chat(f"probed {n}"))
        assert served.status_code == 200 and served.headers["x-llmrelay-provider"] == "cy"
    (route,) = open_on(pair.a) - before
    within(5, lambda: route in open_on(pair.b))

    admin = {"Authorization": f"Bearer {ADMIN}"}
    listed = httpx.get(f"{pair.a.url}/api/admin/providers", headers=admin, timeout=15)
    provider = next(p["id"] for p in listed.json()["data"] if p["slug"] == "gx")
    probed = httpx.post(f"{pair.a.url}/api/admin/providers/{provider}/test", headers=admin)
    assert probed.status_code == 200 and probed.json()["status"] == "online", probed.text
    assert _breaker_states(pair.a)[route] == 0  # closed where the probe ran
    within(5, lambda: _breaker_states(pair.b).get(route) == 0)  # and on the other replica
