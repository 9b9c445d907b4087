"""What a chat request needs from a route, and the routes that can give it.

A route that is known (config `routes[].capabilities`) not to support something the request
uses is left out of its candidates; a capability nobody declared is unknown and never held
against a route. When no route is left, the client gets a 400 that names what is missing:
trying routes that will refuse would only turn a clear answer into a failover chain.

Token counts here are estimates (about four characters per token, text only): they decide
whether a prompt can fit a declared context window and what a call is expected to cost for
strategy `cost_first`, never what is billed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llmrelay.gateway.errors import InvalidRequest
from llmrelay.metering.catalogue import bundled
from llmrelay.metering.cost import Price
from llmrelay.routing.strategies import PriceOf
from llmrelay.snapshot.model import Capabilities, ModelSnap, RouteSnap

CHARS_PER_TOKEN = 4
#: Output tokens a call is expected to produce when it sets no `max_tokens` (cost_first).
DEFAULT_EXPECTED_OUTPUT_TOKENS = 512
_IMAGE_PARTS = frozenset({"image_url", "input_image", "image"})


class CapabilityMissing(InvalidRequest):
    code = "capability_not_supported"


@dataclass(frozen=True, slots=True)
class Needs:
    """What one chat request uses."""

    tools: bool = False
    images: bool = False
    json_schema: bool = False
    streaming: bool = False
    prompt_tokens: int = 0


def needs_of(payload: dict[str, Any]) -> Needs:
    images, chars = _scan_messages(payload.get("messages"))
    response_format = payload.get("response_format")
    return Needs(
        tools=bool(payload.get("tools") or payload.get("functions")),
        images=images,
        json_schema=isinstance(response_format, dict)
        and response_format.get("type") == "json_schema",
        streaming=payload.get("stream") is True,
        prompt_tokens=chars // CHARS_PER_TOKEN,
    )


def _scan_messages(messages: Any) -> tuple[bool, int]:
    """Whether any message carries an image, and the characters of text in them all."""
    images = False
    chars = 0
    if not isinstance(messages, list):
        return images, chars
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            for part in content:
                if not isinstance(part, dict):
                    continue
                kind = part.get("type")
                if isinstance(kind, str) and kind in _IMAGE_PARTS:  # (a list is unhashable)
                    images = True
                text = part.get("text")
                if isinstance(text, str):
                    chars += len(text)
    return images, chars


def lacks(capabilities: Capabilities | None, needs: Needs) -> list[str]:
    """The needs a route is known not to meet (empty: it may serve the request)."""
    if capabilities is None:
        return []
    missing = []
    if needs.tools and capabilities.tools is False:
        missing.append("tools")
    if needs.images and capabilities.images is False:
        missing.append("images")
    if needs.json_schema and capabilities.json_schema is False:
        missing.append("json_schema")
    if needs.streaming and capabilities.streaming is False:
        missing.append("streaming")
    window = capabilities.context_window
    if window is not None and needs.prompt_tokens > window:
        missing.append("context_window")
    return missing


def capable(model: ModelSnap, routes: Sequence[RouteSnap], needs: Needs) -> Sequence[RouteSnap]:
    """`routes` without those known not to serve `needs`; CapabilityMissing if that leaves
    nothing of a non-empty set."""
    if not model.capability_aware or not routes:
        return routes
    kept: list[RouteSnap] = []
    missing: dict[str, None] = {}  # ordered set
    for route in routes:
        lacking = lacks(route.capabilities, needs)
        if lacking:
            missing.update(dict.fromkeys(lacking))
        else:
            kept.append(route)
    if kept:
        return routes if len(kept) == len(routes) else kept
    raise CapabilityMissing(_explain(model, missing, needs), param=_param(missing))


def _explain(model: ModelSnap, missing: dict[str, None], needs: Needs) -> str:
    parts = []
    for name in missing:
        if name == "context_window":
            windows = [
                r.capabilities.context_window
                for r in model.enabled_routes
                if r.capabilities is not None and r.capabilities.context_window is not None
            ]
            parts.append(
                f"a context window for a prompt of about {needs.prompt_tokens} tokens "
                f"(the largest declared is {max(windows)})"
            )
        else:
            parts.append(name)
    return f"no route of model {model.name!r} supports {', '.join(parts)}, which this request uses"


_PARAMS = {
    "tools": "tools",
    "images": "messages",
    "json_schema": "response_format",
    "streaming": "stream",
    "context_window": "messages",
}


def _param(missing: dict[str, None]) -> str | None:
    return _PARAMS.get(next(iter(missing), ""))


def expected_tokens(payload: dict[str, Any]) -> tuple[int, int]:
    """(input, output) tokens a call is expected to use, for strategy cost_first."""
    _, chars = _scan_messages(payload.get("messages"))
    output = payload.get("max_completion_tokens") or payload.get("max_tokens")
    if not isinstance(output, int) or isinstance(output, bool) or output < 1:
        output = DEFAULT_EXPECTED_OUTPUT_TOKENS
    return chars // CHARS_PER_TOKEN, output


def price_for(route: RouteSnap, model: ModelSnap, at: float) -> Price | None:
    """The price a call answered by `route` is charged at (see price_of for the order)."""
    return route.price or model.price or bundled().price(route.upstream_model, at)


def price_of(model: ModelSnap) -> PriceOf:
    """A route's own price (config `routes[].pricing`), else the model's price in force,
    else the bundled catalogue's for the route's upstream model."""

    def of(route: RouteSnap) -> tuple[int | None, int | None]:
        price = price_for(route, model, time.time())
        return (None, None) if price is None else (price.input, price.output)

    return of
