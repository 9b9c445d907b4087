"""Guardrails through a real gateway process, the real mock upstream and the official openai
and anthropic SDKs: block (400 in each protocol's shape, nothing sent upstream, the request
recorded), mask (the upstream receives masked text, tool calls intact, the answer served),
audit (unchanged, a hit recorded), the precedence of global, project and key bindings, hit
rows without the matched text, the metrics, a policy on non-streamed answers, a key with no
rule in force, and a binding changed through the admin API taking effect live."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.closing import Closing
from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

ADMIN_TOKEN = "e2e-guardrails-admin-token-0123456789"
KEYS = {
    "masked": "e2e-guard-masked-0123456789",  # project masked: pii-mask
    "audited": "e2e-guard-audited-0123456789",  # masked, its own pii-audit overrides pii
    "open": "e2e-guard-open-0123456789",  # plain, its own secrets-off: no rule in force
    "plain": "e2e-guard-plain-0123456789",  # project plain: only the global secrets-block
    "answers": "e2e-guard-answers-0123456789",  # plain, with rules on answers
    "live": "e2e-guard-live-0123456789",  # plain, bound through the admin API by a test
}
AWS = "AKIAIOSFODNN7EXAMPLE"
EMAIL = "jane.doe@example.com"
CARD = "4111 1111 1111 1111"
PHONE = "+44 20 7946 0958"


def guardrails_config(upstream: MockUpstream) -> str:
    return f"""
providers:
  - {{slug: up, type: openai_compatible, base_url: "{upstream.base_url}"}}
  - {{slug: ant, type: anthropic, base_url: "{upstream.root_url}", api_key: sk-ant-upstream}}
models:
  - name: chat
    routes: [{{provider: up, upstream_model: echo}}]
  - name: claude
    routes: [{{provider: ant, upstream_model: claude-echo}}]
  - name: emb
    embedding: true
    routes: [{{provider: up, upstream_model: emb-upstream}}]
guardrails:
  policies:
    - name: secrets-block
      rules: [{{detector: secrets, action: block}}]
    - name: pii-mask
      rules:
        - {{detector: pii, action: mask}}
        - {{detector: regex, name: ticket, pattern: "TICKET-[0-9]+", action: mask}}
    - name: pii-audit
      rules: [{{detector: pii, action: audit}}]
    - name: nothing
      rules: [{{detector: secrets, action: "off"}}, {{detector: pii, action: "off"}}]
    - name: answers
      rules:
        - {{detector: phone, action: mask, scope: response}}
        - {{detector: card, action: block, scope: response}}
    - name: words
      rules: [{{detector: words, name: codename, words: [bluebird], action: block}}]
  global: [secrets-block]
projects:
  - name: masked
    guardrails: [pii-mask]
    keys:
      - {{name: masked, key: {KEYS["masked"]}}}
      - {{name: audited, key: {KEYS["audited"]}, guardrails: [pii-audit]}}
  - name: plain
    keys:
      - {{name: plain, key: {KEYS["plain"]}}}
      - {{name: open, key: {KEYS["open"]}, guardrails: [nothing]}}
      - {{name: answers, key: {KEYS["answers"]}, guardrails: [answers]}}
      - {{name: live, key: {KEYS["live"]}}}
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    yield from serving(
        tmp_path_factory.mktemp("guardrails"),
        guardrails_config(upstream),
        env={"LLMRELAY_ADMIN_TOKEN": ADMIN_TOKEN},
    )


@pytest.fixture(scope="module")
def clients(gateway: GatewayProcess) -> Iterator[dict[str, openai.OpenAI]]:
    made = {
        name: openai.OpenAI(api_key=key, base_url=gateway.base_url, max_retries=0, timeout=15)
        for name, key in KEYS.items()
    }
    yield made
    for client in made.values():
        client.close()


def _chat(client: openai.OpenAI, text: str, **extra: Any) -> Any:
    return client.chat.completions.with_raw_response.create(
        model="chat", messages=[{"role": "user", "content": text}], **extra
    )


def _refused(client: openai.OpenAI, text: str) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(model="chat", messages=[{"role": "user", "content": text}])
    return refused.value


def _chat_status(client: openai.OpenAI, text: str) -> int:
    try:
        _chat(client, text)
    except openai.APIStatusError as refused:
        return refused.status_code
    return 200


def _received(upstream: MockUpstream, marker: str) -> list[dict[str, Any]]:
    """Bodies the upstream received whose text holds `marker`."""
    return [r.body for r in upstream.requests if marker in json.dumps(r.body)]


def _hits(gateway: GatewayProcess, request_id: str, timeout_s: float = 5) -> list[dict[str, Any]]:
    """The request's guardrail_hits rows, once its record is written (the same batch)."""
    gateway.records([request_id], timeout_s)
    path = gateway.database_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        conn.row_factory = sqlite3.Row
        rows = conn.execute(
            "SELECT * FROM guardrail_hits WHERE request_id = ? ORDER BY seq", (request_id,)
        ).fetchall()
    return [dict(row) for row in rows]


def test_a_block_answers_400_in_openai_shape_and_sends_nothing(
    gateway: GatewayProcess, clients: dict[str, openai.OpenAI], upstream: MockUpstream
) -> None:
    marker = "block-marker-7f2"
    refused = _refused(clients["plain"], f"{marker} my key is {AWS}, keep it")
    assert refused.status_code == 400
    body = refused.response.json()
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["code"] == "content_policy_violation"
    assert body["error"]["param"] == "messages[0].content"
    assert "'secrets-block'" in body["error"]["message"]
    assert "aws_access_key" in body["error"]["message"]
    assert AWS not in refused.response.text
    assert _received(upstream, marker) == []  # never sent upstream
    request_id = refused.response.headers["x-request-id"]
    record = gateway.records([request_id])[request_id]
    assert (record["status_code"], record["error_code"]) == (400, "content_policy_violation")
    (hit,) = _hits(gateway, request_id)
    assert (hit["policy"], hit["rule"], hit["detector"], hit["action"]) == (
        "secrets-block",
        "secrets",
        "aws_access_key",
        "block",
    )
    assert (hit["location"], hit["field"], hit["count"], hit["matched_chars"]) == (
        "request",
        "messages[0].content",
        1,
        len(AWS),
    )
    assert AWS not in json.dumps(hit)


def test_a_block_answers_400_in_anthropic_shape(
    gateway: GatewayProcess,
    upstream: MockUpstream,
    closing: Closing,
) -> None:
    marker = "anthropic-block-5c1"
    client = closing(
        anthropic.Anthropic(api_key=KEYS["plain"], base_url=gateway.url, max_retries=0, timeout=15)
    )
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(
            model="claude",
            max_tokens=50,
            system="be brief",
            messages=[{"role": "user", "content": [{"type": "text", "text": f"{marker} {AWS}"}]}],
        )
    body = refused.value.response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert "'secrets-block'" in body["error"]["message"]
    assert "messages[0].content[0].text" in body["error"]["message"]
    assert AWS not in refused.value.response.text
    assert _received(upstream, marker) == []


def test_mask_sends_masked_text_upstream_keeps_tools_and_serves_the_answer(
    gateway: GatewayProcess, clients: dict[str, openai.OpenAI], upstream: MockUpstream
) -> None:
    marker = "mask-marker-2b9"
    arguments = json.dumps({"email": EMAIL, "ticket": "TICKET-42"})
    tools: list[Any] = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": f"for example {EMAIL}",
                "parameters": {"type": "object", "properties": {"email": {"type": "string"}}},
            },
        }
    ]
    messages: list[Any] = [
        {"role": "system", "content": f"{marker} escalate to {EMAIL}"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "lookup", "arguments": arguments}},
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": f"phone {PHONE}"},
        {"role": "user", "content": f"card {CARD}, see TICKET-1234"},
    ]  # fmt: skip
    raw = clients["masked"].chat.completions.with_raw_response.create(
        model="chat", messages=messages, tools=tools
    )
    answer = raw.parse()
    assert answer.choices[0].message.content == "card [CARD], see [TICKET]"  # the echo
    (sent,) = _received(upstream, marker)
    assert sent["messages"][0]["content"] == f"{marker} escalate to [EMAIL]"
    assert sent["messages"][1]["tool_calls"][0]["function"]["arguments"] == arguments
    assert sent["messages"][2]["content"] == "phone [PHONE]"
    assert sent["messages"][3]["content"] == "card [CARD], see [TICKET]"
    assert sent["tools"] == tools
    hits = _hits(gateway, raw.headers["x-request-id"])
    assert {(h["detector"], h["field"]) for h in hits} == {
        ("email", "messages[0].content"),
        ("phone", "messages[2].content"),
        ("card", "messages[3].content"),
        ("ticket", "messages[3].content"),
    }
    assert {h["action"] for h in hits} == {"mask"}
    for secret in (EMAIL, PHONE, CARD, "TICKET-1234"):
        assert secret not in json.dumps(hits)


def test_mask_applies_to_embeddings(
    clients: dict[str, openai.OpenAI], upstream: MockUpstream
) -> None:
    marker = "emb-marker-9d0"
    clients["masked"].embeddings.create(model="emb", input=[f"{marker} {EMAIL}", "plain"])
    (sent,) = _received(upstream, marker)
    assert sent["input"] == [f"{marker} [EMAIL]", "plain"]


def test_audit_sends_the_text_unchanged_and_records_the_hit(
    gateway: GatewayProcess, clients: dict[str, openai.OpenAI], upstream: MockUpstream
) -> None:
    """The key's pii-audit overrides its project's pii-mask (same rule name, more
    specific); the project's other rule (ticket) still masks."""
    marker = "audit-marker-4e7"
    raw = _chat(clients["audited"], f"{marker} {EMAIL} TICKET-77")
    assert raw.parse().choices[0].message.content == f"{marker} {EMAIL} [TICKET]"
    (sent,) = _received(upstream, marker)
    assert sent["messages"][0]["content"] == f"{marker} {EMAIL} [TICKET]"
    hits = _hits(gateway, raw.headers["x-request-id"])
    assert {(h["policy"], h["detector"], h["action"]) for h in hits} == {
        ("pii-audit", "email", "audit"),
        ("pii-mask", "ticket", "mask"),
    }


def test_a_key_that_switches_every_rule_off_is_unaffected(
    gateway: GatewayProcess, clients: dict[str, openai.OpenAI], upstream: MockUpstream
) -> None:
    """Its own `off` rule overrides the global secrets block: no rule is left in force."""
    marker = "open-marker-1a3"
    raw = _chat(clients["open"], f"{marker} {AWS} {EMAIL}")
    assert raw.parse().choices[0].message.content == f"{marker} {AWS} {EMAIL}"
    assert len(_received(upstream, marker)) == 1
    assert _hits(gateway, raw.headers["x-request-id"]) == []


def test_answers_are_masked_or_withheld_by_a_response_policy(
    gateway: GatewayProcess, clients: dict[str, openai.OpenAI], upstream: MockUpstream
) -> None:
    marker = "answer-marker-6f4"
    raw = _chat(clients["answers"], f"{marker} call {PHONE}")
    assert raw.parse().choices[0].message.content == f"{marker} call [PHONE]"
    (sent,) = _received(upstream, marker)  # the request itself is not screened
    assert sent["messages"][0]["content"] == f"{marker} call {PHONE}"
    (hit,) = _hits(gateway, raw.headers["x-request-id"])
    assert (hit["location"], hit["field"]) == ("response", "choices[0].message.content")

    withheld = _refused(clients["answers"], f"pay with {CARD}")
    assert withheld.status_code == 400 and withheld.code == "content_policy_violation"
    assert "answer was withheld" in withheld.message and CARD not in withheld.response.text
    request_id = withheld.response.headers["x-request-id"]
    record = gateway.records([request_id])[request_id]
    assert record["status_code"] == 400
    assert record["output_tokens"] == 6  # the generation happened and is accounted for
    streamed = clients["answers"].chat.completions.create(
        model="chat", messages=[{"role": "user", "content": f"stream {CARD}"}], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text == f"stream {CARD}"  # streams are not screened on the way back


def test_metrics_count_hits_and_blocks(
    gateway: GatewayProcess, clients: dict[str, openai.OpenAI]
) -> None:
    # A hit of each kind of its own, whatever the module's other tests did before it.
    assert _refused(clients["plain"], f"metrics: my key is {AWS}").status_code == 400
    assert _refused(clients["answers"], f"metrics: pay with {CARD}").status_code == 400
    _chat(clients["masked"], f"metrics: write to {EMAIL}")
    text = httpx.get(f"{gateway.url}/metrics", timeout=30).text
    assert (
        'llmrelay_guardrail_hits_total{action="block",detector="aws_access_key",'
        'location="request",policy="secrets-block",rule="secrets"}' in text
    )
    assert (
        'llmrelay_guardrail_blocked_total{location="request",policy="secrets-block",'
        'rule="secrets"}' in text
    )
    assert (
        'llmrelay_guardrail_blocked_total{location="response",policy="answers",rule="card"}' in text
    )
    assert 'detector="email",location="request",policy="pii-mask",rule="pii"' in text


def test_a_binding_made_through_the_admin_api_applies_live(
    gateway: GatewayProcess, clients: dict[str, openai.OpenAI]
) -> None:
    admin = httpx.Client(
        base_url=f"{gateway.url}/api/admin",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=10,
    )
    with admin:
        keys = admin.get("/keys", params={"limit": 500}).json()["data"]
        (live,) = [k for k in keys if k["name"] == "live"]
        assert live["guardrails"] == []
        changed = admin.patch(
            f"/keys/{live['id']}", json={"guardrails": ["words"]}, headers={"If-Match": "*"}
        )
        assert changed.status_code == 200, changed.text
        assert changed.json()["guardrails"] == ["words"]
        deadline = time.monotonic() + 10
        while _chat_status(clients["live"], "the Bluebird plan") != 400:
            assert time.monotonic() < deadline, "the new binding never took effect"
            time.sleep(0.2)
        refused = _refused(clients["live"], "the Bluebird plan")
        assert "'words'" in refused.message and "codename" in refused.message
        hits: list[dict[str, Any]] = []
        while not hits:  # written by the recorder's next batch, off the request path
            assert time.monotonic() < deadline + 5, "no hit was recorded"
            hits = admin.get("/guardrails/hits", params={"key_id": live["id"]}).json()["data"]
            time.sleep(0 if hits else 0.1)
        assert hits and hits[0]["detector"] == "codename" and hits[0]["action"] == "block"
        tested = admin.post(
            f"/guardrails/{hits[0]['policy_id']}/test", json={"text": "about bluebird now"}
        ).json()
        assert tested == {
            "spans": [
                {"rule": "codename", "detector": "codename", "action": "block", "start": 6,
                 "end": 14},
            ],
            "masked": "about [CODENAME] now",
            "blocked": True,
        }  # fmt: skip
