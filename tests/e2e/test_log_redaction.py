"""No secret and no prompt in the logs: a real gateway at debug level gets requests that carry
planted secrets (client keys, provider keys, admin and metrics tokens, cookies, query
strings, keys inside message content) and a marker prompt, with failures of every kind; then
every line of its log is read. Each must be one JSON object, none may hold a planted secret or
the marker, and lines logged while a request was handled carry its id."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream
from tests.support.ports import free_port
from tests.support.zygote import run_llmrelay

CLIENT_KEY = "planted-client-key-Q7vX2mLr9TnB4wKc"
WRONG_CLIENT_KEY = "sk-planted-wrong-client-key-H3pZ8sYd"
PROVIDER_KEY = "sk-planted-provider-key-V5nG1qJw6RtE"
DEAD_PROVIDER_KEY = "planted-dead-provider-key-M2cF9kPx"
ADMIN_TOKEN = "planted-admin-token-U4hS7bNe3LqA"
METRICS_TOKEN = "planted-metrics-token-W8dR5tCy1ZoJ"
COOKIE_SECRET = "planted-cookie-secret-K6gT0vBn8XuM"
QUERY_SECRET = "planted-query-secret-P1wE4rYs7IaD"
BODY_KEY = "sk-planted-body-key-D9fH2jKl5ZxC"
#: What the mock upstream puts in its error bodies (tests.support.mock_upstream._error).
UPSTREAM_ERROR_SECRET = "sk-upstream-abcdef123456"
PROMPT = "PROMPT-MARKER-5c1e9a7b"
#: The first console account's password (given, so the server prints none) and a wrong one.
CONSOLE_EMAIL = "ops@example.com"
CONSOLE_PASSWORD = "planted-console-password-Q3mZ8vXc"
WRONG_PASSWORD = "planted-wrong-password-H7tY2uLp"

PLANTED = (
    CLIENT_KEY,
    WRONG_CLIENT_KEY,
    PROVIDER_KEY,
    DEAD_PROVIDER_KEY,
    ADMIN_TOKEN,
    METRICS_TOKEN,
    COOKIE_SECRET,
    QUERY_SECRET,
    BODY_KEY,
    UPSTREAM_ERROR_SECRET,
    PROMPT,
    CONSOLE_PASSWORD,
    WRONG_PASSWORD,
)


def _config(upstream: MockUpstream) -> str:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    timeouts = "timeout_s: 5\n    first_token_timeout_s: 2\n    stream_idle_timeout_s: 2"
    return f"""
providers:
  - slug: up
    type: openai_compatible
    base_url: {upstream.base_url}
    api_key: {PROVIDER_KEY}
    {timeouts}
  - slug: dead
    type: openai_compatible
    base_url: {dead}
    api_key: {DEAD_PROVIDER_KEY}
    connect_timeout_s: 1
routing:
  breaker: {{failures: 2, cooldown_s: 30, max_cooldown_s: 60}}
models:
  - name: chat
    routes: [{{provider: up, upstream_model: echo}}]
  - name: failing
    routes: [{{provider: up, upstream_model: status-500}}]
  - name: rejected
    routes: [{{provider: up, upstream_model: status-400}}]
  - name: unreachable
    routes: [{{provider: dead, upstream_model: echo}}]
  - name: drop
    routes: [{{provider: up, upstream_model: drop-after-2}}]
  - name: error-event
    routes: [{{provider: up, upstream_model: error-after-2}}]
projects:
  - name: main
    keys:
      - {{name: k1, key: {CLIENT_KEY}}}
"""


@pytest.fixture(scope="module")
def gateway(upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    folder = tmp_path_factory.mktemp("log-redaction")
    process = GatewayProcess(
        folder,
        env={
            "LLMRELAY_LOG_LEVEL": "debug",
            "LLMRELAY_ADMIN_TOKEN": ADMIN_TOKEN,
            "LLMRELAY_METRICS_TOKEN": METRICS_TOKEN,
            "LLMRELAY_BOOTSTRAP_ADMIN_EMAIL": CONSOLE_EMAIL,
            "LLMRELAY_BOOTSTRAP_ADMIN_PASSWORD": CONSOLE_PASSWORD,
        },
    )
    # Applied by `llmrelay apply` beforehand: `serve --config` prints the apply summary on
    # stdout for the person who ran it, and the log under test is the server's alone.
    config_path = folder / "config.yaml"
    config_path.write_text(_config(upstream))
    run_llmrelay(
        ["apply", str(config_path)],
        env=process.env,
        cwd=folder,
        check=True,
        timeout=60,
    )
    process.start()
    yield process
    process.stop()


def _chat(model: str, *, stream: bool = False) -> dict[str, Any]:
    content = f"{PROMPT} my key is {BODY_KEY} and a secret word follows the marker"
    return {"model": model, "stream": stream, "messages": [{"role": "user", "content": content}]}


def _log_lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_no_secret_and_no_prompt_reaches_the_log(
    gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    valid = {"authorization": f"Bearer {CLIENT_KEY}", "cookie": f"session={COOKIE_SECRET}"}
    ids: dict[str, list[str]] = {}

    def send(name: str, client: httpx.Client, path: str, expected: int, **kwargs: Any) -> None:
        request_id = f"log-test-{name}-{len(ids.get(name, []))}"
        headers = {"x-request-id": request_id, **kwargs.pop("headers", valid)}
        response = client.post(path, headers=headers, **kwargs)
        if response.status_code == 200 and kwargs.get("json", {}).get("stream"):
            response.read()
        assert response.status_code == expected, (name, response.text)
        assert response.headers["x-request-id"] == request_id
        ids.setdefault(name, []).append(request_id)

    query = f"?key={QUERY_SECRET}&api_key={QUERY_SECRET}"
    chat = f"/v1/chat/completions{query}"
    # one client: the requests share keep-alive connections, as real clients' do
    with httpx.Client(base_url=gateway.url, timeout=20) as client:
        send("ok", client, chat, 200, json=_chat("chat"))
        send("ok-stream", client, chat, 200, json=_chat("chat", stream=True))
        send("x-api-key", client, chat, 200, json=_chat("chat"), headers={"x-api-key": CLIENT_KEY})
        wrong = {"authorization": f"Bearer {WRONG_CLIENT_KEY}"}
        send("wrong-key", client, chat, 401, json=_chat("chat"), headers=wrong)
        wrong = {"x-api-key": WRONG_CLIENT_KEY, "cookie": f"session={COOKIE_SECRET}"}
        send("wrong-x-api-key", client, chat, 401, json=_chat("chat"), headers=wrong)
        send("bad-json", client, chat, 400, content=f'{{"model": "chat", "messages": [{PROMPT}')
        send("bad-shape", client, chat, 400, json={"model": "chat", "messages": PROMPT})
        send("unknown-model", client, chat, 404, json=_chat(f"no-such-model-{BODY_KEY}"))
        send("upstream-400", client, chat, 400, json=_chat("rejected"))
        # the second failure opens the route's breaker (a line about it); the third is refused
        for status in (502, 502, 503):
            send("upstream-500", client, chat, status, json=_chat("failing"))
        send("dead-port", client, chat, 502, json=_chat("unreachable"))
        send("dead-port-stream", client, chat, 502, json=_chat("unreachable", stream=True))
        send("cut-stream", client, chat, 200, json=_chat("drop", stream=True))
        send("error-event", client, chat, 200, json=_chat("error-event", stream=True))
        admin = "/api/admin/usage/summary"
        for token, path, status in (
            (ADMIN_TOKEN, admin, 200),
            (WRONG_CLIENT_KEY, admin, 401),
            (ADMIN_TOKEN, f"{admin}{query}", 400),  # unknown parameters
        ):
            response = client.get(path, headers={"authorization": f"Bearer {token}"})
            assert response.status_code == status
        response = client.get("/metrics", headers={"authorization": f"Bearer {CLIENT_KEY}"})
        assert response.status_code == 401
    # the plants were real: the provider got its key and the prompt
    sent = upstream.chat_requests()
    assert any(r.headers.get("Authorization") == f"Bearer {PROVIDER_KEY}" for r in sent)
    assert any(PROMPT in json.dumps(r.body) for r in sent)
    assert gateway.stop() == 0

    text = gateway.log_path.read_text()
    lines = _log_lines(gateway.log_path)
    events = []
    for line in lines:
        event = json.loads(line)  # every line is one JSON object
        assert isinstance(event, dict), line
        events.append(event)
    for planted in PLANTED:
        assert planted not in text, f"{planted} is in the log"

    # lines logged outside a request have no request id; uvicorn's own lines are JSON too
    started = next(e for e in events if e["event"] == "snapshot_loaded")
    assert "request_id" not in started
    assert any(e.get("logger", "").startswith("uvicorn") for e in events)
    assert not any(e.get("logger") == "uvicorn.access" for e in events)  # stays off (cost)

    # lines logged during a request carry its id
    def only(event_name: str, request_id: str) -> dict[str, Any]:
        found = [
            e for e in events if e["event"] == event_name and e.get("request_id") == request_id
        ]
        assert len(found) == 1, (event_name, request_id, found)
        return found[0]

    cut = only("stream_failed", ids["cut-stream"][0])
    assert cut["level"] == "warning"
    quoted = only("stream_failed", ids["error-event"][0])
    assert quoted["error"] == "provider sent an error event"  # the provider's words stay out
    # a line whose call passes no request id gets it from the request's context: a route's
    # breaker opened during its second failing request, not the first (same connection)
    breaker = [e for e in events if e["event"] == "breaker_transition"]
    opened_by = [ids["upstream-500"][1], ids["dead-port-stream"][0]]
    assert [e["request_id"] for e in breaker] == opened_by
