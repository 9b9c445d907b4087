"""The `guard` step of the request path: a key's guardrail rules (KeySnap.guard) run over a
model call's text before it is admitted, and over a non-streamed answer before it is sent.

Only keys with rules in force get here (the callers check `principal.guard`), so a key
without any costs one attribute check per request. What this step does:

- masks the body in place (the adapter serialises it once, as it always does), so the
  provider receives the masked text; when the key captures payloads, the captured request
  body is replaced by the masked one, so no text a mask or block rule matched is stored;
- refuses a request a block rule matched with a 400 `content_policy_violation` in the
  client's protocol (the handler's error path records it; nothing is sent upstream), and
  withholds an answer a block rule matched the same way (its usage is still recorded);
- refuses, fail closed, a body with more text than LLMRELAY_GUARDRAILS_MAX_CHARS (413);
- puts one hit row per (rule, detector, field) on the request's record, which the recorder
  writes with it in the same batch (`guardrail_hits`), and counts the hits in Prometheus.

Streams are not screened on the way back: a relay passes the provider's events on as they
come, and a rule would see a secret only once it had been sent in pieces.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.errors import InvalidRequest, PayloadTooLarge
from llmrelay.guardrails.fields import ANSWER_WALKERS, REQUEST_WALKERS
from llmrelay.guardrails.policy import Guard, Rule
from llmrelay.guardrails.screen import ScanLimitExceeded, Screening
from llmrelay.observability.metrics import Metrics

REQUEST: Final = "request"
RESPONSE: Final = "response"
VIOLATION: Final = "content_policy_violation"


def screen_request(
    guard: Guard,
    operation: str,
    payload: dict[str, Any],
    record: CallRecord,
    metrics: Metrics,
    max_chars: int,
) -> None:
    """Screen (and mask) a request body; raises InvalidRequest when a block rule matched,
    PayloadTooLarge when it holds more text than is screened."""
    walk = REQUEST_WALKERS.get(operation)
    rules = guard.request_rules
    if walk is None or not rules:
        return
    screening = _run(walk, payload, rules, max_chars, REQUEST)
    _keep(screening, record, metrics, REQUEST)
    if screening.changed and record.capture is not None:
        record.capture.replace_request(orjson.dumps(payload))
    blocked = screening.blocked
    if blocked is not None:
        metrics.guardrail_blocked.labels(blocked.rule.policy, blocked.rule.name, REQUEST).inc()
        raise InvalidRequest(
            f"the request was blocked by guardrail policy {blocked.rule.policy!r}: rule "
            f"{blocked.rule.name!r} ({blocked.kind}) matched in {blocked.field}",
            code=VIOLATION,
            param=blocked.field,
        )


def screen_answer(
    guard: Guard,
    operation: str,
    answer: dict[str, Any],
    record: CallRecord,
    metrics: Metrics,
    max_chars: int,
) -> bool:
    """Screen (and mask) a parsed non-streamed answer; True when its text changed (the
    caller re-serialises it). Raises InvalidRequest when a block rule matched: the answer
    is withheld (a 400, which SDKs do not retry: another generation would be paid for and
    most likely withheld again)."""
    walk = ANSWER_WALKERS.get(operation)
    if walk is None:
        return False
    screening = _run(walk, answer, guard.response_rules, max_chars, RESPONSE)
    _keep(screening, record, metrics, RESPONSE)
    blocked = screening.blocked
    if blocked is not None:
        metrics.guardrail_blocked.labels(blocked.rule.policy, blocked.rule.name, RESPONSE).inc()
        raise InvalidRequest(
            f"the model's answer was withheld by guardrail policy {blocked.rule.policy!r}: "
            f"rule {blocked.rule.name!r} ({blocked.kind}) matched in {blocked.field}",
            code=VIOLATION,
        )
    return screening.changed


def _run(
    walk: Any, body: dict[str, Any], rules: tuple[Rule, ...], max_chars: int, location: str
) -> Screening:
    screening = Screening(rules, max_chars)
    try:
        walk(body, screening)
    except ScanLimitExceeded as exc:
        what = "request" if location == REQUEST else "model's answer"
        raise PayloadTooLarge(
            f"the {what} holds more than {exc.limit} characters of text, more than the "
            "gateway's guardrails screen (LLMRELAY_GUARDRAILS_MAX_CHARS)",
            code="guardrail_scan_limit",
        ) from None
    return screening


def _keep(screening: Screening, record: CallRecord, metrics: Metrics, location: str) -> None:
    """The hits as rows on the record (written with it) and in the metrics."""
    hits = screening.hits
    if not hits:
        return
    rows = record.guard_hits
    if rows is None:
        rows = record.guard_hits = []
    counter = metrics.guardrail_hits
    for hit in hits:
        rule = hit.rule
        rows.append(
            (
                record.request_id,
                len(rows),
                record.created,
                record.tenant_id,
                record.project_id,
                record.key_id,
                rule.policy_id,
                rule.policy,
                rule.name,
                hit.kind,
                rule.action,
                location,
                hit.field[:200],
                hit.count,
                hit.chars,
            )
        )
        counter.labels(rule.policy, rule.name, hit.kind, rule.action, location).inc(hit.count)
