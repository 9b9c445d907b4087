"""Time windows for the dashboard and usage analytics: a period, the previous one of the
same length, the buckets between (the admin API answers only buckets that have requests),
and deltas between two periods' figures."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

WINDOWS = {
    "24h": (timedelta(hours=24), "hour"),
    "7d": (timedelta(days=7), "hour"),
    "30d": (timedelta(days=30), "day"),
}


@dataclass(frozen=True, slots=True)
class Period:
    since: datetime
    until: datetime
    bucket: str  # hour | day

    @property
    def previous(self) -> Period:
        length = self.until - self.since
        return Period(self.since - length, self.since, self.bucket)

    def query(self) -> dict[str, str]:
        return {"since": iso(self.since), "until": iso(self.until)}

    def starts(self) -> list[datetime]:
        """Every bucket's start, oldest first."""
        step = timedelta(hours=1) if self.bucket == "hour" else timedelta(days=1)
        moment = _floor(self.since, self.bucket)
        found = []
        while moment < self.until:
            found.append(moment)
            moment += step
        return found


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse(value: str | None) -> datetime | None:
    """A `datetime-local` input's value or ISO 8601; without a zone it is UTC."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _floor(moment: datetime, bucket: str) -> datetime:
    moment = moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return moment.replace(hour=0) if bucket == "day" else moment


def window(name: str, now: datetime | None = None) -> Period:
    length, bucket = WINDOWS.get(name, WINDOWS["24h"])
    now = now or datetime.now(UTC)
    until = _floor(now, "hour") + timedelta(hours=1)
    if bucket == "day":
        until = _floor(now, "day") + timedelta(days=1)
    return Period(until - length, until, bucket)


def by_start(points: Iterable[Mapping[str, Any]]) -> dict[datetime, Mapping[str, Any]]:
    found = {}
    for point in points:
        moment = parse(str(point["start"]))
        if moment is not None:
            found[moment] = point
    return found


def delta(now: float | None, before: float | None) -> str:
    """The change from the previous period, as the page shows it."""
    if now is None or before is None:
        return ""
    if before == 0:
        return "new" if now else "±0"
    change = (now - before) / before * 100
    return f"{change:+.0f}%"
