"""Mid-stream rescue (issue 35 item 1), end to end: an OpenAI client streams from a gateway
process whose first route breaks or stalls after content began, over real sockets to the mock
upstream; a model with `stream_rescue` continues the answer from a vLLM route (the text sent
as a final assistant message, `continue_final_message`), and the client sees one seamless
stream. Without rescue, or where no route can continue, the stream ends with today's clean
in-band error."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream
from tests.support.stored_attempts import stored_attempts

KEY = "e2e-rescue-key-0123456789"
PROMPT = "one two three four five six seven eight"


def rescue_config(upstream: MockUpstream) -> str:
    return f"""
providers:
  - slug: first
    type: openai_compatible
    base_url: {upstream.base_url}
    timeout_s: 10
    stream_idle_timeout_s: 0.5
  - slug: vllm
    type: openai_compatible
    preset: vllm
    base_url: {upstream.base_url}
    timeout_s: 10
  - slug: plain
    type: openai_compatible
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
  - name: rescued
    stream_rescue: true
    routes:
      - {{provider: first, upstream_model: drop-after-3-r, priority: 0}}
      - {{provider: vllm, upstream_model: echo-r, priority: 1}}
  - name: stalled
    stream_rescue: true
    routes:
      - {{provider: first, upstream_model: stall-after-3-s, priority: 0}}
      - {{provider: vllm, upstream_model: echo-s, priority: 1}}
  - name: unrescued
    routes:
      - {{provider: first, upstream_model: drop-after-3-u, priority: 0}}
      - {{provider: vllm, upstream_model: echo-u, priority: 1}}
  - name: refusing
    stream_rescue: true
    routes:
      - {{provider: first, upstream_model: drop-after-3-x, priority: 0}}
      - {{provider: vllm, upstream_model: no-prefill-x, priority: 1}}
  - name: incapable
    stream_rescue: true
    routes:
      - {{provider: first, upstream_model: drop-after-3-i, priority: 0}}
      - {{provider: plain, upstream_model: echo-i, priority: 1}}
  - name: tooling
    stream_rescue: true
    routes:
      - {{provider: first, upstream_model: drop-after-2-t, priority: 0}}
      - {{provider: vllm, upstream_model: echo-t, priority: 1}}
  - name: to-claude
    stream_rescue: true
    routes:
      - {{provider: first, upstream_model: drop-after-3-c, priority: 0}}
      - {{provider: claude, upstream_model: echo-c, priority: 1}}
  - name: to-gemini
    stream_rescue: true
    routes:
      - {{provider: first, upstream_model: drop-after-3-g, priority: 0}}
      - {{provider: google, upstream_model: echo-g, priority: 1}}
  - name: to-fresh
    stream_rescue: true
    routes:
      - {{provider: first, upstream_model: drop-after-3-f, priority: 0}}
      - {{provider: google, upstream_model: fresh-f, priority: 1}}
projects:
  - name: rescue
    keys:
      - {{name: k, key: {KEY}}}
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    yield from serving(tmp_path_factory.mktemp("rescue"), rescue_config(upstream))


@pytest.fixture
def client(gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(api_key=KEY, base_url=gateway.base_url, max_retries=0, timeout=60) as made:
        yield made


def _stream(client: openai.OpenAI, model: str, **extra: Any) -> tuple[list[Any], str]:
    """Every chunk the client got and its request id."""
    raw = client.chat.completions.with_raw_response.create(
        model=model,
        messages=[{"role": "user", "content": PROMPT}],
        stream=True,
        stream_options={"include_usage": True},
        **extra,
    )
    request_id = raw.http_response.headers["x-request-id"]
    return list(raw.parse()), request_id


def _text(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def _attempts(gateway: GatewayProcess, request_id: str) -> tuple[Any, list[tuple[Any, ...]]]:
    return stored_attempts(gateway.database_url, request_id)


def _continued(upstream: MockUpstream, model: str) -> dict[str, Any]:
    sent = [r.body for r in upstream.chat_requests() if r.body.get("model") == model]
    assert len(sent) == 1
    return sent[0]


@pytest.mark.parametrize(("model", "outcome"), [("rescued", "break"), ("stalled", "stall")])
def test_a_broken_or_stalled_stream_is_continued_seamlessly(
    client: openai.OpenAI,
    upstream: MockUpstream,
    gateway: GatewayProcess,
    model: str,
    outcome: str,
) -> None:
    rescued = _rescues(gateway, "rescued")
    chunks, request_id = _stream(client, model)
    assert _text(chunks) == PROMPT  # the first part + the continuation, exactly
    assert _rescues(gateway, "rescued") == rescued + 1
    assert {c.id for c in chunks} == {"chatcmpl-upstream"}  # one id: the first route's
    assert {c.model for c in chunks} == {model}
    assert {c.created for c in chunks} == {chunks[0].created}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    roles = [c.choices[0].delta.role for c in chunks if c.choices and c.choices[0].delta.role]
    assert roles == ["assistant"]  # the continuation's opening is not repeated
    # The continuation route got the text sent as a final assistant message to continue.
    continuation = _continued(upstream, f"echo-{model[0]}")
    assert continuation["messages"][-1] == {"role": "assistant", "content": "one two three"}
    assert continuation["continue_final_message"] is True
    assert continuation["add_generation_prompt"] is False
    # One final usage: the continuation's (its prompt holds the prefill: 8 + 3 words, its
    # output the 5 words after it) plus the broken part's estimate (3 content events).
    usages = [c.usage for c in chunks if c.usage is not None]
    assert len(usages) == 1
    usage = usages[0]
    assert usage.completion_tokens == 5 + 3
    assert usage.prompt_tokens > 8 + 3
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    record, attempts = _attempts(gateway, request_id)
    assert record[:2] == (200, None)
    assert record[3] == usage.completion_tokens
    lost = "stream_stalled" if outcome == "stall" else "stream_interrupted"
    assert attempts == [(1, "stream", 200, lost, "first"), (2, "fallback", 200, "ok", "vllm")]


def _rescues(gateway: GatewayProcess, outcome: str) -> float:
    for line in httpx.get(f"{gateway.url}/metrics").text.splitlines():
        if line.startswith(f'llmrelay_stream_rescues_total{{outcome="{outcome}"}}'):
            return float(line.split()[-1])
    return 0.0


def _ends_with_error(chunks: list[Any]) -> None:
    """The stream ended with the clean in-band error (no finish reason, no [DONE])."""
    assert not any(c.choices and c.choices[0].finish_reason for c in chunks)


@pytest.mark.parametrize("model", ["unrescued", "refusing", "incapable"])
def test_without_a_route_that_continues_the_stream_ends_with_the_clean_error(
    client: openai.OpenAI, upstream: MockUpstream, gateway: GatewayProcess, model: str
) -> None:
    failures = _rescues(gateway, "failed")
    with pytest.raises(openai.APIError) as failed:
        _stream(client, model)
    assert "stream broke off" in str(failed.value)
    # off: no rescue is tried; on: tried, and no route continued it
    assert _rescues(gateway, "failed") == failures + (model != "unrescued")
    sent_on = {"unrescued": "echo-u", "refusing": "no-prefill-x", "incapable": "echo-i"}[model]
    asked = [r.body for r in upstream.chat_requests() if r.body.get("model") == sent_on]
    # off: nothing is asked; a route refusing the prefill is asked once; one that cannot
    # continue (a plain OpenAI-compatible server would answer anew) is never asked
    assert len(asked) == (1 if model == "refusing" else 0)


def test_a_tool_call_cut_mid_arguments_is_not_rescued(
    client: openai.OpenAI, upstream: MockUpstream, gateway: GatewayProcess
) -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    refused = _rescues(gateway, "refused")
    with pytest.raises(openai.APIError) as failed:
        _stream(client, "tooling", tools=tools)
    assert "stream broke off" in str(failed.value)
    assert _rescues(gateway, "refused") == refused + 1
    assert not [r for r in upstream.chat_requests() if r.body.get("model") == "echo-t"]


def test_a_broken_stream_is_continued_by_an_anthropic_prefill(
    client: openai.OpenAI, upstream: MockUpstream, gateway: GatewayProcess
) -> None:
    chunks, request_id = _stream(client, "to-claude")
    assert _text(chunks) == PROMPT
    assert {c.id for c in chunks} == {"chatcmpl-upstream"}
    assert {c.model for c in chunks} == {"to-claude"}
    # Anthropic got the text as a final assistant turn, without its trailing space (the API
    # refuses a prefill ending in whitespace), and no vLLM-only fields.
    sent = [r.body for r in upstream.requests if r.body.get("model") == "echo-c"]
    assert len(sent) == 1
    last = sent[0]["messages"][-1]
    assert last["role"] == "assistant"
    assert (
        str(last["content"] if isinstance(last["content"], str) else last["content"][0]["text"])
        == "one two three"
    )
    assert "continue_final_message" not in sent[0]
    usages = [c.usage for c in chunks if c.usage is not None]
    assert len(usages) == 1 and usages[0].completion_tokens == 5 + 3
    record, attempts = _attempts(gateway, request_id)
    assert record[:2] == (200, None)
    assert [a[1:] for a in attempts] == [
        ("stream", 200, "stream_interrupted", "first"),
        ("fallback", 200, "ok", "claude"),
    ]


def test_a_broken_stream_is_continued_by_gemini_once_it_said_the_last_word_again(
    client: openai.OpenAI, upstream: MockUpstream, gateway: GatewayProcess
) -> None:
    chunks, request_id = _stream(client, "to-gemini")
    assert _text(chunks) == PROMPT  # "three" was said by both: passed on once
    assert {c.id for c in chunks} == {"chatcmpl-upstream"}
    # Gemini got a final model turn without the last word sent, which it then said again.
    sent = [r for r in upstream.requests if "echo-g:" in r.path]
    assert len(sent) == 1
    assert sent[0].body["contents"][-1] == {"role": "model", "parts": [{"text": "one two"}]}
    usages = [c.usage for c in chunks if c.usage is not None]
    # Gemini's output (" three" again and the 5 words after it) plus the broken part's 3.
    assert len(usages) == 1 and usages[0].completion_tokens == 6 + 3
    record, attempts = _attempts(gateway, request_id)
    assert record[:2] == (200, None)
    assert [a[1:] for a in attempts] == [
        ("stream", 200, "stream_interrupted", "first"),
        ("fallback", 200, "ok", "google"),
    ]


def test_a_gemini_route_that_answers_anew_is_not_spliced_in(
    client: openai.OpenAI, upstream: MockUpstream, gateway: GatewayProcess
) -> None:
    failures = _rescues(gateway, "failed")
    with pytest.raises(openai.APIError) as failed:
        _stream(client, "to-fresh")
    assert "stream broke off" in str(failed.value)
    assert _rescues(gateway, "failed") == failures + 1
    assert len([r for r in upstream.requests if "fresh-f:" in r.path]) == 1
