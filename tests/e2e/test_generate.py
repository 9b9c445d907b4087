"""`POST /v1/generate` through a real gateway process: one normalised answer from an OpenAI
and an Anthropic provider; bad input refused in OpenAI's error shape; with `webhook_url`, a
queued job whose outcome reaches a real receiver as a signed event (checked by `openssl`, an
implementation independent of ours), retried with backoff until the receiver takes it, logged
per attempt, never sent to an internal address nor after a redirect."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream
from tests.support.webhook_receiver import Received, WebhookReceiver

KEY = "e2e-generate-key-0123456789"
OTHER_KEY = "e2e-generate-other-0123456789"
ADMIN = "e2e-generate-admin-token-0123456789"


def config(upstream: MockUpstream) -> str:
    provider = f'base_url: "{upstream.base_url}", api_key: sk-generate'
    return f"""
providers:
  - {{slug: oai, type: openai, {provider}}}
  - {{slug: claude, type: anthropic, base_url: "{upstream.root_url}", api_key: sk-generate}}
models:
  - name: gen
    routes: [{{provider: oai, upstream_model: echo}}]
  - name: gen-claude
    routes: [{{provider: claude, upstream_model: claude-test}}]
  - name: gen-failing
    routes: [{{provider: oai, upstream_model: status-500}}]
projects:
  - name: gen
    keys: [{{name: k, key: {KEY}}}]
  - name: other
    keys: [{{name: k, key: {OTHER_KEY}}}]
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    env = {
        "LLMRELAY_ADMIN_TOKEN": ADMIN,
        "LLMRELAY_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1",
        "LLMRELAY_WEBHOOK_ALLOW_LOOPBACK": "true",
        "LLMRELAY_WEBHOOK_RETRY_SCHEDULE_S": "0.2,0.2,0.2",
        "LLMRELAY_JOBS_POLL_S": "0.1",
    }
    yield from serving(tmp_path_factory.mktemp("generate"), config(upstream), env=env)


def generate(gateway: GatewayProcess, body: dict[str, Any], key: str = KEY) -> httpx.Response:
    return httpx.post(
        f"{gateway.base_url}/generate",
        headers={"Authorization": f"Bearer {key}"},
        json=body,
        timeout=15,
    )


def admin(gateway: GatewayProcess, path: str, **params: str) -> Any:
    answer = httpx.get(
        f"{gateway.url}/api/admin{path}",
        headers={"Authorization": f"Bearer {ADMIN}"},
        params=params,
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def project_id(gateway: GatewayProcess) -> str:
    return str(admin(gateway, "/projects", name="gen")["data"][0]["id"])


def openssl_hmac(key: str, data: bytes) -> str:
    """HMAC-SHA256 as OpenSSL computes it (not our code)."""
    done = subprocess.run(
        ["openssl", "dgst", "-sha256", "-hmac", key],
        input=data,
        capture_output=True,
        check=True,
    )
    return done.stdout.decode().strip().rsplit("= ", 1)[-1]


def events_on(
    webhook_receiver: WebhookReceiver, path: str, count: int, timeout_s: float = 15
) -> list[Received]:
    deadline = time.monotonic() + timeout_s
    while len(webhook_receiver.on(path)) < count:
        assert time.monotonic() < deadline, f"{len(webhook_receiver.on(path))} events on {path}"
        time.sleep(0.05)
    return webhook_receiver.on(path)


USAGE_KEYS = {"input_tokens", "output_tokens", "total_tokens"}
SHAPE = {
    "id",
    "object",
    "status",
    "created",
    "model",
    "provider",
    "content",
    "finish_reason",
    "usage",
    "latency_ms",
    "metadata",
    "request_id",
}


@pytest.mark.parametrize(("model", "provider"), [("gen", "oai"), ("gen-claude", "claude")])
def test_one_answer_shape_whatever_the_provider(
    gateway: GatewayProcess, upstream: MockUpstream, model: str, provider: str
) -> None:
    answer = generate(
        gateway,
        {
            "model": model,
            "prompt": "four words of text",
            "system": "be brief",
            "max_tokens": 50,
            "temperature": 0.5,
            "metadata": {"ticket": "T-1"},
        },
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert set(body) == SHAPE and set(body["usage"]) == USAGE_KEYS
    assert body["id"] == body["request_id"] == answer.headers["x-request-id"]
    assert (body["object"], body["status"], body["model"], body["provider"]) == (
        "generation",
        "completed",
        model,
        provider,
    )
    assert body["content"] == "four words of text" and body["finish_reason"] == "stop"
    usage = body["usage"]
    assert usage["output_tokens"] == 4
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert isinstance(body["latency_ms"], int) and body["metadata"] == {"ticket": "T-1"}
    assert answer.headers["x-llmrelay-provider"] == provider
    record = gateway.records([body["id"]])[body["id"]]
    assert (record["endpoint"], record["virtual_model"], record["output_tokens"]) == (
        "generate",
        model,
        4,
    )


def test_bad_input_is_a_400_naming_the_field(gateway: GatewayProcess) -> None:
    cases: list[tuple[dict[str, Any], int, str | None]] = [
        ({"prompt": "x"}, 400, "model"),
        ({"model": "gen"}, 400, "messages"),
        (
            {"model": "gen", "prompt": "x", "messages": [{"role": "user", "content": "x"}]},
            400,
            "prompt",
        ),
        (
            {"model": "gen", "messages": [{"role": "robot", "content": "x"}]},
            400,
            "messages[0].role",
        ),
        ({"model": "gen", "prompt": "x", "stream": True}, 400, "stream"),
        ({"model": "gen", "prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
        ({"model": "gen", "prompt": "x", "temperature": 3}, 400, "temperature"),
        ({"model": "gen", "prompt": "x", "metadata": {"k": 1}}, 400, "metadata.k"),
        ({"model": "nope", "prompt": "x"}, 404, "model"),
    ]
    for body, status, param in cases:
        answer = generate(gateway, body)
        assert answer.status_code == status, (body, answer.text)
        error = answer.json()
        assert set(error) == {"error", "request_id"} and error["error"]["param"] == param, body
    assert (
        generate(gateway, {"model": "gen", "prompt": "x"}, key="wrong-key-0123456789").status_code
        == 401
    )
    assert (
        httpx.post(
            f"{gateway.base_url}/generate", content=b"{", headers={"Authorization": f"Bearer {KEY}"}
        ).status_code
        == 400
    )


def test_a_queued_generation_reaches_its_webhook_signed(
    gateway: GatewayProcess, webhook_receiver: WebhookReceiver
) -> None:
    answer = generate(
        gateway,
        {
            "model": "gen",
            "prompt": "sent by webhook",
            "webhook_url": webhook_receiver.url("/ok-signed"),
            "metadata": {"order": "42"},
        },
    )
    assert answer.status_code == 202, answer.text
    queued = answer.json()
    assert re.fullmatch(r"gen_[0-9a-f]{32}", queued["id"])
    assert (queued["object"], queued["status"], queued["model"]) == ("generation", "queued", "gen")
    assert queued["request_id"] == answer.headers["x-request-id"]
    (event,) = events_on(webhook_receiver, "/ok-signed", 1)
    body = orjson.loads(event.body)
    assert set(body) == {"id", "type", "created", "data"}
    assert body["type"] == "generation.completed" and body["id"] == event.header("X-Webhook-Id")
    data = body["data"]
    assert (data["id"], data["status"], data["content"]) == (
        queued["id"],
        "completed",
        "sent by webhook",
    )
    assert data["metadata"] == {"order": "42"} and data["provider"] == "oai"
    assert event.header("Content-Type") == "application/json"
    assert event.header("User-Agent").startswith("llmrelay")
    # The signature, as an independent implementation computes it over the bytes received.
    secret = admin(gateway, f"/projects/{project_id(gateway)}/webhook-secret")["secret"]
    timestamp = event.header("X-Webhook-Timestamp")
    signed = f"{body['id']}.{timestamp}.".encode() + event.body
    assert abs(int(timestamp) - time.time()) < 60
    assert event.header("X-Webhook-Signature") == "v1=" + openssl_hmac(secret, signed)
    assert event.header("X-Webhook-Signature") != "v1=" + openssl_hmac(secret + "x", signed)
    # Polled, it reads as the webhook's data; another project does not see it.
    polled = httpx.get(
        f"{gateway.base_url}/generate/{queued['id']}",
        headers={"Authorization": f"Bearer {KEY}"},
    )
    assert polled.status_code == 200 and polled.json() == data
    stranger = httpx.get(
        f"{gateway.base_url}/generate/{queued['id']}",
        headers={"Authorization": f"Bearer {OTHER_KEY}"},
    )
    assert (
        stranger.status_code == 404 and stranger.json()["error"]["code"] == "generation_not_found"
    )
    record = gateway.records([queued["request_id"]])[queued["request_id"]]
    assert (record["endpoint"], record["status_code"]) == ("generate", 200)


def test_a_failing_receiver_gets_the_same_event_again_until_it_takes_it(
    gateway: GatewayProcess, webhook_receiver: WebhookReceiver
) -> None:
    answer = generate(
        gateway,
        {"model": "gen", "prompt": "again", "webhook_url": webhook_receiver.url("/fail-first-2")},
    )
    assert answer.status_code == 202
    first, second, third = events_on(webhook_receiver, "/fail-first-2", 3)
    assert first.body == second.body == third.body
    assert len({e.header("X-Webhook-Id") for e in (first, second, third)}) == 1
    deliveries = _deliveries(gateway, first.header("X-Webhook-Id"))
    assert deliveries["status"] == "delivered" and deliveries["attempts"] == 3
    assert [a["status_code"] for a in deliveries["attempt_log"]] == [500, 500, 200]
    assert all(a["latency_ms"] >= 0 for a in deliveries["attempt_log"])


def test_a_redirect_is_a_failed_attempt_never_followed(
    gateway: GatewayProcess, webhook_receiver: WebhookReceiver
) -> None:
    generate(
        gateway, {"model": "gen", "prompt": "x", "webhook_url": webhook_receiver.url("/redirect")}
    )
    attempts = events_on(webhook_receiver, "/redirect", 4)
    event_id = attempts[0].header("X-Webhook-Id")
    deadline = time.monotonic() + 10
    while (found := _deliveries(gateway, event_id))["status"] == "pending":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert found["status"] == "failed" and found["attempts"] == 4
    assert [a["status_code"] for a in found["attempt_log"]] == [307] * 4
    assert webhook_receiver.on("/moved") == []


def test_a_failed_generation_sends_its_error(
    gateway: GatewayProcess, webhook_receiver: WebhookReceiver
) -> None:
    answer = generate(
        gateway,
        {"model": "gen-failing", "prompt": "x", "webhook_url": webhook_receiver.url("/ok-failed")},
    )
    (event,) = events_on(webhook_receiver, "/ok-failed", 1)
    body = orjson.loads(event.body)
    assert body["type"] == "generation.failed"
    data = body["data"]
    assert data["id"] == answer.json()["id"] and data["status"] == "failed"
    assert set(data["error"]) == {"message", "type", "code", "param"}
    assert data["error"]["code"] == "upstream_error" and "500" in data["error"]["message"]
    polled = httpx.get(
        f"{gateway.base_url}/generate/{data['id']}", headers={"Authorization": f"Bearer {KEY}"}
    )
    assert polled.json()["status"] == "failed"


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1/hook",
        "http://192.168.1.20/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00::1]/hook",
        "http://0.0.0.0:8080/hook",
        "http://localhost:{port}/ok",  # a hostname resolving to loopback, not allowlisted
        "http://user:password@127.0.0.1:{port}/ok",
        "ftp://127.0.0.1/hook",
    ],
)
def test_internal_webhook_urls_are_refused_at_submission(
    gateway: GatewayProcess, webhook_receiver: WebhookReceiver, url: str
) -> None:
    answer = generate(
        gateway,
        {"model": "gen", "prompt": "x", "webhook_url": url.format(port=webhook_receiver.port)},
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["param"], error["code"]) == ("webhook_url", "invalid_webhook_url")
    assert webhook_receiver.on("/ok") == []


def _deliveries(gateway: GatewayProcess, event_id: str) -> dict[str, Any]:
    found = admin(gateway, "/webhooks/deliveries", project=project_id(gateway), limit="500")
    (delivery,) = [d for d in found["data"] if d["event_id"] == event_id]
    return dict(delivery)
