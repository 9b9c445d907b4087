"""How much a prepaid request reserves before its provider call: a conservative estimate of
the most it can cost, so the settle that follows nearly always gives money back.

    reservation = max over the routes the request can reach (its model's, and its fallback
                  models' when it may fall back) of
                  input tokens x the route's dearest input price
                  + output tokens x the route's output price          (rounded up, micro-USD)

- input tokens: the offline token counter's count of the prompt (metering/estimate.py, the
  one an estimated usage is charged by), plus a fifth (it is within about 15 % of the
  providers' tokenizers; images and files are not counted: their cost is charged at settle);
- output tokens: the request's own limit (`max_tokens`, `max_completion_tokens`,
  `max_output_tokens`), times `n` for a chat request asking for several choices; when it sets
  none, the route's model's longest answer from the bundled catalogue (`max_output`), never
  more than LLMRELAY_BILLING_DEFAULT_MAX_OUTPUT_TOKENS (and that setting itself for a model
  the catalogue does not know); none for embeddings;
- a route's price is the one its answer would be charged at (route, model, catalogue: see
  gateway/capabilities.price_for); the dearest input price covers cache writes, which some
  providers bill above plain input.

A route with no price (or none for a bucket the request will use) cannot be reserved for:
`Unpriced`, unless LLMRELAY_BILLING_UNPRICED_RESERVE_MICROS sets a flat amount for such
routes (their requests then settle as `metering_failed`, kept until reconciled).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from llmrelay.billing.errors import Unpriced
from llmrelay.metering.catalogue import bundled
from llmrelay.metering.cost import Price
from llmrelay.metering.estimate import prompt_chars, prompt_tokens
from llmrelay.snapshot.model import ModelSnap, RouteSnap

#: The request fields that cap its output, in the order they are read.
OUTPUT_FIELDS: Final = ("max_completion_tokens", "max_tokens", "max_output_tokens")
_PER_MTOK: Final = 1_000_000

#: The price a route's answer is charged at, at a Unix time (gateway/capabilities.price_for).
PriceFor = Callable[[RouteSnap, ModelSnap, float], Price | None]


@dataclass(frozen=True, slots=True)
class ReservePolicy:
    """The settings a reservation is worked out with."""

    #: Output tokens assumed when the request sets no limit (and the catalogue's cap).
    default_max_output_tokens: int = 4096
    #: Reserved for a route without a price (0: such requests are refused).
    unpriced_reserve_micros: int = 0


def input_tokens(payload: dict[str, Any]) -> int:
    counted = prompt_tokens(payload)
    return counted + -(-counted // 5)


def input_bound(payload: dict[str, Any]) -> int:
    """At least `input_tokens` (the prompt's characters bound its count from above), without
    the count's regex walk: what a request admitted in memory reserves for its prompt
    (gateway/prepaid.reserve)."""
    chars = prompt_chars(payload)
    return chars + -(-chars // 5)


def requested_output(payload: dict[str, Any]) -> int | None:
    """The output limit the request sets, times its number of choices; None when it sets none."""
    for name in OUTPUT_FIELDS:
        asked = payload.get(name)
        if type(asked) is int and asked > 0:
            n = payload.get("n")
            return asked * (n if type(n) is int and n > 1 else 1)
    config = payload.get("generationConfig")  # a Gemini client's
    if type(config) is dict:
        asked = config.get("maxOutputTokens")
        if type(asked) is int and asked > 0:
            n = config.get("candidateCount")
            return asked * (n if type(n) is int and n > 1 else 1)
    return None


def output_cap(route: RouteSnap, policy: ReservePolicy) -> int:
    """The output a request without its own limit may produce on `route`."""
    entry = bundled().model(route.upstream_model)
    cap = policy.default_max_output_tokens
    if entry is not None and entry.max_output is not None:
        return min(entry.max_output, cap)
    return cap


def route_cost(price: Price, tokens_in: int, tokens_out: int) -> int | None:
    """The most `tokens_in` prompt and `tokens_out` answer tokens cost at `price`, rounded up;
    None when a bucket the request uses has no price."""
    dearest = price.input
    if dearest is None:
        if tokens_in:
            return None
        dearest = 0
    for other in (price.cached_input, price.cache_write):
        if other is not None and other > dearest:
            dearest = other
    if tokens_out and price.output is None:
        return None
    micro_units = tokens_in * dearest + tokens_out * (price.output or 0)
    return -(-micro_units // _PER_MTOK)


def reservation(
    payload: dict[str, Any],
    reachable: Iterable[tuple[ModelSnap, Sequence[RouteSnap]]],
    price_for: PriceFor,
    at: float,
    policy: ReservePolicy,
    *,
    generates: bool = True,
    tokens_in: int | None = None,
) -> int:
    """The amount to reserve (micro-USD) for a request that may be served by `reachable`
    (each model with the routes it may use). `generates` False: embeddings (no output).
    `tokens_in`: the prompt's tokens when the caller bounds them itself (else counted)."""
    if tokens_in is None:
        tokens_in = input_tokens(payload)
    asked = requested_output(payload) if generates else 0
    most = 0
    for model, routes in reachable:
        for route in routes:
            tokens_out = asked if asked is not None else output_cap(route, policy)
            price = price_for(route, model, at)
            cost = None if price is None else route_cost(price, tokens_in, tokens_out)
            if cost is None:
                if policy.unpriced_reserve_micros <= 0:
                    raise Unpriced(model.name, route.upstream_model, route.provider.slug)
                cost = policy.unpriced_reserve_micros
            most = max(most, cost)
    return most
