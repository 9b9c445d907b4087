"""The pieces of codex image generation and stored-conversation sending that need no server:
the Responses body an image request becomes, the Images answer a completed response
becomes, input items sent without ids, an image model as the snapshot judges it, and the
config refusing an api_key on an openai_codex resource. (End to end: tests/e2e/test_codex.py.)"""

from __future__ import annotations

from types import MappingProxyType

import orjson
import pytest

from llmrelay.config.loader import ConfigError, parse_config
from llmrelay.providers.codex.adapter import without_item_ids
from llmrelay.providers.codex.images import DRIVER_MODEL, image_request, images_answer
from llmrelay.providers.errors import UpstreamProtocolError
from llmrelay.snapshot.model import ModelSnap, ProviderSnap, RouteSnap


def test_an_image_request_is_a_responses_call_forcing_the_image_tool() -> None:
    body = image_request(
        {"model": "codex-gpt-image-2", "prompt": "an owl", "size": "1024x1024", "n": 1},
        "gpt-image-2",
    )
    assert body["model"] == DRIVER_MODEL
    assert body["tools"] == [
        {"type": "image_generation", "model": "gpt-image-2", "size": "1024x1024"}
    ]
    assert body["tool_choice"] == {"type": "image_generation"}
    assert body["input"][0]["content"] == [{"type": "input_text", "text": "an owl"}]
    assert body["store"] is False and body["stream"] is True


def test_the_images_answer_of_a_completed_response() -> None:
    response = {
        "created_at": 1700000000,
        "output": [
            {"type": "reasoning", "id": "rs_1"},
            {
                "type": "image_generation_call",
                "result": "QUJD",
                "revised_prompt": "an owl, detailed",
                "size": "1024x1024",
                "output_format": "png",
            },
        ],
        "usage": {"input_tokens": 10, "output_tokens": 20, "total_tokens": 30},
    }
    answer = orjson.loads(images_answer(response))
    assert answer == {
        "created": 1700000000,
        "data": [{"b64_json": "QUJD", "revised_prompt": "an owl, detailed"}],
        "size": "1024x1024",
        "output_format": "png",
        "usage": {"input_tokens": 10, "output_tokens": 20, "total_tokens": 30},
    }
    with pytest.raises(UpstreamProtocolError):
        images_answer({"output": [{"type": "message", "content": []}]})


def test_input_items_go_without_their_ids() -> None:
    items = ["x", {"type": "message", "id": "msg_1", "role": "assistant"}, {"role": "user"}]
    assert without_item_ids(items) == [
        "x",
        {"type": "message", "role": "assistant"},
        {"role": "user"},
    ]


def _model(*routes: tuple[str, str]) -> ModelSnap:
    def provider(kind: str) -> ProviderSnap:
        return ProviderSnap(
            kind, kind, kind, None, None, MappingProxyType({}), 1.0, 1.0, 1.0, 1.0, None
        )

    snaps = tuple(
        RouteSnap(f"r{i}", provider(kind), model, 0, 1.0, None, False, i)
        for i, (kind, model) in enumerate(routes)
    )
    return ModelSnap("m", "t", "m", "priority", snaps, 1, 0, 30.0, (), (), False, None, 0)


def test_an_image_model_is_one_whose_routes_all_draw_on_codex() -> None:
    assert _model(("openai_codex", "gpt-image-2")).image
    assert not _model(("openai_codex", "gpt-5-codex")).image
    assert not _model(("openai", "gpt-image-2")).image
    assert not _model(("openai_codex", "gpt-image-2"), ("openai_codex", "gpt-5")).image


def test_an_openai_codex_resource_takes_no_api_key() -> None:
    yaml = """
providers:
  - slug: codex
    type: openai_codex
    resources: [{name: alice, api_key: sk-nope-0123456789}]
models:
  - name: m
    routes: [{provider: codex, upstream_model: gpt-5}]
"""
    with pytest.raises(ConfigError, match="openai_codex resources take no api_key"):
        parse_config(yaml, "gw.yaml", {})
