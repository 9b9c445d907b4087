"""Retries, circuit breakers, pinning, model fallbacks, tags and the overall deadline, through
a real gateway process, a real mock upstream and the official openai SDK."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import openai
import pytest

from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream
from tests.support.stored_attempts import stored_attempts

KEY = "e2e-routing-key-0123456789"


def routing_config(upstream: MockUpstream) -> str:
    return f"""
providers:
  - slug: up
    type: openai_compatible
    base_url: {upstream.base_url}
    timeout_s: 10
  - slug: up2
    type: openai_compatible
    base_url: {upstream.base_url}
    timeout_s: 10
  - slug: quick
    type: openai_compatible
    base_url: {upstream.base_url}
    timeout_s: 1
    first_token_timeout_s: 1
routing:
  breaker: {{failures: 2, cooldown_s: 30, max_cooldown_s: 60}}
models:
  - name: retrying
    retry: {{attempts: 3, backoff_ms: 10}}
    routes: [{{provider: up, upstream_model: fail-first-1}}]
  - name: retrying-too-long
    retry: {{attempts: 5, backoff_ms: 10}}
    routes: [{{provider: up, upstream_model: fail-first-9}}]
  - name: throttled
    retry: {{attempts: 2, backoff_ms: 10}}
    routes: [{{provider: up, upstream_model: throttle-first-1}}]
  - name: breaking
    routes:
      - {{provider: up, upstream_model: status-500, priority: 0}}
      - {{provider: up2, upstream_model: echo-behind, priority: 1}}
  - name: recorded
    routes:
      - {{provider: up, upstream_model: status-500-rec, priority: 0}}
      - {{provider: up2, upstream_model: echo-rec, priority: 1}}
  - name: doomed
    routes: [{{provider: up, upstream_model: status-502}}]
  - name: pinning
    routes:
      - {{provider: up, upstream_model: status-503, priority: 0}}
      - {{provider: up2, upstream_model: echo-pin, priority: 1}}
  - name: primary
    fallbacks: [backup]
    routes: [{{provider: up, upstream_model: status-504}}]
  - name: backup
    routes: [{{provider: up2, upstream_model: echo-backup}}]
  - name: short
    context_fallbacks: [long]
    routes: [{{provider: up, upstream_model: status-400}}]
  - name: long
    routes: [{{provider: up2, upstream_model: echo-long}}]
  - name: tagged
    strategy: tag
    routes:
      - {{provider: up, upstream_model: echo-default, priority: 0}}
      - {{provider: up2, upstream_model: echo-special, priority: 1, tag: special}}
  - name: sticky
    strategy: weighted
    routes:
      - {{provider: up, upstream_model: echo-s1, weight: 1}}
      - {{provider: up2, upstream_model: echo-s2, weight: 1}}
  - name: ttft-failover
    routes:
      - {{provider: quick, upstream_model: stall-after-0, priority: 0}}
      - {{provider: up2, upstream_model: echo-ttft, priority: 1}}
  - name: slow-failover
    routes:
      - {{provider: quick, upstream_model: slow-3000-b, priority: 0}}
      - {{provider: up2, upstream_model: echo-slow, priority: 1}}
  - name: throttle-failover
    routes:
      - {{provider: up, upstream_model: status-429-b, priority: 0}}
      - {{provider: up2, upstream_model: echo-429, priority: 1}}
  - name: throttled-once
    routes: [{{provider: up, upstream_model: throttle-first-1-once}}]
  - name: past-deadline
    deadline_s: 20
    retry: {{attempts: 3, backoff_ms: 10}}
    routes:
      - {{provider: up, upstream_model: retry-after-100, priority: 0}}
      - {{provider: up2, upstream_model: echo-past-deadline, priority: 1}}
  - name: hurried
    deadline_s: 1
    routes: [{{provider: up, upstream_model: slow-60000}}]
projects:
  - name: routing
    keys:
      - {{name: k, key: {KEY}}}
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    """The module's gateway (the module-scoped `upstream` comes from conftest.py)."""
    yield from serving(tmp_path_factory.mktemp("routing"), routing_config(upstream))


@pytest.fixture
def client(gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(api_key=KEY, base_url=gateway.base_url, max_retries=0, timeout=60) as made:
        yield made


def _ask(
    client: openai.OpenAI,
    model: str,
    extra_headers: dict[str, str] | None = None,
    prompt: str = "hello there",
) -> httpx2.Response:
    raw = client.chat.completions.with_raw_response.create(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        extra_headers=extra_headers,
    )
    return raw.http_response


def _sent(upstream: MockUpstream, model: str) -> int:
    return sum(1 for r in upstream.chat_requests() if r.body.get("model") == model)


def test_a_5xx_is_retried_on_the_same_route_until_it_answers(
    client: openai.OpenAI, upstream: MockUpstream, gateway: GatewayProcess
) -> None:
    started = time.monotonic()
    response = _ask(client, "retrying")
    assert response.json()["choices"][0]["message"]["content"] == "hello there"
    assert _sent(upstream, "fail-first-1") == 2
    assert time.monotonic() - started >= 0.25  # a wait of at least 0.25 s: no tight loop
    record, attempts = _stored(gateway, response.headers["x-request-id"])
    assert record[0] == 2
    assert [tuple(a) for a in attempts] == [
        (1, "first", 503, "upstream_error", "up"),
        (2, "retry", 200, "ok", "up"),
    ]


def _stored(gateway: GatewayProcess, request_id: str) -> tuple[Any, ...]:
    """(attempts, route_id) of the request's record and its attempt rows, once written."""
    return stored_attempts(
        gateway.database_url, request_id, record_columns="attempts, route_id", timeout_s=5
    )


def test_a_failover_is_recorded_attempt_by_attempt(
    client: openai.OpenAI, gateway: GatewayProcess
) -> None:
    failed_over = _ask(client, "recorded")
    record, attempts = _stored(gateway, failed_over.headers["x-request-id"])
    assert record[0] == 2 and record[1] is not None
    assert [tuple(a) for a in attempts] == [
        (1, "first", 500, "upstream_error", "up"),
        (2, "fallback", 200, "ok", "up2"),
    ]
    answered = _ask(client, "backup")
    record, attempts = _stored(gateway, answered.headers["x-request-id"])
    assert record[0] == 1 and attempts == []  # answered at once: the record says it all


def test_retries_stop_when_the_routes_breaker_opens(
    client: openai.OpenAI, upstream: MockUpstream
) -> None:
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(
            model="retrying-too-long", messages=[{"role": "user", "content": "x"}]
        )
    assert failed.value.status_code == 502
    assert _sent(upstream, "fail-first-9") == 2  # breaker failures: 2, though attempts: 5


def test_retry_after_from_the_provider_is_honoured(
    client: openai.OpenAI, upstream: MockUpstream
) -> None:
    started = time.monotonic()
    completion = client.chat.completions.create(
        model="throttled", messages=[{"role": "user", "content": "patience"}]
    )
    assert completion.choices[0].message.content == "patience"
    assert _sent(upstream, "throttle-first-1") == 2
    assert time.monotonic() - started >= 1.0


def test_a_retry_after_past_the_deadline_moves_to_the_next_route_at_once(
    client: openai.OpenAI, upstream: MockUpstream
) -> None:
    started = time.monotonic()
    response = _ask(client, "past-deadline")
    took = time.monotonic() - started
    assert response.status_code == 200 and response.headers["x-llmrelay-provider"] == "up2"
    # Retry-After: 100 with 20 s of deadline left: not waited for, though 2 retries remain
    # and the route's breaker is still closed (one failure of two).
    assert took < 10.0, took
    assert _sent(upstream, "retry-after-100") == 1


def test_the_breaker_opens_after_failures_and_the_route_is_skipped(
    client: openai.OpenAI, upstream: MockUpstream, gateway: GatewayProcess
) -> None:
    for i in range(2):  # two conversations (one stays where it failed over to)
        response = _ask(client, "breaking", prompt=f"conversation {i}")
        assert response.headers["x-llmrelay-provider"] == "up2"
    assert _sent(upstream, "status-500") == 2
    response = _ask(client, "breaking", prompt="a third conversation")
    assert response.status_code == 200 and response.headers["x-llmrelay-provider"] == "up2"
    assert _sent(upstream, "status-500") == 2  # open: not tried again
    metrics = httpx.get(f"{gateway.url}/metrics", timeout=5).text
    open_routes = [
        line for line in metrics.splitlines() if line.startswith("llmrelay_breaker_state{")
    ]
    assert any(line.endswith(" 2.0") for line in open_routes), open_routes
    assert 'to_state="open"' in metrics


def test_every_route_cooling_down_answers_503_with_retry_after(
    client: openai.OpenAI, upstream: MockUpstream
) -> None:
    for _ in range(2):
        with pytest.raises(openai.APIStatusError) as failed:
            client.chat.completions.create(
                model="doomed", messages=[{"role": "user", "content": "x"}]
            )
        assert failed.value.status_code == 502
    with pytest.raises(openai.APIStatusError) as cooling:
        client.chat.completions.create(model="doomed", messages=[{"role": "user", "content": "x"}])
    assert cooling.value.status_code == 503
    assert 1 <= int(cooling.value.response.headers["retry-after"]) <= 30
    assert cooling.value.code == "routes_cooling_down"
    assert _sent(upstream, "status-502") == 2


def test_a_pinned_request_never_crosses_to_another_provider(
    client: openai.OpenAI, upstream: MockUpstream
) -> None:
    statuses = []
    for _ in range(3):
        with pytest.raises(openai.APIStatusError) as failed:
            client.chat.completions.create(
                model="pinning:up", messages=[{"role": "user", "content": "x"}]
            )
        statuses.append(failed.value.status_code)
    assert statuses == [502, 502, 503]
    assert _sent(upstream, "echo-pin") == 0
    unpinned = _ask(client, "pinning")  # without the pin the other provider serves
    assert unpinned.headers["x-llmrelay-provider"] == "up2"


def test_model_fallbacks_serve_and_the_answer_names_the_model_that_served(
    client: openai.OpenAI,
) -> None:
    response = _ask(client, "primary")
    assert response.headers["x-llmrelay-model"] == "backup"
    assert response.json()["model"] == "backup"
    chunks = list(
        client.chat.completions.create(
            model="primary", messages=[{"role": "user", "content": "stream me"}], stream=True
        )
    )
    assert {c.model for c in chunks} == {"backup"}
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "stream me"


def test_context_too_long_tries_the_context_fallbacks(
    client: openai.OpenAI, upstream: MockUpstream
) -> None:
    response = _ask(client, "short")
    assert response.headers["x-llmrelay-model"] == "long"
    assert _sent(upstream, "echo-long") >= 1


def test_the_tag_header_picks_the_tagged_route(
    client: openai.OpenAI, upstream: MockUpstream
) -> None:
    tagged = _ask(client, "tagged", extra_headers={"x-llmrelay-route-tag": "special"})
    assert tagged.headers["x-llmrelay-provider"] == "up2"
    assert upstream.chat_requests()[-1].body["model"] == "echo-special"
    plain = _ask(client, "tagged")
    assert plain.headers["x-llmrelay-provider"] == "up"
    assert upstream.chat_requests()[-1].body["model"] == "echo-default"


def test_the_model_deadline_bounds_the_whole_request(client: openai.OpenAI) -> None:
    started = time.monotonic()
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(model="hurried", messages=[{"role": "user", "content": "x"}])
    assert failed.value.status_code == 504
    assert time.monotonic() - started < 20  # at the deadline, not the upstream's minute


def test_a_session_stays_on_the_route_that_served_it(client: openai.OpenAI) -> None:
    unpinned = {
        _ask(client, "sticky", prompt=f"hello {i}").headers["x-llmrelay-provider"]
        for i in range(30)
    }
    assert unpinned == {"up", "up2"}  # weighted 1:1 over conversations (2^-29 to fail)
    session = {"x-llmrelay-session-id": "conversation-42"}
    served = {_ask(client, "sticky", session).headers["x-llmrelay-provider"] for _ in range(15)}
    assert len(served) == 1


def test_a_stream_silent_before_its_first_token_fails_over_invisibly(
    client: openai.OpenAI,
) -> None:
    started = time.monotonic()
    chunks = list(
        client.chat.completions.create(
            model="ttft-failover",
            messages=[{"role": "user", "content": "late but whole"}],
            stream=True,
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        "late but whole"
    )
    assert {c.model for c in chunks} == {"ttft-failover"}
    assert time.monotonic() - started < 20  # the stalled route is silent forever


@pytest.mark.parametrize("model", ["slow-failover", "throttle-failover"])
def test_a_first_byte_timeout_or_a_429_moves_to_the_next_route(
    client: openai.OpenAI, model: str
) -> None:
    response = _ask(client, model)
    assert response.status_code == 200 and response.headers["x-llmrelay-provider"] == "up2"


def test_a_502_carries_the_providers_retry_after(client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(
            model="throttled-once", messages=[{"role": "user", "content": "x"}]
        )
    assert failed.value.status_code == 502
    assert failed.value.response.headers["retry-after"] == "1"
