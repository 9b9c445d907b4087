"""Prometheus metrics, one registry per app so tests and several apps never collide."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "llmrelay_requests",
            "Data-plane requests by endpoint, virtual model, provider and status.",
            ("endpoint", "model", "provider", "status"),
            registry=self.registry,
        )
        self.latency = Histogram(
            "llmrelay_request_duration_seconds",
            "Whole-request latency as the gateway saw it.",
            ("endpoint",),
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
            registry=self.registry,
        )
        self.malformed_events = Counter(
            "llmrelay_upstream_malformed_events",
            "Upstream stream events that were not valid JSON and were dropped.",
            ("provider",),
            registry=self.registry,
        )
        self.records_dropped = Counter(
            "llmrelay_records_dropped",
            "Request records that could not be queued or written.",
            registry=self.registry,
        )
        self.snapshot_generation = Gauge(
            "llmrelay_snapshot_generation",
            "Config generation of the snapshot in use.",
            registry=self.registry,
        )
        self.snapshot_build_failures = Gauge(
            "llmrelay_snapshot_build_failures",
            "Snapshot builds that failed validation since start (the last good one stayed).",
            registry=self.registry,
        )
        self.record_queue_depth = Gauge(
            "llmrelay_record_queue_depth",
            "Request records waiting to be written.",
            registry=self.registry,
        )

        self._request_children: dict[tuple[str, str, str, int], Any] = {}
        self._latency_children: dict[str, Any] = {}

    def watch(self, gauge: Gauge, read: Callable[[], float]) -> None:
        gauge.set_function(read)

    def count_request(
        self, endpoint: str, model: str, provider: str, status: int, seconds: float
    ) -> None:
        """One finished request. Label children are cached: `labels()` is slow per call."""
        key = (endpoint, model, provider, status)
        child = self._request_children.get(key)
        if child is None:
            child = self._request_children[key] = self.requests.labels(
                endpoint, model, provider, str(status)
            )
        child.inc()
        latency = self._latency_children.get(endpoint)
        if latency is None:
            latency = self._latency_children[endpoint] = self.latency.labels(endpoint)
        latency.observe(seconds)
