"""Breakers that see recovery and failed attempts that move on at once (issue 35, items 2 and
3), through a real `llmrelay serve`, a real mock upstream and the official openai SDK.

- A failure that opens the route's breaker (here the first: `failures: 1`) is not followed by
  the retry wait, even with `Retry-After: 10`: the next route answers at once.
- When a route's cooldown ends, the gateway's own timer sends the trial; no request is needed
  for a route that came back to be closed again, and none pays for a failed trial.
- A provider health probe that finds the provider online closes its routes' breakers.

The breaker's cooldown is one second here so the timer's trials come quickly; every wait is
for the event (a trial seen upstream, a breaker's state) with a generous ceiling.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.support.billing import eventually
from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

pytestmark = pytest.mark.e2e

KEY = "e2e-recovery-key-0123456789"
ADMIN = "e2e-recovery-admin-token-0123456789"
#: What a loaded two-core machine may take to see an event that is due at once.
CEILING_S = 30.0


def _config(upstream: MockUpstream) -> str:
    base = upstream.base_url
    return f"""
providers:
  - {{slug: up, type: openai_compatible, base_url: "{base}", timeout_s: 10}}
  - {{slug: up2, type: openai_compatible, base_url: "{base}", timeout_s: 10}}
  - {{slug: probed, type: openai_compatible, base_url: "{base}", timeout_s: 10}}
routing:
  breaker: {{failures: 1, cooldown_s: 1, max_cooldown_s: 2}}
models:
  - name: impatient
    retry: {{attempts: 3, backoff_ms: 10}}
    routes:
      - {{provider: up, upstream_model: retry-after-10, priority: 0}}
      - {{provider: up2, upstream_model: echo-impatient, priority: 1}}
  - name: flapping
    routes:
      - {{provider: up, upstream_model: echo-flap, priority: 0}}
      - {{provider: up2, upstream_model: echo-flap-backup, priority: 1}}
  - name: probing
    routes:
      - {{provider: probed, upstream_model: echo-probed, priority: 0}}
      - {{provider: up2, upstream_model: echo-probed-backup, priority: 1}}
projects:
  - name: recovery
    keys:
      - {{name: k, key: {KEY}}}
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    env = {"LLMRELAY_ADMIN_TOKEN": ADMIN}
    yield from serving(tmp_path_factory.mktemp("recovery"), _config(upstream), env)


@pytest.fixture
def client(gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(api_key=KEY, base_url=gateway.base_url, max_retries=0) as made:
        yield made


@pytest.fixture
def admin(gateway: GatewayProcess) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=f"{gateway.url}/api/admin", headers=headers) as made:
        yield made


def _ask(client: openai.OpenAI, model: str, prompt: str = "are you there") -> tuple[str, str]:
    """The provider that served, and the request id (`prompt`: the conversation's first turn,
    which keeps it on the route that served it, docs/api.md "Sticky routing")."""
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": prompt}]
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == prompt
    return raw.headers["x-llmrelay-provider"], raw.headers["x-request-id"]


def _route_id(gateway: GatewayProcess, upstream_model: str) -> str:
    path = gateway.database_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        row = conn.execute(
            "SELECT id FROM routes WHERE upstream_model = ?", (upstream_model,)
        ).fetchone()
    assert row is not None, upstream_model
    return str(row[0])


def _breaker(admin: httpx.Client, route_id: str) -> str:
    """This gateway's breaker state of the route (closed when it has none)."""
    page = admin.get("/providers/health")
    assert page.status_code == 200, page.text
    states = {b["route_id"]: b["state"] for b in page.json()["breakers"]}
    return str(states.get(route_id, "closed"))


def _trials(upstream: MockUpstream, upstream_model: str) -> int:
    return sum(1 for t in upstream.trials if t.body.get("model") == upstream_model)


def test_a_failure_that_opens_the_breaker_moves_on_without_the_retry_wait(
    client: openai.OpenAI, upstream: MockUpstream, gateway: GatewayProcess
) -> None:
    started = time.monotonic()
    provider, request_id = _ask(client, "impatient")
    took = time.monotonic() - started
    assert provider == "up2"
    # The failed route said Retry-After: 10 and retries allow 3 attempts; its breaker opened
    # on that failure, so the next route was tried at once.
    assert took < 2.0, took
    sent = [r for r in upstream.chat_requests() if r.body.get("model") == "retry-after-10"]
    assert len(sent) == 1
    record = gateway.records([request_id])[request_id]
    assert record["attempts"] == 2 and record["status_code"] == 200


def test_a_route_that_came_back_is_closed_by_the_timers_trial_without_a_request(
    client: openai.OpenAI, upstream: MockUpstream, gateway: GatewayProcess, admin: httpx.Client
) -> None:
    upstream.down.add("echo-flap")
    try:
        assert _ask(client, "flapping")[0] == "up2"  # the primary failed: its breaker opened
        route = _route_id(gateway, "echo-flap")
        assert _breaker(admin, route) in ("open", "half_open")
        # The cooldown ends and a trial is sent with no request: it fails (still down).
        eventually(lambda: _trials(upstream, "echo-flap") >= 1, CEILING_S, "a first trial")
        eventually(lambda: _breaker(admin, route) == "open", CEILING_S, "opened again")
    finally:
        upstream.down.discard("echo-flap")
    sent = len([r for r in upstream.chat_requests() if r.body.get("model") == "echo-flap"])
    # The primary is back: the next trial, again with no request, closes the breaker.
    eventually(lambda: _breaker(admin, route) == "closed", CEILING_S, "closed by a trial")
    trial = [t for t in upstream.trials if t.body.get("model") == "echo-flap"][-1]
    assert trial.headers.get("x-llmrelay-trial") == "breaker"
    assert trial.body.get("max_tokens") == 1
    assert len([r for r in upstream.chat_requests() if r.body.get("model") == "echo-flap"]) == sent
    assert _ask(client, "flapping")[0] == "up2"  # the conversation stays where it moved
    assert _ask(client, "flapping", "a new one")[0] == "up"  # and the primary serves again


def test_a_health_probe_that_finds_the_provider_online_closes_its_breakers(
    client: openai.OpenAI, upstream: MockUpstream, gateway: GatewayProcess, admin: httpx.Client
) -> None:
    upstream.down.add("echo-probed")  # its chat answers 503; its model list is fine
    try:
        assert _ask(client, "probing")[0] == "up2"
        route = _route_id(gateway, "echo-probed")
        assert _breaker(admin, route) in ("open", "half_open")
        listed = admin.get("/providers").json()["data"]
        provider_id = next(p["id"] for p in listed if p["slug"] == "probed")
        probed = admin.post(f"/providers/{provider_id}/test")
        assert probed.status_code == 200, probed.text
        assert probed.json()["status"] == "online"
        # Closed by the probe (a timer's trial could only have opened it again: still down).
        assert _breaker(admin, route) == "closed"
    finally:
        upstream.down.discard("echo-probed")
