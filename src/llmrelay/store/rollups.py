"""Hourly usage rollups: what the usage API and budgets read instead of scanning records.

An hour's rollup rows (one per tenant, project, key, model and provider seen in it) are always
recomputed whole from that hour's records, in one transaction, never incremented: replays,
retries and late batches cannot count twice. The recorder marks an hour dirty in the same
transaction as the records it writes (`mark`); `refresh` recomputes the dirty hours and clears
a mark only if no batch bumped it meanwhile. Readers (`cells`) take clean hours from the
rollups and everything else straight from the records (dirty hours, and the partial hours at
the edges of the asked range), so every answer is exact, however fresh.

Latency and time-to-first-byte percentiles come from cumulative counts over log-spaced bins
(each bound 1.5 times the last): within the bin they fall in, interpolated, as Prometheus'
histogram_quantile does.
"""

from __future__ import annotations

import asyncio
import itertools
import operator
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
from sqlalchemy import (
    ColumnElement,
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    not_,
    or_,
    select,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from llmrelay.store.db import background_begin, background_connect
from llmrelay.store.models import RequestRecord, UsageRollup, UsageRollupDirty

log = structlog.get_logger(__name__)

HOUR = timedelta(hours=1)
DIMENSIONS = ("tenant_id", "project_id", "key_id", "virtual_model", "provider", "resource_id")
SUMS = (
    "requests",
    "errors",
    "estimated",
    "prompt_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cost_micros",
)
#: Upper bounds (ms) of the latency bins; one more bin holds everything slower.
BOUNDS_MS: tuple[float, ...] = tuple(round(1.5**i, 3) for i in range(32))  # 1 ms .. ~191 s
_PG_REFRESH_LOCK = 7_211_960_125
#: An hour is rolled up once it ended this long ago (batches still in flight land first; a
#: later one marks it dirty again and it is recomputed once more).
CLOSE_GRACE_S = 120.0
#: Dirty hours taken per refresh (a batch of recomputes between looks at the mark table).
_BATCH_HOURS = 200

R = RequestRecord.__table__.c
U = UsageRollup.__table__.c


def hour_of(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def hour_of_timestamp(timestamp: float) -> datetime:
    return hour_of(datetime.fromtimestamp(timestamp, UTC))


@dataclass
class Cell:
    """Sums over some records: one hour and one group, or whatever was merged into it."""

    sums: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SUMS, 0))
    latency: list[int] = field(default_factory=lambda: [0] * (len(BOUNDS_MS) + 1))
    ttfb: list[int] = field(default_factory=lambda: [0] * (len(BOUNDS_MS) + 1))

    def add(self, sums: dict[str, int], latency: Sequence[int], ttfb: Sequence[int]) -> None:
        mine = self.sums
        for name in SUMS:
            mine[name] += int(sums[name] or 0)
        if latency:  # element-wise in C: a month of rollup rows is ~10^5 of these
            self.latency = list(map(operator.add, self.latency, latency))
        if ttfb:
            self.ttfb = list(map(operator.add, self.ttfb, ttfb))


def quantile(bins: Sequence[int], q: float) -> float | None:
    """The q-quantile of values counted in `bins` (per-bin counts over BOUNDS_MS)."""
    total = sum(bins)
    if not total:
        return None
    rank = q * total
    seen = 0
    for index, count in enumerate(bins):
        if count and seen + count >= rank:
            low = BOUNDS_MS[index - 1] if index else 0.0
            high = BOUNDS_MS[index] if index < len(BOUNDS_MS) else low
            return round(low + (high - low) * (rank - seen) / count, 3)
        seen += count
    return BOUNDS_MS[-1]


def _aggregates() -> list[Any]:
    """Sums and cumulative bin counts over records, in SUMS order then the bins."""
    columns: list[Any] = [
        func.count().label("requests"),
        func.sum(case((R.status_code >= 400, 1), else_=0)).label("errors"),
        func.sum(case((R.usage_source == "estimated", 1), else_=0)).label("estimated"),
        func.sum(func.coalesce(R.prompt_tokens, 0)).label("prompt_tokens"),
        func.sum(func.coalesce(R.cached_input_tokens, 0)).label("cached_input_tokens"),
        func.sum(func.coalesce(R.cache_write_tokens, 0)).label("cache_write_tokens"),
        func.sum(func.coalesce(R.completion_tokens, 0)).label("output_tokens"),
        func.sum(func.coalesce(R.reasoning_tokens, 0)).label("reasoning_tokens"),
        func.sum(func.coalesce(R.cost_micros, 0)).label("cost_micros"),
    ]
    for name, column in (("lat", R.latency_ms), ("ttfb", R.ttfb_ms)):
        columns += [
            func.sum(case((column < bound, 1), else_=0)).label(f"{name}_{i}")
            for i, bound in enumerate(BOUNDS_MS)
        ]
        columns.append(func.count(column).label(f"{name}_all"))
    return columns


def _bins(row: Any, name: str) -> list[int]:
    """Per-bin counts from a row's cumulative ones."""
    cumulative = [int(getattr(row, f"{name}_{i}") or 0) for i in range(len(BOUNDS_MS))]
    cumulative.append(int(getattr(row, f"{name}_all") or 0))
    return [cumulative[0]] + [b - a for a, b in itertools.pairwise(cumulative)]


def _hour_column(conn: AsyncConnection) -> ColumnElement[Any]:
    if conn.dialect.name == "postgresql":
        return func.date_trunc("hour", func.timezone("UTC", R.created_at)).label("hour")
    return func.substr(R.created_at, 1, 13).label("hour")


def _as_hour(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return datetime.fromisoformat(f"{value}:00:00").replace(tzinfo=UTC)


# -- writing ---------------------------------------------------------------------------------


def mark_sql(engine: AsyncEngine) -> str:
    """The recorder's driver-level statement marking one hour dirty, in its batch's
    transaction; parameters (hour, 1, 1)."""
    table = UsageRollupDirty.__table__
    dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
    statement = dialect.insert(table).values(hour=None, version=1)
    statement = statement.on_conflict_do_update(
        index_elements=["hour"], set_={"version": table.c.version + 1}
    )
    return str(statement.compile(dialect=engine.dialect, column_keys=["hour", "version"]))


async def recompute(conn: AsyncConnection, hour: datetime) -> int:
    """Replace one hour's rollup rows by a fresh aggregation of its records."""
    dimensions = [func.coalesce(getattr(R, name), "").label(name) for name in DIMENSIONS]
    query = (
        select(*dimensions, *_aggregates())
        .where(R.created_at >= hour, R.created_at < hour + HOUR)
        .group_by(*dimensions)
    )
    rows = (await conn.execute(query)).all()
    await conn.execute(delete(UsageRollup).where(U.hour == hour))
    if rows:
        await conn.execute(
            insert(UsageRollup),
            [
                {
                    "hour": hour,
                    **{name: getattr(row, name) for name in DIMENSIONS},
                    **{name: int(getattr(row, name) or 0) for name in SUMS},
                    "latency_bins": _bins(row, "lat"),
                    "ttfb_bins": _bins(row, "ttfb"),
                }
                for row in rows
            ],
        )
    return len(rows)


async def refresh(engine: AsyncEngine, limit: int | None = None, now: float | None = None) -> int:
    """Recompute up to `limit` dirty hours (oldest first) that have ended (CLOSE_GRACE ago);
    the number done. One replica at a time on PostgreSQL (the others skip the round).

    The hour in progress is left to the readers, who take it from the records: recomputing
    it every round would cost a scan of all its records each time (at 4,000 requests a
    second, 14 million by its end)."""
    closed_before = datetime.fromtimestamp((now or time.time()) - CLOSE_GRACE_S, UTC) - HOUR
    if engine.dialect.name != "postgresql":
        return await _refresh(engine, closed_before, limit or _BATCH_HOURS)
    async with background_connect(engine) as lock:
        taken = await lock.execute(text(f"SELECT pg_try_advisory_lock({_PG_REFRESH_LOCK})"))
        if not taken.scalar():
            return 0
        try:
            return await _refresh(engine, closed_before, limit or _BATCH_HOURS)
        finally:
            await lock.execute(text(f"SELECT pg_advisory_unlock({_PG_REFRESH_LOCK})"))


#: The ended dirty hours, oldest first: built once, as the round runs every
#: `rollup_interval_s` on every replica and usually finds none.
_DIRTY_HOURS = (
    select(UsageRollupDirty.hour, UsageRollupDirty.version)
    .where(UsageRollupDirty.hour <= bindparam("closed_before"))
    .order_by(UsageRollupDirty.hour)
    .limit(bindparam("limit"))
)


async def _refresh(engine: AsyncEngine, closed_before: datetime, limit: int) -> int:
    async with background_connect(engine) as conn:
        found = await conn.execute(_DIRTY_HOURS, {"closed_before": closed_before, "limit": limit})
        dirty = found.all()
    done = 0
    for hour, version in dirty:
        async with background_begin(engine) as conn:
            await recompute(conn, hour)
            await conn.execute(
                delete(UsageRollupDirty).where(
                    UsageRollupDirty.hour == hour, UsageRollupDirty.version == version
                )
            )
        done += 1
        await asyncio.sleep(0)
    return done


async def refresh_all(engine: AsyncEngine) -> int:
    """Refresh until no ended hour is dirty (at start: a restart after an outage, or the
    first start after the migration that marked every hour with records)."""
    total = 0
    while (done := await refresh(engine)) >= _BATCH_HOURS:
        total += done
    return total + done


async def run(engine: AsyncEngine, interval_s: float) -> None:
    """Refresh every `interval_s` until cancelled (a failure waits for the next round)."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await refresh_all(engine)
        except Exception as exc:  # noqa: BLE001 - a database hiccup must not end the task
            log.warning("rollup_refresh_failed", error=str(exc))


# -- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Dimensions:
    """Filters on the rollup dimensions (None: any)."""

    project_ids: tuple[str, ...] | None = None
    key_ids: tuple[str, ...] | None = None
    model: str | None = None
    provider: str | None = None
    resource_id: str | None = None

    def on(self, table: Any) -> list[ColumnElement[bool]]:
        clauses: list[ColumnElement[bool]] = []
        if self.project_ids is not None:
            clauses.append(table.project_id.in_(self.project_ids))
        if self.key_ids is not None:
            clauses.append(table.key_id.in_(self.key_ids))
        if self.model is not None:
            clauses.append(table.virtual_model == self.model)
        if self.provider is not None:
            clauses.append(table.provider == self.provider)
        if self.resource_id is not None:
            clauses.append(table.resource_id == self.resource_id)
        return clauses


async def cells(
    conn: AsyncConnection,
    dims: Dimensions,
    since: datetime | None,
    until: datetime | None,
    group_by: str | None,
    with_bins: bool,
) -> dict[tuple[datetime, str | None], Cell]:
    """(hour, group value) -> its sums, exact, from rollups where they are clean and from
    records elsewhere. `group_by`: one of DIMENSIONS, or None."""
    dirty = {_as_hour(row[0]) for row in await conn.execute(select(UsageRollupDirty.hour))}
    first_full = (
        None
        if since is None
        else hour_of(since) + (HOUR if since != hour_of(since) else timedelta())
    )
    end_full = None if until is None else hour_of(until)
    found: dict[tuple[datetime, str | None], Cell] = {}

    # Clean full hours, from the rollups.
    clauses = dims.on(U)
    if first_full is not None:
        clauses.append(U.hour >= first_full)
    if end_full is not None:
        clauses.append(U.hour < end_full)
    if dirty:
        clauses.append(not_(U.hour.in_(sorted(dirty))))
    group_column = getattr(U, group_by) if group_by else None
    keys = [U.hour] if group_column is None else [U.hour, group_column]
    if with_bins:
        query: Any = select(*keys, *(getattr(U, s) for s in SUMS), U.latency_bins, U.ttfb_bins)
    else:
        query = select(*keys, *(func.sum(getattr(U, s)).label(s) for s in SUMS)).group_by(*keys)
    for row in await conn.execute(query.where(*clauses)):
        key = (_as_hour(row.hour), _group(row, group_by))
        cell = found.setdefault(key, Cell())
        sums = {name: getattr(row, name) for name in SUMS}
        if with_bins:
            cell.add(sums, row.latency_bins, row.ttfb_bins)
        else:
            cell.add(sums, (), ())

    # Everything else, from the records: partial edge hours and dirty hours.
    record_clauses = dims.on(R)
    if since is not None:
        record_clauses.append(R.created_at >= since)
    if until is not None:
        record_clauses.append(R.created_at < until)
    pieces: list[ColumnElement[bool]] = []
    if first_full is not None and since is not None and first_full > since:
        pieces.append(R.created_at < first_full)
    if end_full is not None and until is not None and until > end_full:
        pieces.append(R.created_at >= end_full)
    for hour in _within(dirty, first_full, end_full):
        pieces.append(and_(R.created_at >= hour, R.created_at < hour + HOUR))
    if pieces:
        hour_column = _hour_column(conn)
        record_keys: list[Any] = [hour_column]
        if group_by:
            record_keys.append(getattr(R, group_by).label(group_by))
        query = (
            select(*record_keys, *_aggregates())
            .where(*record_clauses, or_(*pieces))
            .group_by(*record_keys)
        )
        for row in await conn.execute(query):
            key = (_as_hour(row.hour), _group(row, group_by))
            cell = found.setdefault(key, Cell())
            sums = {name: getattr(row, name) for name in SUMS}
            cell.add(sums, _bins(row, "lat"), _bins(row, "ttfb"))
    return found


def _group(row: Any, group_by: str | None) -> str | None:
    if not group_by:
        return None
    value = getattr(row, group_by)
    return value or None  # '' in the rollups: no value


def _within(
    hours: Iterable[datetime], first: datetime | None, end: datetime | None
) -> list[datetime]:
    return sorted(h for h in hours if (first is None or h >= first) and (end is None or h < end))
