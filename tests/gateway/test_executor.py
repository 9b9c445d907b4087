"""The executor's retry timing: backoff with full jitter and the provider's Retry-After."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

from llmrelay.gateway.executor import MAX_BACKOFF_S, MIN_RETRY_GAP_S, backoff_s, retry_after_s


def test_backoff_grows_exponentially_with_full_jitter_within_bounds() -> None:
    rng = random.Random(7)
    for attempt in range(1, 12):
        ceiling = min(MAX_BACKOFF_S, 0.2 * 2 ** (attempt - 1))
        waits = [backoff_s(attempt, 0.2, rng) for _ in range(500)]
        assert all(MIN_RETRY_GAP_S <= w <= max(ceiling, MIN_RETRY_GAP_S) for w in waits)
        if ceiling > 2:
            # full jitter: spread over the whole range, not clustered at the top
            assert min(waits) < ceiling / 4 and max(waits) > ceiling * 3 / 4


def test_retry_after_in_seconds_or_as_an_http_date() -> None:
    assert retry_after_s("3") == 3.0
    assert retry_after_s(" 1.5 ") == 1.5
    now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=20), usegmt=True)
    assert retry_after_s(later, now=now.timestamp()) == 20.0
    assert (
        retry_after_s(format_datetime(now - timedelta(seconds=5), usegmt=True), now.timestamp())
        == 0.0
    )
    for junk in (None, "", "soon", "nan"):
        assert retry_after_s(junk) is None
