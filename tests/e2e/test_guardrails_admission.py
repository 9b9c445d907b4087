"""Guardrails at admission on every path to a provider, through a real gateway process and the
real mock upstream: a background response (`background: true`) and a queued generation (with
`webhook_url`) are refused at submission by a block rule (400 in OpenAI's shape, no job, the
upstream never called) and masked by a mask rule before the job is stored (the upstream and
the job's sealed payload hold the masked text, the hit is on the job's record); a token count
the gateway answers with its own estimate is screened like the call it counts (400 in
Anthropic's and in Google's shape)."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from llmrelay.store.crypto import Sealer
from tests.support.closing import Closing
from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream
from tests.support.webhook_receiver import WebhookReceiver

BLOCKED_KEY = "e2e-admission-blocked-0123456789"
MASKED_KEY = "e2e-admission-masked-0123456789"
SECRET_KEY = "e2e-admission-secret-key-0123456789abcdef"
EMAIL = "a@example.com"


def config(upstream: MockUpstream) -> str:
    return f"""
providers:
  - {{slug: oai, type: openai, base_url: "{upstream.base_url}", api_key: sk-admission}}
  - {{slug: compat, type: openai_compatible, base_url: "{upstream.base_url}"}}
models:
  - name: bg
    routes: [{{provider: oai, upstream_model: gpt-bg}}]
  - name: chat
    routes: [{{provider: compat, upstream_model: echo}}]
guardrails:
  policies:
    - name: email-block
      rules: [{{detector: email, action: block}}]
    - name: email-mask
      rules: [{{detector: email, action: mask}}]
projects:
  - name: blocked
    guardrails: [email-block]
    keys: [{{name: k, key: {BLOCKED_KEY}}}]
  - name: masked
    guardrails: [email-mask]
    keys: [{{name: k, key: {MASKED_KEY}}}]
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    env = {
        "LLMRELAY_SECRET_KEY": SECRET_KEY,
        "LLMRELAY_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1",
        "LLMRELAY_WEBHOOK_ALLOW_LOOPBACK": "true",
        "LLMRELAY_JOBS_POLL_S": "0.1",
    }
    yield from serving(tmp_path_factory.mktemp("admission"), config(upstream), env=env)


def _received(upstream: MockUpstream, marker: str) -> list[dict[str, Any]]:
    """Bodies the upstream received whose text holds `marker`."""
    return [r.body for r in upstream.requests if marker in json.dumps(r.body)]


def _query(gateway: GatewayProcess, sql: str, *args: Any) -> list[sqlite3.Row]:
    with sqlite3.connect(gateway.database_url.removeprefix("sqlite:///")) as conn:
        conn.row_factory = sqlite3.Row
        return conn.execute(sql, args).fetchall()


def _jobs_of(gateway: GatewayProcess, request_id: str) -> list[sqlite3.Row]:
    return _query(
        gateway,
        "SELECT * FROM jobs WHERE json_extract(payload, '$.request_id') = ?",
        request_id,
    )


def _stored_request(gateway: GatewayProcess, request_id: str) -> dict[str, Any]:
    """The request body the job keeps (sealed at rest), opened with the gateway's key."""
    (job,) = _jobs_of(gateway, request_id)
    opened: dict[str, Any] = orjson.loads(
        Sealer(SECRET_KEY).open(job["payload_sealed"], context=job["id"])
    )
    return opened


def _hits(gateway: GatewayProcess, request_id: str) -> list[dict[str, Any]]:
    """The request's guardrail hit rows, once its record is written (the same batch)."""
    assert gateway.records([request_id], timeout_s=30), "the call was never recorded"
    rows = _query(
        gateway, "SELECT * FROM guardrail_hits WHERE request_id = ? ORDER BY seq", request_id
    )
    return [dict(row) for row in rows]


def _post(gateway: GatewayProcess, path: str, key: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{gateway.base_url}{path}",
        headers={"Authorization": f"Bearer {key}"},
        json=body,
        timeout=15,
    )


def _assert_refused_in_openai_shape(answer: httpx.Response, param: str) -> None:
    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert set(body) == {"error", "request_id"}
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["code"] == "content_policy_violation"
    assert body["error"]["param"] == param
    assert "'email-block'" in body["error"]["message"]
    assert EMAIL not in answer.text


def test_a_blocked_background_response_is_refused_at_submission(
    gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    marker = "bg-block-3e1"
    answer = _post(
        gateway,
        "/responses",
        BLOCKED_KEY,
        {"model": "bg", "input": f"{marker} to {EMAIL}", "background": True},
    )
    _assert_refused_in_openai_shape(answer, "input")
    request_id = answer.headers["x-request-id"]
    record = gateway.records([request_id])[request_id]
    assert (record["status_code"], record["error_code"]) == (400, "content_policy_violation")
    assert _jobs_of(gateway, request_id) == []  # nothing queued
    (hit,) = _hits(gateway, request_id)
    assert (hit["detector"], hit["action"], hit["field"]) == ("email", "block", "input")
    assert _received(upstream, marker) == []  # never sent upstream


def test_a_masked_background_response_is_stored_and_sent_masked(
    gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    marker = "bg-mask-8a4"
    with openai.OpenAI(
        api_key=MASKED_KEY, base_url=gateway.base_url, max_retries=0, timeout=15
    ) as client:
        raw = client.responses.with_raw_response.create(
            model="bg", input=f"{marker} to {EMAIL}", background=True
        )
        queued = raw.parse()
        assert queued.status == "queued"
        deadline = time.monotonic() + 30
        found = client.responses.retrieve(queued.id)
        while found.status in ("queued", "in_progress"):
            assert time.monotonic() < deadline, f"{queued.id} still {found.status}"
            time.sleep(0.1)
            found = client.responses.retrieve(queued.id)
    assert found.status == "completed"
    request_id = raw.headers["x-request-id"]
    sent = [b for b in _received(upstream, marker) if "input" in b]
    assert sent and all(b["input"] == f"{marker} to [EMAIL]" for b in sent)
    assert _stored_request(gateway, request_id)["input"] == f"{marker} to [EMAIL]"
    hits = _hits(gateway, request_id)
    assert [(h["detector"], h["action"], h["field"], h["count"]) for h in hits] == [
        ("email", "mask", "input", 1)
    ]
    assert EMAIL not in json.dumps(hits)


def test_a_blocked_queued_generation_is_refused_at_submission(
    gateway: GatewayProcess, upstream: MockUpstream, webhook_receiver: WebhookReceiver
) -> None:
    marker = "gen-block-5d2"
    answer = _post(
        gateway,
        "/generate",
        BLOCKED_KEY,
        {
            "model": "chat",
            "prompt": f"{marker} to {EMAIL}",
            "webhook_url": webhook_receiver.url("/blocked"),
        },
    )
    _assert_refused_in_openai_shape(answer, "prompt")
    request_id = answer.headers["x-request-id"]
    record = gateway.records([request_id])[request_id]
    assert (record["status_code"], record["error_code"]) == (400, "content_policy_violation")
    assert _jobs_of(gateway, request_id) == []
    assert _received(upstream, marker) == []


def test_a_masked_queued_generation_is_stored_and_sent_masked(
    gateway: GatewayProcess, upstream: MockUpstream, webhook_receiver: WebhookReceiver
) -> None:
    marker = "gen-mask-1c7"
    answer = _post(
        gateway,
        "/generate",
        MASKED_KEY,
        {
            "model": "chat",
            "system": f"reply to {EMAIL}",
            "messages": [{"role": "user", "content": f"{marker} cc {EMAIL}"}],
            "webhook_url": webhook_receiver.url("/masked"),
        },
    )
    assert answer.status_code == 202, answer.text
    request_id = answer.headers["x-request-id"]
    stored = _stored_request(gateway, request_id)
    assert stored["system"] == "reply to [EMAIL]"
    assert stored["messages"][0]["content"] == f"{marker} cc [EMAIL]"
    hits = _hits(gateway, request_id)  # the job's record, once it ran
    assert {(h["detector"], h["action"], h["field"]) for h in hits} == {
        ("email", "mask", "system"),
        ("email", "mask", "messages[0].content"),
    }
    (sent,) = _received(upstream, marker)
    assert sent["messages"] == [
        {"role": "system", "content": "reply to [EMAIL]"},
        {"role": "user", "content": f"{marker} cc [EMAIL]"},
    ]
    assert EMAIL not in json.dumps(sent)


def test_an_estimated_token_count_is_screened(gateway: GatewayProcess, closing: Closing) -> None:
    """`chat` has no anthropic (nor gemini) route: the gateway answers with its estimate."""
    client = closing(
        anthropic.Anthropic(api_key=BLOCKED_KEY, base_url=gateway.url, max_retries=0, timeout=15)
    )
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.count_tokens(
            model="chat", messages=[{"role": "user", "content": f"write to {EMAIL}"}]
        )
    body = refused.value.response.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "'email-block'" in body["error"]["message"]
    assert EMAIL not in refused.value.response.text
    request_id = refused.value.response.headers["x-request-id"]
    record = gateway.records([request_id])[request_id]
    assert (record["status_code"], record["error_code"]) == (400, "content_policy_violation")

    masked = closing(
        anthropic.Anthropic(api_key=MASKED_KEY, base_url=gateway.url, max_retries=0, timeout=15)
    )
    raw = masked.messages.with_raw_response.count_tokens(
        model="chat", messages=[{"role": "user", "content": f"write to {EMAIL}"}]
    )
    assert raw.headers["x-llmrelay-estimated"] == "true" and raw.parse().input_tokens > 0
    (hit,) = _hits(gateway, raw.headers["x-request-id"])
    assert (hit["detector"], hit["action"]) == ("email", "mask")

    google = httpx.post(
        f"{gateway.url}/v1beta/models/chat:countTokens",
        headers={"x-goog-api-key": BLOCKED_KEY},
        json={"contents": [{"role": "user", "parts": [{"text": f"write to {EMAIL}"}]}]},
        timeout=15,
    )
    assert google.status_code == 400, google.text
    error = google.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert error["details"][0]["reason"] == "content_policy_violation"
