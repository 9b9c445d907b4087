"""What a guardrail policy costs per request: the gateway's guard step (gateway/guard.py) over
a 2 kB chat body, in process, for a few typical policies (`python -m bench.guardrails`).

Each policy screens a fresh parse of the same body (the parse itself is not counted: the
gateway parses every body once whatever its policies) many times; the median of several
rounds is printed in microseconds per request, with the body's matches. A key without a
policy is not measured here: it costs one attribute check (`principal.guard is None`), and
the data-plane benchmark (`python -m bench.run`) is the measure of that.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import orjson

from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.guard import screen_request
from llmrelay.guardrails.policy import Guard, compile_policy
from llmrelay.observability.metrics import Metrics

_PROSE = (
    "We reviewed the quarterly numbers and the onboarding flow. The team agreed to ship the "
    "new dashboard next sprint, after the accessibility pass and a round of load tests. "
)
#: A 2 kB conversation: a system prompt, three turns, an email address, a phone number and a
#: card number in the last user turn (the masked case), the rest ordinary prose.
BODY: dict[str, Any] = {
    "model": "chat",
    "messages": [
        {"role": "system", "content": "You are a helpful assistant. " + _PROSE},
        {"role": "user", "content": _PROSE * 5},
        {"role": "assistant", "content": _PROSE * 2},
        {
            "role": "user",
            "content": _PROSE * 2
            + "Reach me at jane.doe@example.com or +44 20 7946 0958; "
            + "the card on file is 4111 1111 1111 1111.",
        },
    ],
}
POLICIES: dict[str, list[dict[str, Any]]] = {
    "pii mask (email, phone, card, iban)": [{"detector": "pii", "action": "mask"}],
    "pii + secrets mask": [
        {"detector": "pii", "action": "mask"},
        {"detector": "secrets", "action": "mask"},
    ],
    "pii audit": [{"detector": "pii", "action": "audit"}],
    "one regex (TICKET-\\d+)": [
        {"detector": "regex", "name": "ticket", "pattern": r"TICKET-\d+", "action": "mask"}
    ],
}
ROUNDS = 7
PER_ROUND = 400


def _round(guard: Guard, raw: bytes, metrics: Metrics) -> float:
    bodies = [orjson.loads(raw) for _ in range(PER_ROUND)]
    records = [CallRecord(f"r{i}", "chat.completions", 0.0) for i in range(PER_ROUND)]
    started = time.perf_counter()
    for body, record in zip(bodies, records, strict=True):
        screen_request(guard, "chat", body, record, metrics, 1_000_000)
    return (time.perf_counter() - started) / PER_ROUND


def main() -> None:
    raw = orjson.dumps(BODY)
    metrics = Metrics()
    print(
        f"body: {len(raw)} bytes of JSON, {sum(len(m['content']) for m in BODY['messages'])} "
        "characters of text"
    )
    for name, rules in POLICIES.items():
        guard = Guard(compile_policy("p", "p", rules).rules)
        _round(guard, raw, metrics)  # warm up
        times = [_round(guard, raw, metrics) for _ in range(ROUNDS)]
        record = CallRecord("x", "chat.completions", 0.0)
        screen_request(guard, "chat", orjson.loads(raw), record, metrics, 1_000_000)
        hits = sum(row[13] for row in record.guard_hits or ())
        print(
            f"{name:<38} median {statistics.median(times) * 1e6:7.1f} us/request "
            f"(min {min(times) * 1e6:.1f}, max {max(times) * 1e6:.1f}), {hits} matches"
        )


if __name__ == "__main__":
    main()
