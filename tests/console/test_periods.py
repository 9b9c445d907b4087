"""Windows, the previous period of the same length, buckets, and deltas."""

from __future__ import annotations

from datetime import UTC, datetime

from llmrelay.console import periods


def test_a_window_and_the_one_before_it() -> None:
    now = datetime(2026, 12, 4, 10, 30, tzinfo=UTC)
    day = periods.window("24h", now)
    assert (day.since, day.until) == (
        datetime(2026, 12, 3, 11, tzinfo=UTC),
        datetime(2026, 12, 4, 11, tzinfo=UTC),
    )
    assert len(day.starts()) == 24
    assert day.previous.until == day.since
    assert day.previous.until - day.previous.since == day.until - day.since
    month = periods.window("30d", now)
    assert month.bucket == "day" and len(month.starts()) == 30
    assert periods.window("nonsense", now) == day


def test_times_typed_in_a_form_are_utc() -> None:
    assert periods.parse("2026-12-01T08:00") == datetime(2026, 12, 1, 8, tzinfo=UTC)
    assert periods.parse("2026-12-01T08:00:00+01:00") == datetime(2026, 12, 1, 7, tzinfo=UTC)
    assert periods.parse("soon") is None


def test_deltas() -> None:
    assert periods.delta(150, 100) == "+50%"
    assert periods.delta(5, 0) == "new"
    assert periods.delta(0, 0) == "±0"
