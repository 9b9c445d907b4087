"""Per-request counters and the latency histogram, kept as plain integers.

prometheus_client's Counter/Histogram children cost several microseconds per update (locks,
per-bucket loops). Updates here happen on the event loop thread only and cost a dict update
and a bisect; the Prometheus families are built when /metrics is scraped.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class RequestStats:
    """A Prometheus collector: `llmrelay_requests_total` and
    `llmrelay_request_duration_seconds`."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str, str, int], int] = {}
        self._buckets: dict[str, list[int]] = {}
        self._sums: dict[str, float] = {}

    def observe(
        self, endpoint: str, model: str, provider: str, status: int, seconds: float
    ) -> None:
        key = (endpoint, model, provider, status)
        counts = self._counts
        counts[key] = counts.get(key, 0) + 1
        buckets = self._buckets.get(endpoint)
        if buckets is None:
            buckets = self._buckets[endpoint] = [0] * (len(LATENCY_BUCKETS_S) + 1)
            self._sums[endpoint] = 0.0
        buckets[bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        self._sums[endpoint] += seconds

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "llmrelay_requests",
            "Data-plane requests by endpoint, virtual model, provider and status.",
            labels=("endpoint", "model", "provider", "status"),
        )
        for (endpoint, model, provider, status), count in list(self._counts.items()):
            requests.add_metric((endpoint, model, provider, str(status)), count)
        yield requests
        latency = HistogramMetricFamily(
            "llmrelay_request_duration_seconds",
            "Whole-request latency as the gateway saw it.",
            labels=("endpoint",),
        )
        for endpoint, buckets in list(self._buckets.items()):
            cumulative, running = [], 0
            for bound, count in zip((*LATENCY_BUCKETS_S, float("inf")), buckets, strict=True):
                running += count
                cumulative.append(("+Inf" if bound == float("inf") else str(bound), running))
            latency.add_metric((endpoint,), cumulative, sum_value=self._sums[endpoint])
        yield latency
