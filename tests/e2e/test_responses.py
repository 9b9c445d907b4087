"""OpenAI Responses clients (the official openai SDK) through a real gateway process: passed
through to a provider that serves the Responses API, translated through chat for those that
do not (an OpenAI-compatible server, Anthropic), streamed and not; a continued conversation
kept on the route that holds it; what chat cannot carry refused with a 400 naming the field."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest
from openai.types.responses import FunctionToolParam

from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

KEY = "e2e-responses-key-0123456789"
OTHER_KEY = "e2e-responses-other-0123456789"
SECRET = "sk-provider-secret-responses"
TEXT = "the quick brown fox jumps over the lazy dog"
TOOL: FunctionToolParam = {
    "type": "function",
    "name": "lookup",
    "description": "Looks something up.",
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
    },
    "strict": False,
}


def responses_config(upstream: MockUpstream) -> str:
    root = upstream.base_url.removesuffix("/v1")
    openai_like = f'base_url: "{upstream.base_url}", api_key: {SECRET}'
    return f"""
providers:
  - {{slug: oai, type: openai, {openai_like}}}
  - {{slug: oai2, type: openai, {openai_like}}}
  - {{slug: compat, type: openai_compatible, {openai_like}}}
  - {{slug: claude, type: anthropic, base_url: "{root}", api_key: {SECRET}}}
models:
  - name: native
    routes: [{{provider: oai, upstream_model: gpt-test}}]
  - name: bridged
    routes: [{{provider: compat, upstream_model: echo}}]
  - name: claude
    routes: [{{provider: claude, upstream_model: claude-test}}]
  - name: spread
    strategy: weighted
    routes:
      - {{provider: oai, upstream_model: gpt-a}}
      - {{provider: oai2, upstream_model: gpt-b}}
projects:
  - name: responses
    keys: [{{name: k, key: {KEY}}}]
  - name: elsewhere
    keys: [{{name: k, key: {OTHER_KEY}}}]
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    yield from serving(tmp_path_factory.mktemp("responses"), responses_config(upstream))


@pytest.fixture(scope="module")
def client(gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(api_key=KEY, base_url=gateway.base_url, max_retries=0, timeout=15) as c:
        yield c


@pytest.mark.parametrize("model", ["native", "bridged", "claude"])
def test_a_response_from_every_kind_of_provider(client: openai.OpenAI, model: str) -> None:
    raw = client.responses.with_raw_response.create(
        model=model, input=TEXT, instructions="be brief", max_output_tokens=100
    )
    response = raw.parse()
    assert response.model == model
    assert response.status == "completed"
    assert response.output_text == TEXT
    assert response.usage is not None and response.usage.output_tokens == 9
    assert raw.headers["x-llmrelay-model"] == model


def test_what_reaches_each_provider(client: openai.OpenAI, upstream: MockUpstream) -> None:
    client.responses.create(model="native", input="hi", store=False)
    native = [r for r in upstream.requests if r.path == "/v1/responses"][-1]
    assert native.body["model"] == "gpt-test" and native.body["store"] is False
    client.responses.create(model="bridged", input="hi", instructions="sys")
    chat = [r for r in upstream.requests if r.path == "/v1/chat/completions"][-1]
    assert chat.body["model"] == "echo"
    assert chat.body["messages"][0] == {"role": "system", "content": "sys"}


@pytest.mark.parametrize("model", ["native", "bridged", "claude"])
def test_streams_from_every_kind_of_provider(client: openai.OpenAI, model: str) -> None:
    deltas: list[str] = []
    completed = None
    for event in client.responses.create(model=model, input=TEXT, stream=True):
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        elif event.type == "response.created":
            assert event.response.model == model  # every response object is renamed
        elif event.type == "response.completed":
            completed = event.response
    assert "".join(deltas) == TEXT
    assert completed is not None and completed.model == model
    assert completed.output_text == TEXT


def test_function_calls_through_chat(client: openai.OpenAI) -> None:
    response = client.responses.create(model="claude", input="call:weather in Oslo", tools=[TOOL])
    calls = [item for item in response.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "lookup"
    assert json.loads(calls[0].arguments) == {"query": "weather in Oslo"}


def test_a_continued_conversation_stays_on_the_route_that_holds_it(
    client: openai.OpenAI,
) -> None:
    first = client.responses.with_raw_response.create(model="spread", input="hello")
    provider = first.headers["x-llmrelay-provider"]
    previous = first.parse().id
    for _ in range(8):
        raw = client.responses.with_raw_response.create(
            model="spread", input="and then?", previous_response_id=previous
        )
        assert raw.headers["x-llmrelay-provider"] == provider
        previous = raw.parse().id
    others = {
        client.responses.with_raw_response.create(model="spread", input=f"x {i}").headers[
            "x-llmrelay-provider"
        ]
        for i in range(20)
    }
    assert others == {"oai", "oai2"}  # other conversations: the strategy spreads them


def test_what_chat_cannot_carry_is_a_400_naming_the_field(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as stored:
        client.responses.create(model="bridged", input="x", previous_response_id="resp_123")
    assert stored.value.param == "previous_response_id"


def test_a_stored_response_is_read_and_cancelled_where_it_lives(
    client: openai.OpenAI, gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    created = client.responses.create(model="native", input="keep me")
    read = client.responses.retrieve(created.id)
    assert read.id == created.id and read.output_text == "keep me"
    assert read.model == "native"  # the virtual name, not the provider's
    fetched = [r for r in upstream.requests if r.path == f"/v1/responses/{created.id}"][-1]
    assert fetched.headers["Authorization"] == f"Bearer {SECRET}"
    assert KEY not in repr(fetched.headers)
    cancelled = client.responses.cancel(created.id)
    assert cancelled.status == "cancelled"
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_nobody_gave_this_out")
    unstored = client.responses.create(model="bridged", input="not stored", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)
    # Through chat, the gateway stores the Response itself (shared/conversations.py).
    bridged = client.responses.create(model="bridged", input="stored by the gateway")
    assert client.responses.retrieve(bridged.id).output_text == "stored by the gateway"
    with pytest.raises(openai.BadRequestError):
        client.responses.cancel(bridged.id)  # a finished synchronous response
    other = openai.OpenAI(api_key=OTHER_KEY, base_url=gateway.base_url, max_retries=0)
    with other:
        for response_id in (created.id, bridged.id):  # another project's
            with pytest.raises(openai.NotFoundError):
                other.responses.retrieve(response_id)


def test_compaction_needs_a_provider_that_serves_responses(client: openai.OpenAI) -> None:
    compacted = client.post(
        "/responses/compact",
        body={"model": "native", "input": "a long conversation"},
        cast_to=object,
    )
    assert isinstance(compacted, dict) and compacted["model"] == "native"
    with pytest.raises(openai.BadRequestError) as refused:
        client.post("/responses/compact", body={"model": "bridged", "input": "x"}, cast_to=object)
    assert refused.value.param == "model"
