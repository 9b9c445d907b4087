"""What one data-plane request did, collected while it runs and recorded when it ends.

How a request's usage is settled when it ends (docs/metering.md has the operator's view):

- the provider reported usage (the answer's, or the stream's usage event): that, `reported`;
- it reported none, and output was produced (a 200 answer, or a stream that delivered
  events before it completed, broke off, stalled or lost its client): the prompt counted by
  the offline tokenizer and the output estimated (a JSON answer's text counted; a stream's
  content events delivered, about one token each), `estimated`;
- nothing was produced (an error before the first byte, a refused or invalid request, or a
  token count): no usage and no charge, `none`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final

from llmrelay.metering import usage as usage_of
from llmrelay.metering.catalogue import bundled
from llmrelay.metering.cost import Cost, cost_of, cost_plus
from llmrelay.metering.estimate import prompt_tokens
from llmrelay.metering.usage import Usage, minus, plus

if TYPE_CHECKING:
    from llmrelay.gateway.capture import Capture
    from llmrelay.limits.base import Admission
    from llmrelay.metering.cost import Price

CLIENT_CLOSED_REQUEST: Final = 499

USAGE_REPORTED: Final = "reported"
USAGE_ESTIMATED: Final = "estimated"
USAGE_NONE: Final = "none"

#: Endpoints that generate nothing (their records carry no usage).
_COUNTING_ENDPOINTS: Final = frozenset({"messages.count_tokens", "gemini.count_tokens"})

#: The order of `CallRecord.row()`; the recorder inserts rows as tuples in this order.
RECORD_COLUMNS: Final = (
    "request_id",
    "created_at",
    "tenant_id",
    "project_id",
    "key_id",
    "endpoint",
    "virtual_model",
    "provider",
    "upstream_model",
    "stream",
    "status_code",
    "error_code",
    "latency_ms",
    "ttfb_ms",
    "prompt_tokens",
    "completion_tokens",
    "attempts",
    "route_id",
    "policy_id",
    "cost_micros",
    "protocol",
    "input_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
    "usage_source",
    "input_cost_micros",
    "cached_input_cost_micros",
    "cache_write_cost_micros",
    "output_cost_micros",
    "price_version",
    "price_source",
    "client_ip",
    "user_agent",
    "resource_id",
)

#: The order of the attempt rows a record carries (see CallRecord.log_attempt).
ATTEMPT_COLUMNS: Final = (
    "request_id",
    "attempt",
    "created_at",
    "route_id",
    "provider",
    "upstream_model",
    "kind",
    "status_code",
    "outcome",
    "latency_ms",
    "input_tokens",
    "output_tokens",
    "cost_micros",
    "resource_id",
)
#: Where an attempt row's usage and cost begin (input_tokens, output_tokens, cost_micros):
#: the columns are in the table's order, which the record writers check.
_ATTEMPT_USAGE_AT: Final = ATTEMPT_COLUMNS.index("input_tokens")


def _attempt_with_usage(
    row: tuple[Any, ...], prompt: int | None, output: int | None, cost_micros: int
) -> tuple[Any, ...]:
    """The attempt row with what the attempt used and cost."""
    at = _ATTEMPT_USAGE_AT
    return (*row[:at], prompt, output, cost_micros, *row[at + 3 :])


#: The order of a guardrail hit row (gateway/guard.py makes them); the recorder inserts them
#: into `guardrail_hits` in this order, with the record they belong to.
HIT_COLUMNS: Final = (
    "request_id",
    "seq",
    "created_at",
    "tenant_id",
    "project_id",
    "key_id",
    "policy_id",
    "policy",
    "rule",
    "detector",
    "action",
    "location",
    "field",
    "count",
    "matched_chars",
)


class CallRecord:
    """Mutable on purpose: filled in step by step, then turned into one row."""

    __slots__ = (
        "admission",
        "answer_tokens",
        "attempt_log",
        "attempts",
        "capture",
        "client_ip",
        "counted_route",
        "created",
        "delivered_events",
        "dropped",
        "earlier",
        "ended",
        "endpoint",
        "error_code",
        "guard_hits",
        "key_id",
        "payload",
        "policy_id",
        "price",
        "project_id",
        "provider",
        "provider_type",
        "request_id",
        "reserved",
        "resource_id",
        "route_id",
        "started",
        "status_code",
        "stream",
        "tenant_id",
        "ttfb_ms",
        "upstream_model",
        "usage",
        "usage_source",
        "user_agent",
        "virtual_model",
    )

    def __init__(
        self,
        request_id: str,
        endpoint: str,
        started: float,
        client_ip: str | None = None,
        user_agent: str | None = None,
    ) -> None:
        self.request_id = request_id
        self.endpoint = endpoint
        self.started = started
        self.created = time.time()
        self.client_ip = client_ip
        self.user_agent = user_agent
        self.tenant_id: str | None = None
        self.project_id: str | None = None
        self.key_id: str | None = None
        self.virtual_model: str | None = None
        self.provider: str | None = None
        self.provider_type: str | None = None  # for traces (gen_ai.provider.name)
        self.upstream_model: str | None = None
        self.stream = False
        self.status_code = 200
        self.error_code: str | None = None
        self.ttfb_ms: float | None = None
        #: What the provider reported, in billing buckets (None: nothing reported yet).
        self.usage: Usage | None = None
        self.usage_source = USAGE_NONE
        #: The request body, kept for an estimate when no usage is reported.
        self.payload: dict[str, Any] | None = None
        #: A JSON answer's generated tokens as counted here (only when it reported none).
        self.answer_tokens: int | None = None
        #: Stream events passed to the client (an estimate's output when usage never came).
        self.delivered_events = 0
        #: Upstream attempts made (retries and failovers included), the route of the last
        #: one, and rows for the attempts table once an attempt failed (see log_attempt).
        self.attempts = 0
        self.route_id: str | None = None
        #: The provider resource (account) of the last attempt; None without resources.
        self.resource_id: str | None = None
        self.attempt_log: list[tuple[Any, ...]] | None = None
        #: The route whose in-flight count this call holds (strategy load_balance).
        self.counted_route: str | None = None
        #: The key's routing policy (see KeySnap.policy), when it has one.
        self.policy_id: str | None = None
        #: The price of the route that answered (its own, else its model's; the bundled
        #: catalogue's for its upstream model when neither has one).
        self.price: Price | None = None
        #: What the limiter took for this request (settled when the request ends).
        self.admission: Admission | None = None
        #: The request's bodies, when its key captures them (see gateway/capture.py).
        self.capture: Capture | None = None
        #: A prepaid reservation was made for it (settled when the request ends).
        self.reserved = False
        #: Guardrail hit rows (gateway/guard.py HIT_COLUMNS), when a rule matched.
        self.guard_hits: list[tuple[Any, ...]] | None = None
        #: The client's fields the last attempt's translation left out (gateway/dropped.py).
        self.dropped: tuple[str, ...] = ()
        #: A stream rescued mid-answer: the usage and cost of the parts that broke off
        #: (each at its own route's price), within the record's usage (see `log_part`).
        self.earlier: tuple[Usage, Cost] | None = None
        #: Its end was handled (gateway/ending.py): once, however many paths reach it.
        self.ended = False

    def mark_first_byte(self) -> None:
        if self.ttfb_ms is None:
            self.ttfb_ms = (time.perf_counter() - self.started) * 1000.0

    # -- usage, as each protocol reports it ------------------------------------------------

    def take_usage(self, usage: Any) -> None:
        """Chat Completions or Embeddings usage (also the translators' output)."""
        taken = usage_of.from_chat(usage)
        if taken is not None:
            self.usage = taken
            self.usage_source = USAGE_REPORTED

    def take_messages_usage(self, usage: Any) -> None:
        """Anthropic Messages usage; a stream's later counts update its first ones."""
        taken = usage_of.from_messages(usage, self.usage)
        if taken is not None:
            self.usage = taken
            self.usage_source = USAGE_REPORTED

    def take_responses_usage(self, usage: Any) -> None:
        taken = usage_of.from_responses(usage)
        if taken is not None:
            self.usage = taken
            self.usage_source = USAGE_REPORTED

    @property
    def prompt_tokens(self) -> int | None:
        """Every input token (OpenAI's `prompt_tokens`), as far as the usage is known."""
        return None if self.usage is None else self.usage.prompt

    @property
    def completion_tokens(self) -> int | None:
        return None if self.usage is None else self.usage.output

    def log_attempt(self, kind: str, status: int | None, outcome: str, latency_ms: float) -> None:
        """A row for the attempts table about the current attempt (ATTEMPT_COLUMNS order).
        Only failed attempts and the one that answered after them are logged: a request
        its first attempt answered is fully described by its record."""
        if self.attempt_log is None:
            self.attempt_log = []
        self.attempt_log.append(
            (
                self.request_id,
                self.attempts,
                time.time(),
                self.route_id,
                self.provider,
                self.upstream_model,
                kind,
                status,
                outcome,
                latency_ms,
                None,
                None,
                None,
                self.resource_id,
            )
        )

    def log_part(
        self, kind: str, status: int | None, outcome: str, latency_ms: float, usage: Usage
    ) -> None:
        """The attempts table's row for a part of a streamed answer that broke off and was
        continued elsewhere (a mid-stream rescue), with what it used and cost at its route's
        price; the record's usage will include it (the continuation reports every part's),
        its cost is the parts' costs summed (`cost`)."""
        cost = cost_of(usage, self._price())
        self.log_attempt(kind, status, outcome, latency_ms)
        assert self.attempt_log is not None
        self.attempt_log[-1] = _attempt_with_usage(
            self.attempt_log[-1], usage.prompt, usage.output, cost.total
        )
        earlier = self.earlier
        if earlier is not None:
            usage, cost = plus(earlier[0], usage), cost_plus(earlier[1], cost)
        self.earlier = (usage, cost)

    def fail(self, status: int, code: str) -> None:
        self.status_code = status
        self.error_code = code

    def latency_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000.0

    # -- the end -----------------------------------------------------------------------------

    def settle_usage(self) -> Usage | None:
        """The usage to record, bill and reconcile tpm with (see the module's rules): the
        reported one, else an estimate when output was produced, else None."""
        if self.usage is not None or self.endpoint in _COUNTING_ENDPOINTS:
            return self.usage
        produced = self.delivered_events > 0 if self.stream else self.status_code == 200
        if not produced:
            return None
        payload = self.payload
        prompt = prompt_tokens(payload) if payload is not None else 0
        # A stream's first event names the role; each later one carries about a token.
        output = max(self.delivered_events - 1, 0) if self.stream else self.answer_tokens or 0
        self.usage = Usage(input=prompt, output=output)
        self.usage_source = USAGE_ESTIMATED
        return self.usage

    def cost(self) -> Cost:
        """The settled usage at the price in force when the request started (of a rescued
        stream: the parts that broke off at their routes' prices, the rest at the last's)."""
        earlier = self.earlier
        if earlier is None:
            return cost_of(self.usage, self._price())
        usage = self.usage
        own = cost_of(None if usage is None else minus(usage, earlier[0]), self._price())
        return cost_plus(earlier[1], own)

    def _price(self) -> Price | None:
        price = self.price
        if price is None and self.upstream_model is not None:
            price = bundled().price(self.upstream_model, self.created)
        return price

    def _close_attempts(self, usage: Usage | None, cost: Cost) -> None:
        """The answering attempt's row (after failed ones) gets what it used and cost."""
        log = self.attempt_log
        if not log or log[-1][8] != "ok":
            return
        total = cost.total
        earlier = self.earlier
        if earlier is not None:
            usage = None if usage is None else minus(usage, earlier[0])
            total -= earlier[1].total
        if usage is not None:
            log[-1] = _attempt_with_usage(log[-1], usage.prompt, usage.output, total)

    def row(self, latency_ms: float) -> tuple[Any, ...]:
        """The record in RECORD_COLUMNS order; `created_at` is a Unix timestamp here.
        Settles the usage first."""
        usage = self.settle_usage()
        cost = self.cost()
        if self.attempt_log is not None:
            self._close_attempts(usage, cost)
        if usage is None:
            prompt = output = None
            buckets: tuple[int | None, ...] = (None,) * 5
        else:
            prompt, output = usage.prompt, usage.output
            buckets = (
                usage.input,
                usage.cached_input,
                usage.cache_write,
                usage.output,
                usage.reasoning,
            )
        return (
            self.request_id,
            self.created,
            self.tenant_id,
            self.project_id,
            self.key_id,
            self.endpoint,
            self.virtual_model,
            self.provider,
            self.upstream_model,
            self.stream,
            self.status_code,
            self.error_code,
            latency_ms,
            self.ttfb_ms,
            prompt,
            output,
            self.attempts,
            self.route_id,
            self.policy_id,
            cost.total,
            _PROTOCOLS.get(self.endpoint, "openai"),
            *buckets,
            self.usage_source,
            cost.input,
            cost.cached_input,
            cost.cache_write,
            cost.output,
            cost.version_id,
            cost.source,
            self.client_ip,
            self.user_agent,
            self.resource_id,
        )

    def used_tokens(self) -> int | None:
        """Tokens to reconcile a tpm reservation with, once the usage is settled: the usage
        (reported or estimated); 0 when nothing was produced; None when unknown (an error
        that may have produced output: the estimate stands)."""
        usage = self.usage
        if usage is not None:
            return usage.total
        if self.status_code >= 400 and self.status_code != CLIENT_CLOSED_REQUEST:
            return 0
        return None


#: The client protocol of each endpoint that is not OpenAI's.
_PROTOCOLS: Final = {
    "messages": "anthropic",
    "messages.count_tokens": "anthropic",
    "gemini.generate_content": "gemini",
    "gemini.count_tokens": "gemini",
    "gemini.embed_content": "gemini",
    "gemini.batch_embed_contents": "gemini",
}
