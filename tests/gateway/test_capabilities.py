"""What a chat request needs, which routes can give it, and cost_first's inputs."""

from __future__ import annotations

from typing import Any

import pytest

from llmrelay.gateway.capabilities import (
    DEFAULT_EXPECTED_OUTPUT_TOKENS,
    CapabilityMissing,
    Needs,
    capable,
    expected_tokens,
    lacks,
    needs_of,
    price_of,
)
from llmrelay.gateway.executor import candidates
from llmrelay.metering.cost import Price
from llmrelay.snapshot.model import Capabilities, ModelSnap, RouteSnap
from tests.routing.test_strategies import PROVIDER


def _route(rid: str, caps: Capabilities | None = None, price: Price | None = None) -> RouteSnap:
    return RouteSnap(rid, PROVIDER, "up", 0, 1.0, None, False, 0, caps, price)


def _model(*routes: RouteSnap, price: Price | None = None) -> ModelSnap:
    return ModelSnap("m", "t", "chat", "priority", routes, 1, 0, 30.0, (), (), False, price, 0)


def _chat(content: Any = "hi", **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": content}], **extra}


def test_needs_are_read_from_the_request() -> None:
    assert needs_of(_chat()) == Needs(prompt_tokens=0)
    assert needs_of(_chat("x" * 400)).prompt_tokens == 100
    assert needs_of(_chat(tools=[{"type": "function"}])).tools
    assert needs_of(_chat(functions=[{"name": "f"}])).tools
    assert not needs_of(_chat(tools=[])).tools
    parts = [{"type": "text", "text": "y" * 40}, {"type": "image_url", "image_url": {"url": "u"}}]
    assert needs_of(_chat(parts)) == Needs(images=True, prompt_tokens=10)
    assert needs_of(_chat(response_format={"type": "json_schema", "json_schema": {}})).json_schema
    assert not needs_of(_chat(response_format={"type": "json_object"})).json_schema
    assert needs_of(_chat(stream=True)).streaming
    assert needs_of({"messages": "not a list"}) == Needs()


def test_only_a_capability_known_to_be_missing_counts() -> None:
    everything = Needs(tools=True, images=True, json_schema=True, streaming=True, prompt_tokens=99)
    assert lacks(None, everything) == []
    assert lacks(Capabilities(), everything) == []
    none = Capabilities(False, False, False, False, 50)
    assert lacks(none, everything) == [
        "tools",
        "images",
        "json_schema",
        "streaming",
        "context_window",
    ]
    assert lacks(none, Needs(prompt_tokens=50)) == []  # exactly the window still fits
    assert lacks(Capabilities(tools=True, context_window=100), everything) == []


def test_capable_keeps_the_routes_that_may_serve_and_the_set_itself_when_all_may() -> None:
    small = _route("small", Capabilities(tools=False))
    big = _route("big", Capabilities(tools=True))
    unknown = _route("unknown")
    model = _model(small, big, unknown)
    routes = model.enabled_routes
    assert capable(model, routes, Needs()) is routes
    assert [r.id for r in capable(model, routes, Needs(tools=True))] == ["big", "unknown"]
    plain = _model(_route("x"), _route("y"))
    assert not plain.capability_aware
    assert capable(plain, plain.enabled_routes, Needs(tools=True)) is plain.enabled_routes


def test_nothing_left_names_every_missing_capability() -> None:
    model = _model(
        _route("a", Capabilities(images=False, context_window=10)),
        _route("b", Capabilities(images=False, streaming=False, context_window=20)),
    )
    with pytest.raises(CapabilityMissing) as missing:
        candidates(model, None, None, Needs(images=True, streaming=True, prompt_tokens=30))
    error = missing.value
    assert error.status == 400 and error.code == "capability_not_supported"
    assert error.param == "messages"
    assert "images" in error.message and "streaming" in error.message
    assert "about 30 tokens" in error.message and "largest declared is 20" in error.message
    # Pinned to a provider with no route: no capability error, an empty set (503 later).
    assert candidates(model, "elsewhere", None, Needs(images=True)) == []


def test_expected_tokens_and_prices_for_cost_first() -> None:
    assert expected_tokens(_chat("z" * 80)) == (20, DEFAULT_EXPECTED_OUTPUT_TOKENS)
    assert expected_tokens(_chat(max_tokens=30)) == (0, 30)
    assert expected_tokens(_chat(max_completion_tokens=7, max_tokens=30)) == (0, 7)
    assert expected_tokens(_chat(max_tokens=True))[1] == DEFAULT_EXPECTED_OUTPUT_TOKENS
    own = _route("own", price=Price("route:own", input=100, output=None, source="route"))
    other = _route("other")
    model = _model(own, other, price=Price("v1", 5, 6))
    of = price_of(model)
    assert of(own) == (100, None)
    assert of(other) == (5, 6)
    assert price_of(_model(other))(other) == (None, None)
