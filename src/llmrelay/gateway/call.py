"""What one data-plane request did, collected while it runs and recorded when it ends."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmrelay.limits.base import Admission
    from llmrelay.snapshot.model import PriceSnap, RoutePrice

CLIENT_CLOSED_REQUEST = 499

#: The order of `CallRecord.row()`; the recorder inserts rows as tuples in this order.
RECORD_COLUMNS = (
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
)

#: The order of the attempt rows a record carries (see CallRecord.log_attempt).
ATTEMPT_COLUMNS = (
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
)


class CallRecord:
    """Mutable on purpose: filled in step by step, then turned into one row."""

    __slots__ = (
        "admission",
        "attempt_log",
        "attempts",
        "completion_tokens",
        "counted_route",
        "created",
        "endpoint",
        "error_code",
        "key_id",
        "policy_id",
        "price",
        "project_id",
        "prompt_tokens",
        "provider",
        "request_id",
        "route_id",
        "started",
        "status_code",
        "stream",
        "tenant_id",
        "ttfb_ms",
        "upstream_model",
        "virtual_model",
    )

    def __init__(self, request_id: str, endpoint: str, started: float) -> None:
        self.request_id = request_id
        self.endpoint = endpoint
        self.started = started
        self.created = time.time()
        self.tenant_id: str | None = None
        self.project_id: str | None = None
        self.key_id: str | None = None
        self.virtual_model: str | None = None
        self.provider: str | None = None
        self.upstream_model: str | None = None
        self.stream = False
        self.status_code = 200
        self.error_code: str | None = None
        self.ttfb_ms: float | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        #: Upstream attempts made (retries and failovers included), the route of the last
        #: one, and rows for the attempts table once an attempt failed (see log_attempt).
        self.attempts = 0
        self.route_id: str | None = None
        self.attempt_log: list[tuple[Any, ...]] | None = None
        #: The route whose in-flight count this call holds (strategy load_balance).
        self.counted_route: str | None = None
        #: The key's routing policy (see KeySnap.policy), when it has one.
        self.policy_id: str | None = None
        #: The price of the route that answered (its own, else its model's).
        self.price: RoutePrice | PriceSnap | None = None
        #: What the limiter took for this request (settled when the request ends).
        self.admission: Admission | None = None

    def mark_first_byte(self) -> None:
        if self.ttfb_ms is None:
            self.ttfb_ms = (time.perf_counter() - self.started) * 1000.0

    def take_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            prompt = usage.get("prompt_tokens")
            completion = usage.get("completion_tokens")
            if isinstance(prompt, int):
                self.prompt_tokens = prompt
            if isinstance(completion, int):
                self.completion_tokens = completion

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
            )
        )

    def fail(self, status: int, code: str) -> None:
        self.status_code = status
        self.error_code = code

    def latency_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000.0

    def row(self, latency_ms: float) -> tuple[Any, ...]:
        """The record in RECORD_COLUMNS order; `created_at` is a Unix timestamp here."""
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
            self.prompt_tokens,
            self.completion_tokens,
            self.attempts,
            self.route_id,
            self.policy_id,
            self.cost_micros(),
        )

    def cost_micros(self) -> int | None:
        """Tokens by the route's price (micro-USD); None when the price or usage is unknown."""
        price = self.price
        if price is None:
            return None
        cost = 0
        for tokens, per_mtok in (
            (self.prompt_tokens, price.input),
            (self.completion_tokens, price.output),
        ):
            if tokens and per_mtok is not None:
                cost += tokens * per_mtok
            elif tokens:
                return None
        return (cost + 500_000) // 1_000_000

    def used_tokens(self) -> int | None:
        """Tokens to reconcile a tpm reservation with: the usage when reported; 0 for an
        error answer (nothing was generated); None when unknown (the estimate stands)."""
        prompt, completion = self.prompt_tokens, self.completion_tokens
        if prompt is not None or completion is not None:
            return (prompt or 0) + (completion or 0)
        if self.status_code >= 400 and self.status_code != CLIENT_CLOSED_REQUEST:
            return 0
        return None
