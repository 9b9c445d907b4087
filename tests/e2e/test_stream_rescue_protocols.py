"""Mid-stream rescue (issue 35 item 1) for the other client protocols, end to end: an
Anthropic Messages, OpenAI Responses or Gemini client streams from a gateway process whose
first route breaks off after content began (the mock upstream cuts the connection after N
pieces), over real sockets; a model with `stream_rescue` continues the answer from a route
that takes the text sent as a prefill, and the client sees one stream in its own protocol:
the same ids and indexes, only the new text, one end with one usage summing every route's.
Where the rescue is refused (not plain text) or off, the stream ends with the protocol's
clean error event, as before."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import orjson
import pytest

from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream
from tests.support.stored_attempts import stored_attempts

KEY = "e2e-rescue-protocols-key-0123"
PROMPT = "one two three four five six seven eight"


def rescue_config(upstream: MockUpstream) -> str:
    return f"""
providers:
  - slug: first
    type: openai_compatible
    base_url: {upstream.base_url}
    timeout_s: 10
  - slug: stalling
    type: openai_compatible
    base_url: {upstream.base_url}
    timeout_s: 10
    stream_idle_timeout_s: 1
  - slug: vllm
    type: openai_compatible
    preset: vllm
    base_url: {upstream.base_url}
    timeout_s: 10
  - slug: claude
    type: anthropic
    base_url: {upstream.root_url}
    api_key: sk-ant-mock
    timeout_s: 10
  - slug: google
    type: gemini
    base_url: {upstream.root_url}
    api_key: AIza-mock
    timeout_s: 10
models:
  - name: m-bridged
    stream_rescue: true
    routes:
      - {{provider: first, upstream_model: drop-after-3-mb, priority: 0}}
      - {{provider: vllm, upstream_model: echo-mb, priority: 1}}
  - name: m-native
    stream_rescue: true
    routes:
      - provider: claude
        upstream_model: drop-after-3-mn
        priority: 0
        pricing: {{input_per_mtok: 1, output_per_mtok: 2}}
      - provider: vllm
        upstream_model: echo-mn
        priority: 1
        pricing: {{input_per_mtok: 3, output_per_mtok: 4}}
  - name: m-claude
    stream_rescue: true
    routes:
      - {{provider: first, upstream_model: drop-after-3-mc, priority: 0}}
      - {{provider: claude, upstream_model: echo-mc, priority: 1}}
  - name: m-off
    routes:
      - {{provider: first, upstream_model: drop-after-3-mo, priority: 0}}
      - {{provider: vllm, upstream_model: echo-mo, priority: 1}}
  - name: m-tool
    stream_rescue: true
    routes:
      - {{provider: first, upstream_model: drop-after-2-mt, priority: 0}}
      - {{provider: vllm, upstream_model: echo-mt, priority: 1}}
  - name: r-bridged
    stream_rescue: true
    routes:
      - {{provider: first, upstream_model: drop-after-3-rb, priority: 0}}
      - {{provider: vllm, upstream_model: echo-rb, priority: 1}}
  - name: r-claude
    stream_rescue: true
    routes:
      - {{provider: first, upstream_model: drop-after-3-rc, priority: 0}}
      - {{provider: claude, upstream_model: echo-rc, priority: 1}}
  - name: r-stalled
    stream_rescue: true
    routes:
      - {{provider: stalling, upstream_model: stall-after-3-rs, priority: 0}}
      - {{provider: vllm, upstream_model: echo-rs, priority: 1}}
  - name: r-off
    routes:
      - {{provider: first, upstream_model: drop-after-3-ro, priority: 0}}
      - {{provider: vllm, upstream_model: echo-ro, priority: 1}}
  - name: g-native
    stream_rescue: true
    routes:
      - {{provider: google, upstream_model: drop-after-2-gn, priority: 0}}
      - {{provider: vllm, upstream_model: echo-gn, priority: 1}}
  - name: g-gemini
    stream_rescue: true
    routes:
      - {{provider: google, upstream_model: drop-after-2-gg, priority: 0}}
      - {{provider: google, upstream_model: echo-gg, priority: 1}}
  - name: g-claude
    stream_rescue: true
    routes:
      - {{provider: first, upstream_model: drop-after-3-gc, priority: 0}}
      - {{provider: claude, upstream_model: echo-gc, priority: 1}}
  - name: g-off
    routes:
      - {{provider: google, upstream_model: drop-after-2-go, priority: 0}}
      - {{provider: vllm, upstream_model: echo-go, priority: 1}}
projects:
  - name: rescue
    keys:
      - {{name: k, key: {KEY}}}
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    # Started with a generous ceiling: on a loaded machine a gateway's start takes minutes.
    folder = tmp_path_factory.mktemp("rescue-protocols")
    process = GatewayProcess(folder, config=rescue_config(upstream)).start(timeout_s=600)
    yield process
    assert process.stop(timeout_s=120) == 0, process.logs()


def _events(response: httpx.Response) -> list[tuple[str | None, dict[str, Any]]]:
    """The (event name, data) of every server-sent event of a whole body."""
    events = []
    for block in response.text.replace("\r\n", "\n").split("\n\n"):
        name, data = None, None
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data = line[5:].strip()
        if data:
            events.append((name, orjson.loads(data)))
    return events


def _attempts(gateway: GatewayProcess, request_id: str) -> tuple[Any, list[tuple[Any, ...]]]:
    return stored_attempts(gateway.database_url, request_id)


def _asked(upstream: MockUpstream, model: str, since: int = 0) -> list[dict[str, Any]]:
    """The bodies sent upstream for `model`, from the `since`-th request on (a test that
    counts its own continuations: other tests of the module, in any order, use the same
    upstream models)."""
    return [r.body for r in upstream.requests[since:] if r.body.get("model") == model]


# -- Anthropic Messages ----------------------------------------------------------------------


def _messages(gateway: GatewayProcess, model: str, **extra: Any) -> httpx.Response:
    body = {
        "model": model,
        "max_tokens": 100,
        "stream": True,
        "messages": [{"role": "user", "content": PROMPT}],
        **extra,
    }
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    return httpx.post(f"{gateway.url}/v1/messages", json=body, headers=headers, timeout=60)


def _messages_text(events: list[tuple[str | None, dict[str, Any]]]) -> str:
    return "".join(e["delta"].get("text", "") for n, e in events if n == "content_block_delta")


@pytest.mark.parametrize(
    ("model", "continued_by"),
    [("m-bridged", "echo-mb"), ("m-native", "echo-mn"), ("m-claude", "echo-mc")],
)
def test_a_broken_messages_stream_is_continued_in_the_same_message(
    gateway: GatewayProcess, upstream: MockUpstream, model: str, continued_by: str
) -> None:
    since = len(upstream.requests)
    response = _messages(gateway, model)
    assert response.status_code == 200
    events = _events(response)
    names = [n for n, _ in events if n != "ping"]
    assert _messages_text(events) == PROMPT
    # One message, one text block, ended once, as Anthropic ends a stream.
    assert names[0] == "message_start" and names.count("message_start") == 1
    assert names.count("content_block_start") == 1
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert {e["index"] for n, e in events if n and n.startswith("content_block")} == {0}
    assert "error" not in names
    final = next(e for n, e in events if n == "message_delta")
    assert final["delta"]["stop_reason"] == "end_turn"
    # The continuation was asked with the text sent as a final assistant message, without
    # its trailing space, and gave only the words after it.
    asked = _asked(upstream, continued_by, since)
    assert len(asked) == 1
    last = asked[0]["messages"][-1]
    assert last["role"] == "assistant"
    said = last["content"] if isinstance(last["content"], str) else last["content"][0]["text"]
    assert said == "one two three"
    # One usage: the continuation's (5 words out) plus the broken part's (3 deltas sent).
    assert final["usage"]["output_tokens"] == 5 + 3
    record, attempts = _attempts(gateway, response.headers["x-request-id"])
    assert record[:2] == (200, None)
    assert record[3] == 5 + 3
    assert [a[1:4] for a in attempts] == [
        ("stream", 200, "stream_interrupted"),
        ("fallback", 200, "ok"),
    ]


def test_each_part_of_a_rescued_stream_is_billed_at_its_own_routes_price(
    gateway: GatewayProcess,
) -> None:
    response = _messages(gateway, "m-native")
    assert _messages_text(_events(response)) == PROMPT
    request_id = response.headers["x-request-id"]
    _attempts(gateway, request_id)  # once written
    path = gateway.database_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        record = conn.execute(
            "SELECT input_tokens, output_tokens, cost_micros FROM request_records"
            " WHERE request_id = ?",
            (request_id,),
        ).fetchone()
        parts = conn.execute(
            "SELECT provider, input_tokens, output_tokens, cost_micros FROM request_attempts"
            " WHERE request_id = ? ORDER BY attempt",
            (request_id,),
        ).fetchall()
    # The broken part: the input Anthropic reported in message_start (8 words), 3 text
    # deltas sent (it reported no output: estimated), at 1 and 2 micro-USD a token. The
    # continuation: vLLM's reported 11 in (the prompt and the prefill), 5 out, at 3 and 4.
    assert [tuple(p) for p in parts] == [
        ("claude", 8, 3, 8 * 1 + 3 * 2),
        ("vllm", 11, 5, 11 * 3 + 5 * 4),
    ]
    assert tuple(record) == (8 + 11, 3 + 5, 14 + 53)


def test_the_anthropic_sdk_reads_a_rescued_stream_as_one_message(gateway: GatewayProcess) -> None:
    client = anthropic.Anthropic(api_key=KEY, base_url=gateway.url, max_retries=0, timeout=60)
    asked: list[anthropic.types.MessageParam] = [{"role": "user", "content": PROMPT}]
    with (
        client,
        client.messages.stream(model="m-bridged", max_tokens=100, messages=asked) as stream,
    ):
        message = stream.get_final_message()
    assert [b.text for b in message.content if b.type == "text"] == [PROMPT]
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 5 + 3


def test_a_messages_stream_without_rescue_or_cut_in_a_tool_call_ends_with_the_error(
    gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    off = _events(_messages(gateway, "m-off"))
    assert off[-1][0] == "error"
    assert not _asked(upstream, "echo-mo")
    tools = [{"name": "lookup", "input_schema": {"type": "object"}}]
    tool = _events(_messages(gateway, "m-tool", tools=tools))
    assert tool[-1][0] == "error"
    assert "message_stop" not in [n for n, _ in tool]
    assert not _asked(upstream, "echo-mt")  # refused: tool arguments cannot be continued


# -- OpenAI Responses ------------------------------------------------------------------------


def _responses(gateway: GatewayProcess, model: str) -> httpx.Response:
    body = {"model": model, "input": PROMPT, "stream": True}
    headers = {"authorization": f"Bearer {KEY}"}
    return httpx.post(f"{gateway.url}/v1/responses", json=body, headers=headers, timeout=60)


@pytest.mark.parametrize(
    ("model", "continued_by"), [("r-bridged", "echo-rb"), ("r-claude", "echo-rc")]
)
def test_a_broken_responses_stream_is_continued_in_the_same_response(
    gateway: GatewayProcess, upstream: MockUpstream, model: str, continued_by: str
) -> None:
    since = len(upstream.requests)
    response = _responses(gateway, model)
    assert response.status_code == 200
    events = _events(response)
    kinds = [e["type"] for _, e in events]
    deltas = [e for _, e in events if e["type"] == "response.output_text.delta"]
    assert "".join(d["delta"] for d in deltas) == PROMPT
    assert {(d["item_id"], d["output_index"], d["content_index"]) for d in deltas} == {
        (deltas[0]["item_id"], 0, 0)
    }
    numbers = [e["sequence_number"] for _, e in events]
    assert numbers == sorted(set(numbers))  # numbered on, never again
    assert kinds.count("response.created") == 1 and "error" not in kinds
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    created = next(e["response"] for _, e in events if e["type"] == "response.created")
    completed = events[-1][1]["response"]
    assert completed["id"] == created["id"] and completed["model"] == model
    assert completed["status"] == "completed"
    assert completed["output"][0]["content"][0]["text"] == PROMPT
    assert events[-4][1]["text"] == PROMPT
    assert completed["usage"]["output_tokens"] == 5 + 3
    assert len(_asked(upstream, continued_by, since)) == 1
    record, attempts = _attempts(gateway, response.headers["x-request-id"])
    assert record[:2] == (200, None) and record[3] == 5 + 3
    assert [a[1:4] for a in attempts] == [
        ("stream", 200, "stream_interrupted"),
        ("fallback", 200, "ok"),
    ]


def test_a_stalled_responses_stream_is_continued_too(gateway: GatewayProcess) -> None:
    response = _responses(gateway, "r-stalled")
    events = _events(response)
    deltas = [e["delta"] for _, e in events if e["type"] == "response.output_text.delta"]
    assert "".join(deltas) == PROMPT
    assert events[-1][1]["type"] == "response.completed"
    _, attempts = _attempts(gateway, response.headers["x-request-id"])
    assert [a[1:4] for a in attempts] == [
        ("stream", 200, "stream_stalled"),
        ("fallback", 200, "ok"),
    ]


def test_a_responses_stream_without_rescue_ends_with_the_error(
    gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    events = _events(_responses(gateway, "r-off"))
    assert events[-1][1]["type"] == "error"
    assert not _asked(upstream, "echo-ro")


# -- Gemini ----------------------------------------------------------------------------------


def _gemini(gateway: GatewayProcess, model: str, *, sse: bool = True) -> httpx.Response:
    body = {"contents": [{"role": "user", "parts": [{"text": PROMPT}]}]}
    query = "?alt=sse" if sse else ""
    url = f"{gateway.url}/v1beta/models/{model}:streamGenerateContent{query}"
    return httpx.post(url, json=body, headers={"x-goog-api-key": KEY}, timeout=60)


def _gemini_text(responses: list[dict[str, Any]]) -> str:
    return "".join(
        p.get("text", "")
        for r in responses
        for c in r.get("candidates", [])
        for p in c["content"]["parts"]
    )


@pytest.mark.parametrize(
    ("model", "continued_by", "sse"),
    [
        ("g-native", "echo-gn", True),
        ("g-gemini", "echo-gg", True),
        ("g-claude", "echo-gc", False),
    ],
)
def test_a_broken_gemini_stream_is_continued_in_the_same_candidate(
    gateway: GatewayProcess, upstream: MockUpstream, model: str, continued_by: str, sse: bool
) -> None:
    response = _gemini(gateway, model, sse=sse)
    assert response.status_code == 200
    # Google's framings: server-sent events, or one JSON array
    responses = [e for _, e in _events(response)] if sse else orjson.loads(response.content)
    assert _gemini_text(responses) == PROMPT
    assert not any("error" in r for r in responses)
    assert len({r.get("responseId") for r in responses}) == 1
    assert {r.get("modelVersion") for r in responses} == {model}
    assert {c["index"] for r in responses for c in r["candidates"]} == {0}
    finishes = [c.get("finishReason") for r in responses for c in r["candidates"]]
    assert [f for f in finishes if f] == ["STOP"] and finishes[-1] == "STOP"
    usage = responses[-1]["usageMetadata"]
    asked = [
        r
        for r in upstream.requests
        if continued_by in r.path or r.body.get("model") == continued_by
    ]
    assert len(asked) == 1
    if model == "g-gemini":  # verified: the last word sent is said again, passed on once
        assert asked[0].body["contents"][-1] == {
            "role": "model",
            "parts": [{"text": "one two three"}],
        }
        assert usage["candidatesTokenCount"] == 5 + 4
    else:
        # native: the 4 words Gemini reported, then vLLM's 4; bridged: 3 chunks, Claude's 5
        assert usage["candidatesTokenCount"] == 8
    record, attempts = _attempts(gateway, response.headers["x-request-id"])
    assert record[:2] == (200, None)
    assert record[3] == usage["candidatesTokenCount"]
    assert [a[1:4] for a in attempts] == [
        ("stream", 200, "stream_interrupted"),
        ("fallback", 200, "ok"),
    ]


def test_a_gemini_stream_without_rescue_ends_with_the_error(
    gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    responses = [e for _, e in _events(_gemini(gateway, "g-off"))]
    assert "error" in responses[-1]
    assert not _asked(upstream, "echo-go")
