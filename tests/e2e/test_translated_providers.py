"""Chat-completions clients (the official openai SDK) served by providers of other protocols
through a real gateway process: `anthropic` (Messages), `gemini` (generateContent) and
`azure_openai` (deployment URLs), all mocked by one real HTTP server speaking each wire
format. Streams, tools, usage and errors, each checked from the client's side and by what
reached the provider."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionToolParam

from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

KEY = "e2e-translated-key-0123456789"
SECRET = "sk-provider-secret-translated"
TEXT = "the quick brown fox jumps over the lazy dog"
TOOL: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Looks something up.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    },
}


def translated_config(upstream: MockUpstream) -> str:
    root = upstream.base_url.removesuffix("/v1")
    return f"""
providers:
  - {{slug: claude, type: anthropic, base_url: "{root}", api_key: {SECRET}}}
  - {{slug: google, type: gemini, base_url: "{root}", api_key: {SECRET}}}
  - {{slug: azure, type: azure_openai, base_url: "{root}", api_key: {SECRET},
      api_version: "2024-10-21"}}
models:
  - name: claude
    routes: [{{provider: claude, upstream_model: claude-test}}]
  - name: claude-rejects
    routes: [{{provider: claude, upstream_model: status-400}}]
  - name: claude-refused
    routes: [{{provider: claude, upstream_model: status-401}}]
  - name: claude-midstream
    routes: [{{provider: claude, upstream_model: overloaded-midstream}}]
  - name: gemini-drop
    routes: [{{provider: google, upstream_model: drop-after-2}}]
  - name: gemini
    routes: [{{provider: google, upstream_model: gemini-test}}]
  - name: azure
    routes: [{{provider: azure, upstream_model: my-deployment}}]
  - name: azure-filtered
    routes: [{{provider: azure, upstream_model: content-filter}}]
  - name: gemini-throttled
    retry: {{attempts: 2}}
    routes: [{{provider: google, upstream_model: throttle-first-1}}]
  - name: gemini-embed
    embedding: true
    routes: [{{provider: google, upstream_model: text-embedding-test}}]
  - name: azure-embed
    embedding: true
    routes: [{{provider: azure, upstream_model: embed-deployment}}]
  - name: claude-embed
    embedding: true
    routes: [{{provider: claude, upstream_model: no-such-api}}]
projects:
  - name: translated
    keys: [{{name: k, key: {KEY}}}]
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    yield from serving(tmp_path_factory.mktemp("translated"), translated_config(upstream))


@pytest.fixture(scope="module")
def client(gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(api_key=KEY, base_url=gateway.base_url, max_retries=0, timeout=15) as c:
        yield c


def _last(upstream: MockUpstream, fragment: str) -> Any:
    return [r for r in upstream.requests if fragment in r.path][-1]


@pytest.mark.parametrize("model", ["claude", "gemini", "azure"])
def test_a_completion_from_each_protocol_reads_as_chat(
    client: openai.OpenAI, upstream: MockUpstream, model: str
) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model=model,
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": TEXT},
        ],
        max_tokens=50,
    )
    completion = raw.parse()
    assert completion.model == model
    assert completion.choices[0].message.content == TEXT
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.completion_tokens == 9
    assert raw.headers["x-llmrelay-provider"] in ("claude", "google", "azure")


def test_what_reaches_anthropic(client: openai.OpenAI, upstream: MockUpstream) -> None:
    client.chat.completions.create(
        model="claude",
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
    )
    sent = _last(upstream, "/v1/messages")
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == SECRET
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert "Authorization" not in sent.headers and KEY not in repr(sent.headers)
    assert sent.body["model"] == "claude-test"
    assert sent.body["system"] in ("be brief", [{"type": "text", "text": "be brief"}])
    assert sent.body["messages"] == [{"role": "user", "content": "hi"}] or sent.body[
        "messages"
    ] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert isinstance(sent.body["max_tokens"], int)


def test_what_reaches_gemini_and_azure(client: openai.OpenAI, upstream: MockUpstream) -> None:
    client.chat.completions.create(model="gemini", messages=[{"role": "user", "content": "hi"}])
    sent = _last(upstream, ":generateContent")
    assert sent.path == "/v1beta/models/gemini-test:generateContent"
    assert sent.headers["x-goog-api-key"] == SECRET
    assert sent.body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]
    client.chat.completions.create(model="azure", messages=[{"role": "user", "content": "hi"}])
    sent = _last(upstream, "/openai/deployments/")
    assert sent.path == "/openai/deployments/my-deployment/chat/completions"
    assert sent.headers["api-key"] == SECRET


@pytest.mark.parametrize("model", ["claude", "gemini", "azure"])
def test_streams_from_each_protocol_read_as_chat_chunks(client: openai.OpenAI, model: str) -> None:
    chunks = list(
        client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": TEXT}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == TEXT
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert {c.model for c in chunks} == {model}
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == 9


@pytest.mark.parametrize("model", ["claude", "gemini"])
def test_tool_calls_come_back_as_chat_tool_calls(client: openai.OpenAI, model: str) -> None:
    completion = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "call:weather in Paris"}],
        tools=[TOOL],
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls is not None and len(calls) == 1
    function = calls[0].function  # type: ignore[union-attr]
    assert function.name == "lookup"
    assert json.loads(function.arguments) == {"query": "weather in Paris"}
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "call:weather in Rome"}],
        tools=[TOOL],
        stream=True,
    )
    names, arguments, finish = [], "", None
    for chunk in stream:
        for delta_call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            if delta_call.function and delta_call.function.name:
                names.append(delta_call.function.name)
            if delta_call.function and delta_call.function.arguments:
                arguments += delta_call.function.arguments
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    assert names == ["lookup"] and json.loads(arguments) == {"query": "weather in Rome"}
    assert finish == "tool_calls"


def test_provider_errors_keep_their_meaning(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as rejected:
        client.chat.completions.create(
            model="claude-rejects", messages=[{"role": "user", "content": "x"}]
        )
    assert rejected.value.status_code == 400
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(
            model="claude-refused", messages=[{"role": "user", "content": "x"}]
        )
    assert refused.value.status_code == 502  # the gateway's credential, not the client's
    with pytest.raises(openai.BadRequestError) as filtered:
        client.chat.completions.create(
            model="azure-filtered", messages=[{"role": "user", "content": "x"}]
        )
    assert filtered.value.code == "content_filter"


def test_what_a_protocol_cannot_say_is_a_400_naming_the_field(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="claude", messages=[{"role": "user", "content": "x"}], n=2
        )
    assert refused.value.param == "n"


@pytest.mark.parametrize(
    ("model", "said"),
    [("claude-midstream", "Overloaded"), ("gemini-drop", "stream broke off")],
)
def test_a_translated_stream_that_fails_after_its_first_byte_ends_with_an_error(
    client: openai.OpenAI, model: str, said: str
) -> None:
    received: list[str] = []
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": TEXT}], stream=True
    )

    def read() -> None:
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                received.append(chunk.choices[0].delta.content)

    with pytest.raises(openai.APIError, match=said):
        read()
    assert received and "".join(received) != TEXT


def test_embeddings_from_gemini_and_azure(client: openai.OpenAI, upstream: MockUpstream) -> None:
    made = client.embeddings.create(model="gemini-embed", input=["one", "two words"])
    assert made.model == "gemini-embed"
    assert [d.index for d in made.data] == [0, 1]
    # The SDK asked for base64 (its default) and decoded it: the mock's vectors come back.
    assert made.data[0].embedding == [3.0, 1.0, float(ord("o"))]
    assert made.data[1].embedding == [9.0, 2.0, float(ord("t"))]
    assert made.usage.prompt_tokens >= 2  # Gemini reports none: the gateway's estimate
    sent = _last(upstream, ":batchEmbedContents")
    assert sent.path == "/v1beta/models/text-embedding-test:batchEmbedContents"
    assert [r["model"] for r in sent.body["requests"]] == ["models/text-embedding-test"] * 2
    sized = client.embeddings.create(
        model="gemini-embed", input="x", dimensions=5, encoding_format="float"
    )
    assert len(sized.data[0].embedding) == 5
    azure = client.embeddings.create(model="azure-embed", input="hello")
    assert azure.model == "azure-embed" and len(azure.data) == 1
    assert _last(upstream, "/openai/deployments/").path == (
        "/openai/deployments/embed-deployment/embeddings"
    )
    with pytest.raises(openai.APIStatusError) as none:
        client.embeddings.create(model="claude-embed", input="x")
    assert none.value.status_code == 502 and "embeddings" in none.value.message


def test_geminis_retry_delay_in_the_body_is_honoured(
    client: openai.OpenAI, upstream: MockUpstream
) -> None:
    """Google sends no Retry-After header on a 429, only a RetryInfo detail of 1 s in the
    body: the retry waits that long, not the backoff's quarter of a second."""
    started = time.monotonic()
    completion = client.chat.completions.create(
        model="gemini-throttled", messages=[{"role": "user", "content": "patience"}]
    )
    assert completion.choices[0].message.content == "patience"
    assert time.monotonic() - started >= 0.9
    assert upstream.seen["throttle-first-1"] == 2
