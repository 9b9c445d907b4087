"""Anthropic Messages clients (the official anthropic SDK) through a real gateway process:
passed through to an anthropic provider, bridged through chat to an OpenAI-compatible one
and to a Gemini one; streams, tools, token counting, the model list and the SDK's error
classes. The providers are one real mock server speaking each wire format."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import pytest
from anthropic.types import MessageParam, ToolParam

from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

KEY = "e2e-messages-key-0123456789"
NARROW_KEY = "e2e-messages-narrow-0123456789"
SECRET = "sk-provider-secret-messages"
TEXT = "the quick brown fox jumps over the lazy dog"
TOOL: ToolParam = {
    "name": "lookup",
    "description": "Looks something up.",
    "input_schema": {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
    },
}


def messages_config(upstream: MockUpstream) -> str:
    root = upstream.base_url.removesuffix("/v1")
    return f"""
providers:
  - {{slug: claude, type: anthropic, base_url: "{root}", api_key: {SECRET}}}
  - {{slug: compat, type: openai_compatible, base_url: "{upstream.base_url}", api_key: {SECRET}}}
  - {{slug: google, type: gemini, base_url: "{root}", api_key: {SECRET}}}
models:
  - name: claude
    routes: [{{provider: claude, upstream_model: claude-test}}]
  - name: compat
    routes: [{{provider: compat, upstream_model: echo}}]
  - name: gemini
    routes: [{{provider: google, upstream_model: gemini-test}}]
  - name: claude-rejects
    routes: [{{provider: claude, upstream_model: status-400}}]
  - name: claude-midstream
    routes: [{{provider: claude, upstream_model: overloaded-midstream}}]
  - name: claude-drop
    routes: [{{provider: claude, upstream_model: drop-after-2}}]
  - name: compat-drop
    routes: [{{provider: compat, upstream_model: drop-after-2}}]
projects:
  - name: messages
    keys:
      - {{name: k, key: {KEY}}}
      - {{name: narrow, key: {NARROW_KEY}, models: [compat]}}
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    yield from serving(tmp_path_factory.mktemp("messages"), messages_config(upstream))


@pytest.fixture(scope="module")
def client(gateway: GatewayProcess) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(api_key=KEY, base_url=gateway.url, max_retries=0, timeout=15) as made:
        yield made


def _last(upstream: MockUpstream, fragment: str) -> dict[str, object]:
    return [r for r in upstream.requests if fragment in r.path][-1].body


@pytest.mark.parametrize("model", ["claude", "compat", "gemini"])
def test_a_message_from_every_kind_of_provider(client: anthropic.Anthropic, model: str) -> None:
    raw = client.messages.with_raw_response.create(
        model=model,
        max_tokens=100,
        system="be brief",
        messages=[{"role": "user", "content": TEXT}],
    )
    message = raw.parse()
    assert message.model == model
    assert message.role == "assistant"
    assert [b.text for b in message.content if b.type == "text"] == [TEXT]
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 9
    assert raw.headers["x-llmrelay-model"] == model


def test_an_anthropic_provider_gets_the_body_and_the_clients_version_headers(
    client: anthropic.Anthropic, upstream: MockUpstream
) -> None:
    client.messages.create(
        model="claude",
        max_tokens=77,
        messages=[{"role": "user", "content": "hi"}],
        metadata={"user_id": "u-1"},
        extra_headers={"anthropic-beta": "some-beta-2025-01-01", "anthropic-version": "2023-01-01"},
        extra_body={"vendor_field": 1},
    )
    sent = [r for r in upstream.requests if r.path == "/v1/messages"][-1]
    assert sent.body["model"] == "claude-test"
    assert sent.body["max_tokens"] == 77
    assert sent.body["metadata"] == {"user_id": "u-1"}
    assert sent.body["vendor_field"] == 1  # same protocol: unknown fields pass through
    assert sent.headers["x-api-key"] == SECRET
    assert sent.headers["anthropic-beta"] == "some-beta-2025-01-01"
    assert sent.headers["anthropic-version"] == "2023-01-01"  # the client's, not the default
    assert KEY not in repr(sent.headers)


def test_a_bridged_provider_gets_chat(client: anthropic.Anthropic, upstream: MockUpstream) -> None:
    client.messages.create(
        model="compat", max_tokens=5, system="sys", messages=[{"role": "user", "content": "hi"}]
    )
    body = _last(upstream, "/chat/completions")
    assert body["model"] == "echo"
    assert body["messages"][0] == {"role": "system", "content": "sys"}  # type: ignore[index]
    assert body["max_tokens"] == 5


@pytest.mark.parametrize("model", ["claude", "compat", "gemini"])
def test_streams_from_every_kind_of_provider(client: anthropic.Anthropic, model: str) -> None:
    with client.messages.stream(
        model=model, max_tokens=100, messages=[{"role": "user", "content": TEXT}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == TEXT
    assert final.model == model
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 9


@pytest.mark.parametrize("model", ["claude", "gemini"])
def test_tool_use(client: anthropic.Anthropic, model: str) -> None:
    message = client.messages.create(
        model=model,
        max_tokens=100,
        tools=[TOOL],
        messages=[{"role": "user", "content": "call:weather in Paris"}],
    )
    assert message.stop_reason == "tool_use"
    uses = [b for b in message.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "lookup"
    assert uses[0].input == {"query": "weather in Paris"}
    with client.messages.stream(
        model=model,
        max_tokens=100,
        tools=[TOOL],
        messages=[{"role": "user", "content": "call:weather in Rome"}],
    ) as stream:
        final = stream.get_final_message()
    streamed = [b for b in final.content if b.type == "tool_use"]
    assert [(b.name, b.input) for b in streamed] == [("lookup", {"query": "weather in Rome"})]


def test_count_tokens(client: anthropic.Anthropic) -> None:
    asked = client.messages.count_tokens(
        model="claude", messages=[{"role": "user", "content": "one two three four"}]
    )
    assert asked.input_tokens == 4  # the provider's count (the mock counts words)
    estimated = client.messages.with_raw_response.count_tokens(
        model="compat", messages=[{"role": "user", "content": "x" * 400}]
    )
    assert estimated.headers["x-llmrelay-estimated"] == "true"
    assert 100 <= estimated.parse().input_tokens <= 130


def test_the_model_list_in_anthropics_shape(client: anthropic.Anthropic) -> None:
    ids = [m.id for m in client.models.list()]
    claude = ["claude", "claude-drop", "claude-midstream", "claude-rejects"]
    assert ids == sorted([*claude, "compat", "compat-drop", "gemini"])


def test_errors_are_the_sdks_exception_classes(
    client: anthropic.Anthropic, gateway: GatewayProcess
) -> None:
    hello: list[MessageParam] = [{"role": "user", "content": "hi"}]
    bad = anthropic.Anthropic(api_key="wrong-key-0123456789abcd", base_url=gateway.url)
    with bad, pytest.raises(anthropic.AuthenticationError) as unauthorised:
        bad.messages.create(model="claude", max_tokens=5, messages=hello)
    assert unauthorised.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    narrow = anthropic.Anthropic(api_key=NARROW_KEY, base_url=gateway.url, max_retries=0)
    with narrow, pytest.raises(anthropic.PermissionDeniedError):
        narrow.messages.create(model="claude", max_tokens=5, messages=hello)
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="nope", max_tokens=5, messages=hello)
    with pytest.raises(anthropic.BadRequestError) as rejected:
        client.messages.create(model="claude-rejects", max_tokens=5, messages=hello)
    assert rejected.value.status_code == 400
    with pytest.raises(anthropic.BadRequestError) as missing:
        client.post(
            "/v1/messages",
            body={"model": "claude", "messages": hello},
            cast_to=object,
        )
    assert "max_tokens" in str(missing.value)


@pytest.mark.parametrize(
    ("model", "said"),
    [
        ("claude-midstream", "Overloaded"),  # the provider's error event, after a delta
        ("claude-drop", "stream broke off"),  # cut off without message_stop
        ("compat-drop", "stream broke off"),  # a chat stream cut off, bridged
    ],
)
def test_a_stream_that_fails_after_its_first_byte_ends_with_an_error_event(
    client: anthropic.Anthropic, model: str, said: str
) -> None:
    received: list[str] = []

    def read() -> None:
        with client.messages.stream(
            model=model, max_tokens=100, messages=[{"role": "user", "content": TEXT}]
        ) as stream:
            received.extend(stream.text_stream)

    with pytest.raises(anthropic.APIError) as failed:
        read()
    assert said in str(failed.value)
    assert received  # something had reached the client: no failover, no splice
    assert " ".join(received).split() != TEXT.split()
