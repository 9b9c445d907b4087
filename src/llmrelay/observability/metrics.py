"""Prometheus metrics, one registry per app so tests and several apps never collide."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from llmrelay.observability.request_stats import RequestStats

#: From a tenth of a millisecond (a loop that keeps up) to seconds (one that is stuck).
LOOP_LAG_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0,
)  # fmt: skip


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
        self.stream_rescues = Counter(
            "llmrelay_stream_rescues",
            "Streams that broke or stalled mid-answer on a model with stream_rescue, by"
            " outcome: rescued (continued from another route), refused (the continuation"
            " point could not be verified), failed (no route continued it).",
            ("outcome",),
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
        self.snapshot_age = Gauge(
            "llmrelay_snapshot_age_seconds",
            "Seconds since the snapshot in use was built (it is rebuilt when the config changes).",
            registry=self.registry,
        )
        self.providers_denied = Gauge(
            "llmrelay_providers_denied",
            "Providers left out of routing in the snapshot in use: their health probe found "
            "them unavailable (refused credentials, unreachable).",
            registry=self.registry,
        )
        self.snapshot_build_failures = Counter(
            "llmrelay_snapshot_build_failures",
            "Config generations whose snapshot failed to build or validate (the last good one "
            "stayed); a generation retried with the same error counts once.",
            registry=self.registry,
        )
        self.config_signals_received = Counter(
            "llmrelay_config_signals_received",
            "Config change signals received (Redis pub/sub or PostgreSQL NOTIFY).",
            ("transport",),
            registry=self.registry,
        )
        self.config_signal_listening = Gauge(
            "llmrelay_config_signal_listening",
            "1 while the config change listener is connected; 0 while it reconnects or when "
            "there is none (polling alone).",
            registry=self.registry,
        )
        self.config_signal_publish_failures = Counter(
            "llmrelay_config_signal_publish_failures",
            "Config change signals this process could not publish (polling covers them).",
            ("transport",),
            registry=self.registry,
        )
        self.record_queue_depth = Gauge(
            "llmrelay_record_queue_depth",
            "Request records waiting to be written.",
            registry=self.registry,
        )
        self.records_spooled = Counter(
            "llmrelay_records_spooled",
            "Request records the database could not take, kept in the local spool instead.",
            registry=self.registry,
        )
        self.record_spool_rows = Gauge(
            "llmrelay_record_spool_rows",
            "Request records in this process's spool files, waiting to be replayed.",
            registry=self.registry,
        )
        self.record_spool_bytes = Gauge(
            "llmrelay_record_spool_bytes",
            "Size of this process's spool files, waiting to be replayed.",
            registry=self.registry,
        )
        self.record_spool_write_failures = Counter(
            "llmrelay_record_spool_write_failures",
            "Batches of request records the spool could not write (a full or failing disk).",
            registry=self.registry,
        )
        self.records_held = Gauge(
            "llmrelay_records_held",
            "Request records neither the database nor the spool took, held in memory "
            "(at most LLMRELAY_RECORD_QUEUE_SIZE) until one does.",
            registry=self.registry,
        )

        self.breaker_transitions = Counter(
            "llmrelay_breaker_transitions",
            "Circuit breaker state changes per route (closed, open, half_open).",
            ("route", "from_state", "to_state"),
            registry=self.registry,
        )
        self.limits_degraded = Gauge(
            "llmrelay_limits_degraded",
            "1 while the shared limiter (Redis) is unreachable and limits are kept locally.",
            registry=self.registry,
        )
        self.limits_degraded_transitions = Counter(
            "llmrelay_limits_degraded_transitions",
            "Times the limiter lost Redis (to: degraded) or got it back (to: shared).",
            ("to",),
            registry=self.registry,
        )
        self.limits_degraded_admissions = Counter(
            "llmrelay_limits_degraded_admissions",
            "Requests admitted by the local fallback while Redis was unreachable (fail_open).",
            registry=self.registry,
        )
        self.limits_replicas = Gauge(
            "llmrelay_limits_replicas",
            "Replicas sharing the limits, as Redis last said (the fail_open share divides by it).",
            registry=self.registry,
        )
        self.limits_refused = Counter(
            "llmrelay_limits_refused",
            "Requests refused by a limit (429) or because limits could not be checked (503).",
            ("limit", "scope"),
            registry=self.registry,
        )

        self.guardrail_hits = Counter(
            "llmrelay_guardrail_hits",
            "Guardrail matches, by policy, rule, detector (what matched), action (audit, "
            "mask, block) and location (request, response).",
            ("policy", "rule", "detector", "action", "location"),
            registry=self.registry,
        )
        self.guardrail_blocked = Counter(
            "llmrelay_guardrail_blocked",
            "Requests refused (location request) or answers withheld (location response) by "
            "a guardrail block rule, by policy and rule.",
            ("policy", "rule", "location"),
            registry=self.registry,
        )

        self.jobs_finished = Counter(
            "llmrelay_jobs_finished",
            "Job attempts this process ran, by kind and how they ended (succeeded, failed, "
            "retry, rescheduled, cancelled, lost).",
            ("kind", "outcome"),
            registry=self.registry,
        )
        self.jobs_running = Gauge(
            "llmrelay_jobs_running",
            "Jobs this process is running now.",
            registry=self.registry,
        )
        self.jobs_leases_repaired = Counter(
            "llmrelay_jobs_leases_repaired",
            "Jobs whose worker stopped (lease expired): queued again, or failed with no "
            "attempts left.",
            ("to",),
            registry=self.registry,
        )

        self.billing_reservations = Counter(
            "llmrelay_billing_reservations",
            "Prepaid reservations before a provider call, by outcome (reserved, insufficient, "
            "unpriced, request_id_used, unavailable).",
            ("outcome",),
            registry=self.registry,
        )
        self.billing_settlements = Counter(
            "llmrelay_billing_settlements",
            "Prepaid settles after a call, by outcome (charged, released, metering_failed, "
            "none, retried, dropped: queue full, failed: left held for reconciliation).",
            ("outcome",),
            registry=self.registry,
        )
        self.billing_settle_queue_depth = Gauge(
            "llmrelay_billing_settle_queue_depth",
            "Settles of finished prepaid requests waiting to be written.",
            registry=self.registry,
        )
        self.billing_reconciled = Counter(
            "llmrelay_billing_reconciled",
            "What the billing reconciliation job did (orders: credited, failed, expired, "
            "mismatch; reservations: settled, released, metering_failed).",
            ("what", "outcome"),
            registry=self.registry,
        )
        self.billing_webhooks = Counter(
            "llmrelay_billing_stripe_webhooks",
            "Stripe webhook deliveries, by outcome (credited, ignored, duplicate, mismatch, "
            "failed, expired, bad_signature; disputes: held, won, lost).",
            ("outcome",),
            registry=self.registry,
        )

        self.event_loop_lag = Histogram(
            "llmrelay_event_loop_lag_seconds",
            "How long the event loop made work wait: a marker posted at random moments (about "
            "every LLMRELAY_LOOP_LAG_SAMPLE_S) until the loop ran it. Anything over a "
            "millisecond delays every request and stream of the process by as much.",
            buckets=LOOP_LAG_BUCKETS_S,
            registry=self.registry,
        )

    def watch_breakers(self, states: Callable[[], Mapping[str, str]]) -> None:
        """`llmrelay_breaker_state{route}`: 0 closed, 1 half-open, 2 open (routes that ever
        failed; the rest are closed)."""
        self.registry.register(_BreakerStates(states))

    def watch(self, gauge: Gauge, read: Callable[[], float]) -> None:
        gauge.set_function(read)


_STATE_VALUES = {"closed": 0.0, "half_open": 1.0, "open": 2.0}


class _BreakerStates:
    def __init__(self, states: Callable[[], Mapping[str, str]]) -> None:
        self._states = states

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "llmrelay_breaker_state",
            "Circuit breaker state per route: 0 closed, 1 half-open, 2 open.",
            labels=("route",),
        )
        for route, state in sorted(self._states().items()):
            family.add_metric((route,), _STATE_VALUES.get(state, 0.0))
        yield family
