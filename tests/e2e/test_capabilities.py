"""Capability-aware candidates and strategy cost_first through a real gateway process, a
real mock upstream and the official openai SDK: a route known not to support what a request
uses is left out, an unknown capability is not held against a route, a 400 names what no route
supports, and cost_first orders routes by their own prices."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

KEY = "e2e-capabilities-key-0123456789"
SMALL = "{tools: false, images: false, json_schema: false, context_window: 50}"
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
SCHEMA = {
    "type": "json_schema",
    "json_schema": {"name": "answer", "schema": {"type": "object", "properties": {}}},
}
TOOL = {
    "type": "function",
    "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
}


def capabilities_config(upstream: MockUpstream) -> str:
    provider = f'type: openai_compatible, base_url: "{upstream.base_url}"'
    return f"""
providers:
  - {{slug: a, {provider}}}
  - {{slug: b, {provider}}}
  - {{slug: c, {provider}}}
models:
  - name: smart
    routes:
      - {{provider: a, upstream_model: small-a, priority: 0, capabilities: {SMALL}}}
      - {{provider: b, upstream_model: big-b, priority: 1,
          capabilities: {{tools: true, images: true, json_schema: true, context_window: 100000}}}}
  - name: unknown
    routes:
      - {{provider: a, upstream_model: small-unknown, priority: 0, capabilities: {SMALL}}}
      - {{provider: c, upstream_model: nothing-declared-c, priority: 1}}
  - name: textonly
    routes:
      - {{provider: a, upstream_model: text-a, capabilities: {{images: false, streaming: false}}}}
  - name: primary
    fallbacks: [textonly, smart]
    routes: [{{provider: c, upstream_model: status-500-primary}}]
  - name: cheap
    strategy: cost_first
    routes:
      - {{provider: c, upstream_model: unpriced-c}}
      - {{provider: a, upstream_model: pricey-a,
          pricing: {{input_per_mtok: 5, output_per_mtok: 15}}}}
      - {{provider: b, upstream_model: cheap-b,
          pricing: {{input_per_mtok: 0.1, output_per_mtok: 0.4}}}}
  - name: cheap-failing
    strategy: cost_first
    routes:
      - {{provider: c, upstream_model: unpriced-failing-c}}
      - {{provider: a, upstream_model: pricey-failing-a,
          pricing: {{input_per_mtok: 5, output_per_mtok: 15}}}}
      - {{provider: b, upstream_model: status-500-cheap-b,
          pricing: {{input_per_mtok: 0.1, output_per_mtok: 0.4}}}}
projects:
  - name: caps
    keys: [{{name: k, key: {KEY}}}]
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    yield from serving(tmp_path_factory.mktemp("capabilities"), capabilities_config(upstream))


@pytest.fixture(scope="module")
def client(gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(api_key=KEY, base_url=gateway.base_url, max_retries=0, timeout=15) as c:
        yield c


def _ask(client: openai.OpenAI, model: str, content: Any = "hello", **extra: Any) -> str:
    """The provider that served."""
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": content}], **extra
    )
    response: httpx2.Response = raw.http_response
    assert response.status_code == 200
    return str(response.headers["x-llmrelay-provider"])


def _refused(client: openai.OpenAI, model: str, **extra: Any) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=model, **extra)
    return refused.value


def _sent(upstream: MockUpstream, model: str) -> int:
    return sum(1 for r in upstream.chat_requests() if r.body.get("model") == model)


def test_a_route_that_lacks_what_the_request_uses_is_left_out(
    client: openai.OpenAI, upstream: MockUpstream
) -> None:
    assert _ask(client, "smart") == "a"  # nothing special: the first route
    before = _sent(upstream, "small-a")
    assert _ask(client, "smart", tools=[TOOL]) == "b"
    assert _ask(client, "smart", [{"type": "text", "text": "what is it?"}, IMAGE]) == "b"
    assert _ask(client, "smart", response_format=SCHEMA) == "b"
    assert _ask(client, "smart", "many words " * 30) == "b"  # ~82 tokens > a's window of 50
    assert _ask(client, "smart", "a few words") == "a"
    assert _sent(upstream, "small-a") == before + 1  # only the last one went to `a`


def test_an_unknown_capability_is_not_held_against_a_route(client: openai.OpenAI) -> None:
    assert _ask(client, "unknown", tools=[TOOL]) == "c"  # c declares nothing: may serve
    assert _ask(client, "unknown") == "a"


def test_nothing_left_is_a_400_naming_the_missing_capabilities(
    client: openai.OpenAI, upstream: MockUpstream
) -> None:
    before = _sent(upstream, "text-a")
    image = [{"role": "user", "content": [{"type": "text", "text": "see"}, IMAGE]}]
    refused = _refused(client, "textonly", messages=image)
    assert refused.code == "capability_not_supported"
    assert "'textonly'" in refused.message and "images" in refused.message
    assert refused.param == "messages"
    both = _refused(client, "textonly", messages=image, stream=True)
    assert "images" in both.message and "streaming" in both.message
    assert _sent(upstream, "text-a") == before  # nothing was sent upstream
    plain: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
    assert client.chat.completions.create(model="textonly", messages=plain).choices
    stream = client.chat.completions.create(model="smart", messages=plain, stream=True)
    assert [c for c in stream if c.choices]  # streaming is unknown on smart's routes


def test_a_fallback_model_that_lacks_a_capability_is_skipped(
    client: openai.OpenAI, upstream: MockUpstream
) -> None:
    before = _sent(upstream, "text-a")
    assert _ask(client, "primary", [{"type": "text", "text": "see"}, IMAGE]) == "b"
    assert _sent(upstream, "text-a") == before


def test_cost_first_orders_by_each_routes_own_price(
    client: openai.OpenAI, upstream: MockUpstream
) -> None:
    assert {_ask(client, "cheap") for _ in range(5)} == {"b"}
    assert _ask(client, "cheap:a") == "a"
    # The cheapest fails: the next cheapest, and a route without a price only after it.
    assert _ask(client, "cheap-failing") == "a"
    assert _sent(upstream, "status-500-cheap-b") == 1
    assert _sent(upstream, "unpriced-failing-c") == 0
