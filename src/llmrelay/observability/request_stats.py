"""Per-request counters and histograms, kept as plain integers.

prometheus_client's Counter/Histogram children cost several microseconds per update (locks,
per-bucket loops). Updates here happen on the event loop thread only and cost a few dict
updates and two bisects; the Prometheus families are built when /metrics is scraped.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from typing import Any, Final

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

LATENCY_BUCKETS_S: Final[tuple[float, ...]] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    120,
    300,
)
#: The bounds as a list for bisect: compiled by mypyc, a tuple of floats is kept unboxed and
#: would be boxed into a new tuple at every call.
_BOUNDS: Final = list(LATENCY_BUCKETS_S)
#: The usage buckets of a record (metering/usage.py), as `bucket` label values.
TOKEN_BUCKETS: Final = ("input", "cached_input", "cache_write", "output", "reasoning")


class _Histogram:
    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS_S) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(_BOUNDS, seconds)] += 1
        self.total += seconds

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*LATENCY_BUCKETS_S, float("inf")), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else str(bound), running))
        return out


class RequestStats:
    """A Prometheus collector for what each finished request did: `llmrelay_requests_total`,
    `llmrelay_request_duration_seconds`, `llmrelay_request_ttfb_seconds`,
    `llmrelay_tokens_total`, `llmrelay_cost_usd_total`, `llmrelay_upstream_attempts_total`
    and `llmrelay_fallbacks_total`."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str, str, str, int], int] = {}
        self._latency: dict[str, _Histogram] = {}
        self._ttfb: dict[str, _Histogram] = {}
        #: (model, provider) -> [input, cached input, cache write, output, reasoning, cost]
        self._usage: dict[tuple[str, str], list[int]] = {}
        self._attempts: dict[tuple[str, str, str], int] = {}
        self._first_ok: dict[str, int] = {}
        self._fallbacks: dict[str, int] = {}

    def observe(
        self,
        endpoint: str,
        protocol: str,
        model: str,
        provider: str,
        status: int,
        seconds: float,
        ttfb_s: float | None = None,
    ) -> None:
        key = (endpoint, protocol, model, provider, status)
        counts = self._counts
        counts[key] = counts.get(key, 0) + 1
        latency = self._latency.get(endpoint)
        if latency is None:
            latency = self._latency[endpoint] = _Histogram()
        latency.observe(seconds)
        if ttfb_s is not None:
            ttfb = self._ttfb.get(endpoint)
            if ttfb is None:
                ttfb = self._ttfb[endpoint] = _Histogram()
            ttfb.observe(ttfb_s)

    def observe_usage(
        self,
        model: str,
        provider: str,
        fresh: int,
        cached: int,
        written: int,
        output: int,
        reasoning: int,
        cost: int,
    ) -> None:
        """Tokens by bucket and the cost in micro-USD: one list per (model, provider), added
        to in place (no key built per bucket: this runs once per request)."""
        pair = (model, provider)
        totals = self._usage.get(pair)
        if totals is None:
            totals = self._usage[pair] = [0, 0, 0, 0, 0, 0]
        totals[0] += fresh
        totals[1] += cached
        totals[2] += written
        totals[3] += output
        totals[4] += reasoning
        totals[5] += cost

    def observe_attempts(
        self, model: str, attempts: list[tuple[Any, ...]] | None, provider: str
    ) -> None:
        """One request's upstream attempts: its attempt rows (provider at 4, kind at 6,
        outcome at 8: call.ATTEMPT_COLUMNS) or, for a request its first attempt answered,
        one `ok`."""
        if attempts is None:  # the usual case: a per-provider count, merged when scraped
            self._first_ok[provider] = self._first_ok.get(provider, 0) + 1
            return
        counted = self._attempts
        fell_back = False
        for row in attempts:
            key = (str(row[4] or ""), str(row[6]), str(row[8]))
            counted[key] = counted.get(key, 0) + 1
            fell_back = fell_back or row[6] == "fallback"
        if fell_back:
            self._fallbacks[model] = self._fallbacks.get(model, 0) + 1

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "llmrelay_requests",
            "Data-plane requests by endpoint, client protocol, virtual model, provider and status.",
            labels=("endpoint", "protocol", "model", "provider", "status"),
        )
        for (endpoint, protocol, model, provider, status), count in list(self._counts.items()):
            requests.add_metric((endpoint, protocol, model, provider, str(status)), count)
        yield requests
        for name, help_text, source in (
            (
                "llmrelay_request_duration_seconds",
                "Whole-request latency as the gateway saw it.",
                self._latency,
            ),
            (
                "llmrelay_request_ttfb_seconds",
                "Time to the answer's first byte (streams: the first event).",
                self._ttfb,
            ),
        ):
            family = HistogramMetricFamily(name, help_text, labels=("endpoint",))
            for endpoint, histogram in list(source.items()):
                family.add_metric((endpoint,), histogram.cumulative(), sum_value=histogram.total)
            yield family
        tokens = CounterMetricFamily(
            "llmrelay_tokens",
            "Tokens by usage bucket (reasoning is part of output), as recorded.",
            labels=("model", "provider", "bucket"),
        )
        cost = CounterMetricFamily(
            "llmrelay_cost_usd", "Recorded cost in USD.", labels=("model", "provider")
        )
        for (model, provider), totals in list(self._usage.items()):
            for bucket, count in zip(TOKEN_BUCKETS, totals, strict=False):
                if count:
                    tokens.add_metric((model, provider, bucket), count)
            if totals[5]:
                cost.add_metric((model, provider), totals[5] / 1_000_000)
        yield tokens
        yield cost
        attempts = CounterMetricFamily(
            "llmrelay_upstream_attempts",
            "Upstream attempts by provider, kind (first, retry, fallback) and outcome.",
            labels=("provider", "kind", "outcome"),
        )
        merged = dict(self._attempts)
        for provider, count in list(self._first_ok.items()):
            key = (provider, "first", "ok")
            merged[key] = merged.get(key, 0) + count
        for (provider, kind, outcome), count in merged.items():
            attempts.add_metric((provider, kind, outcome), count)
        yield attempts
        fallbacks = CounterMetricFamily(
            "llmrelay_fallbacks",
            "Requests that failed over to another route or model, by the model asked for.",
            labels=("model",),
        )
        for model, count in list(self._fallbacks.items()):
            fallbacks.add_metric((model,), count)
        yield fallbacks
