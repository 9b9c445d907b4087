"""Prometheus metrics, one registry per app so tests and several apps never collide."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

from llmrelay.observability.request_stats import RequestStats


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.request_stats = RequestStats()
        self.registry.register(self.request_stats)
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

    def watch(self, gauge: Gauge, read: Callable[[], float]) -> None:
        gauge.set_function(read)

    def count_request(
        self, endpoint: str, model: str, provider: str, status: int, seconds: float
    ) -> None:
        self.request_stats.observe(endpoint, model, provider, status, seconds)
