"""The end of a data-plane call, however it ended (an answer, a stream's last event, an
error, a client gone): its record queued, its limits settled, its prepaid reservation's
settle queued, both kept in the journal (gateway/journal.py), its metrics counted, its spans
exported. Everything a finished request costs happens here, once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from llmrelay.gateway import spans
from llmrelay.gateway.call import RECORD_COLUMNS, CallRecord

if TYPE_CHECKING:
    from llmrelay.gateway.dispatch import Runtime

COST_COLUMN: Final = RECORD_COLUMNS.index("cost_micros")
PROTOCOL_COLUMN: Final = RECORD_COLUMNS.index("protocol")


def end_call(runtime: Runtime, record: CallRecord) -> None:
    if record.counted_route is not None:
        runtime.executor.router.in_flight.end(record.counted_route)
    latency_ms = record.latency_ms()
    row = record.row(latency_ms)  # settles the usage and prices it, once
    recorded = runtime.record_requests
    if recorded:
        capture = record.capture
        payload = None if capture is None else capture.row(record.request_id, record.created)
        runtime.recorder.record(row, record.attempt_log, payload, record.guard_hits)
    cost = row[COST_COLUMN]
    admission = record.admission
    if admission is not None:
        program = admission.program  # its owner took it, and settles it
        tokens = record.used_tokens() if program.reconciles else None  # for tpm only
        program.owner.settle(admission, tokens, cost)
    settle = None
    if record.reserved:
        prepaid = runtime.prepaid
        if prepaid is not None:
            settle = prepaid.settle(row)  # charged from the priced record, off the request path
    journal = runtime.journal
    if journal is not None:  # both, in a local file until their batches commit
        journal.keep(row if recorded else None, record.attempt_log, record.guard_hits, settle)
    stats = runtime.metrics.request_stats
    model, provider = record.virtual_model or "", record.provider or ""
    ttfb = record.ttfb_ms
    stats.observe(
        record.endpoint,
        row[PROTOCOL_COLUMN],
        model,
        provider,
        record.status_code,
        latency_ms / 1000.0,
        None if ttfb is None else ttfb / 1000.0,
    )
    usage = record.usage
    resource_id = record.resource_id
    if resource_id is not None and usage is not None:  # the resource's tpm bucket
        runtime.executor.resources.spend_tokens(resource_id, usage.total)
    if usage is not None:
        stats.observe_usage(
            model,
            provider,
            usage.input,
            usage.cached_input,
            usage.cache_write,
            usage.output,
            usage.reasoning,
            cost,
        )
    if record.attempts:
        stats.observe_attempts(model, record.attempt_log, provider)
    if runtime.tracing is not None:
        spans.export(runtime.tracing, record, latency_ms)
