"""The usage queries behind /api/admin/usage and /api/admin/requests, in SQLAlchemy Core
over request_records (every filter is served by an index: created_at, (project_id,
created_at), (key_id, created_at), (virtual_model, created_at)).

Token sums follow the record's buckets: `input_tokens` in the answers is every prompt token
(uncached + cached + cache writes: what a client's usage objects call prompt tokens), with
`cached_input_tokens` and `cache_write_tokens` as parts of it."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, case, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from llmrelay.admin.errors import AdminError
from llmrelay.store.models import ApiKey, Project, RequestAttempt, RequestRecord

R = RequestRecord.__table__.c


@dataclass(frozen=True, slots=True)
class UsageFilter:
    project_ids: tuple[str, ...] | None = None
    key_ids: tuple[str, ...] | None = None
    model: str | None = None
    provider: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def where(self) -> list[ColumnElement[bool]]:
        clauses: list[ColumnElement[bool]] = []
        if self.project_ids is not None:
            clauses.append(R.project_id.in_(self.project_ids))
        if self.key_ids is not None:
            clauses.append(R.key_id.in_(self.key_ids))
        if self.model is not None:
            clauses.append(R.virtual_model == self.model)
        if self.provider is not None:
            clauses.append(R.provider == self.provider)
        if self.since is not None:
            clauses.append(R.created_at >= self.since)
        if self.until is not None:
            clauses.append(R.created_at < self.until)
        return clauses


def utc(moment: datetime | None) -> datetime | None:
    """A time without a zone is UTC."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=UTC)


async def resolve(
    conn: AsyncConnection,
    *,
    project: str | None,
    key: str | None,
    model: str | None,
    provider: str | None,
    since: datetime | None,
    until: datetime | None,
) -> UsageFilter:
    """Names (or ids) to ids; an unknown project or key is a 400 naming the parameter."""
    since, until = utc(since), utc(until)
    if since is not None and until is not None and since >= until:
        raise AdminError(400, "until: must be later than since", field="until")
    project_ids: tuple[str, ...] | None = None
    if project is not None:
        rows = await conn.execute(
            select(Project.id).where(or_(Project.name == project, Project.id == project))
        )
        project_ids = tuple(row[0] for row in rows)
        if not project_ids:
            raise AdminError(400, f"project: no project named {project!r}", field="project")
    key_ids: tuple[str, ...] | None = None
    if key is not None:
        query = select(ApiKey.id).where(or_(ApiKey.name == key, ApiKey.id == key))
        if project_ids is not None:
            query = query.where(ApiKey.project_id.in_(project_ids))
        key_ids = tuple(row[0] for row in await conn.execute(query))
        if not key_ids:
            raise AdminError(400, f"key: no key named {key!r}", field="key")
    return UsageFilter(project_ids, key_ids, model, provider, since, until)


def _sums() -> list[Any]:
    """Aggregate columns shared by the summary and the time series."""
    zero = 0
    return [
        func.count().label("requests"),
        func.coalesce(func.sum(case((R.status_code >= 400, 1), else_=0)), zero).label("errors"),
        func.coalesce(func.sum(R.prompt_tokens), zero).label("input_tokens"),
        func.coalesce(func.sum(R.cached_input_tokens), zero).label("cached_input_tokens"),
        func.coalesce(func.sum(R.cache_write_tokens), zero).label("cache_write_tokens"),
        func.coalesce(func.sum(R.completion_tokens), zero).label("output_tokens"),
        func.coalesce(func.sum(R.reasoning_tokens), zero).label("reasoning_tokens"),
        func.coalesce(func.sum(R.cost_micros), zero).label("cost_micros"),
        func.coalesce(func.sum(case((R.usage_source == "estimated", 1), else_=0)), zero).label(
            "estimated_requests"
        ),
    ]


def _figures(row: Any) -> dict[str, Any]:
    requests = int(row.requests)
    errors = int(row.errors)
    micros = int(row.cost_micros)
    return {
        "requests": requests,
        "errors": errors,
        "error_rate": round(errors / requests, 6) if requests else 0.0,
        "input_tokens": int(row.input_tokens),
        "cached_input_tokens": int(row.cached_input_tokens),
        "cache_write_tokens": int(row.cache_write_tokens),
        "output_tokens": int(row.output_tokens),
        "reasoning_tokens": int(row.reasoning_tokens),
        "cost_micros": micros,
        "cost_usd": micros / 1_000_000,
        "estimated_requests": int(row.estimated_requests),
    }


async def summary(conn: AsyncConnection, where: UsageFilter) -> dict[str, Any]:
    row = (await conn.execute(select(*_sums()).where(*where.where()))).one()
    return _figures(row)


GROUP_COLUMNS = {
    "model": R.virtual_model,
    "provider": R.provider,
    "project": R.project_id,
    "key": R.key_id,
}


def _bucket_column(conn: AsyncConnection, bucket: str) -> ColumnElement[Any]:
    if conn.dialect.name == "postgresql":
        return func.date_trunc(bucket, func.timezone("UTC", R.created_at))
    # SQLite stores 'YYYY-MM-DD HH:MM:SS.ffffff' in UTC: a prefix is the bucket
    return func.substr(R.created_at, 1, 13 if bucket == "hour" else 10)


def _bucket_start(value: Any, bucket: str) -> str:
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
    else:
        text = str(value)
        moment = datetime.fromisoformat(text + (":00:00" if bucket == "hour" else "T00:00:00"))
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


async def timeseries(
    conn: AsyncConnection, where: UsageFilter, bucket: str, group_by: str | None
) -> list[dict[str, Any]]:
    start = _bucket_column(conn, bucket).label("start")
    group = GROUP_COLUMNS[group_by].label("grp") if group_by else None
    keys: list[Any] = [start] if group is None else [start, group]
    query: Select[Any] = select(*keys, *_sums()).where(*where.where()).group_by(*keys)
    rows = (await conn.execute(query.order_by(*keys))).all()
    latency = await _percentiles(conn, where, start, group)
    names = await _names(conn, group_by, {row.grp for row in rows} if group is not None else set())
    series = []
    for row in rows:
        grp = row.grp if group is not None else None
        point: dict[str, Any] = {"start": _bucket_start(row.start, bucket)}
        if group_by:
            point["group"] = names.get(grp, grp)
            if group_by in ("project", "key"):
                point["group_id"] = grp
        point.update(_figures(row))
        point.update(latency.get((str(row.start), grp), _NO_PERCENTILES))
        series.append(point)
    return series


_NO_PERCENTILES = {"latency_ms": {"p50": None, "p95": None}, "ttfb_ms": {"p50": None, "p95": None}}


async def _percentiles(
    conn: AsyncConnection, where: UsageFilter, start: Any, group: Any
) -> dict[tuple[str, Any], dict[str, Any]]:
    """p50/p95 of latency and time to first byte per bucket and group: computed by
    PostgreSQL (percentile_cont), or here over the rows on SQLite (which has none)."""
    keys = [start] if group is None else [start, group]
    found: dict[tuple[str, Any], dict[str, Any]] = {}
    if conn.dialect.name == "postgresql":
        columns = [
            func.percentile_cont(q).within_group(column).label(f"{name}_{label}")
            for name, column in (("latency", R.latency_ms), ("ttfb", R.ttfb_ms))
            for q, label in ((0.5, "p50"), (0.95, "p95"))
        ]
        query = select(*keys, *columns).where(*where.where()).group_by(*keys)
        for row in await conn.execute(query):
            found[(str(row.start), row.grp if group is not None else None)] = {
                "latency_ms": _pair(row.latency_p50, row.latency_p95),
                "ttfb_ms": _pair(row.ttfb_p50, row.ttfb_p95),
            }
        return found
    samples: dict[tuple[str, Any], tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    query = select(*keys, R.latency_ms, R.ttfb_ms).where(*where.where())
    for row in await conn.execute(query):
        latencies, ttfbs = samples[(str(row.start), row.grp if group is not None else None)]
        latencies.append(row.latency_ms)
        if row.ttfb_ms is not None:
            ttfbs.append(row.ttfb_ms)
    for point, (latencies, ttfbs) in samples.items():
        found[point] = {"latency_ms": _quantiles(latencies), "ttfb_ms": _quantiles(ttfbs)}
    return found


def _pair(p50: float | None, p95: float | None) -> dict[str, float | None]:
    return {
        "p50": None if p50 is None else round(float(p50), 3),
        "p95": None if p95 is None else round(float(p95), 3),
    }


def _quantiles(values: Sequence[float]) -> dict[str, float | None]:
    """Linear interpolation, as PostgreSQL's percentile_cont does."""
    if not values:
        return {"p50": None, "p95": None}
    if len(values) == 1:
        return _pair(values[0], values[0])
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return _pair(cuts[49], cuts[94])


async def _names(conn: AsyncConnection, group_by: str | None, ids: set[Any]) -> dict[Any, str]:
    """Display names of project and key groups (records hold their ids)."""
    ids.discard(None)
    if not ids or group_by not in ("project", "key"):
        return {}
    table = Project if group_by == "project" else ApiKey
    rows = await conn.execute(select(table.id, table.name).where(table.id.in_(ids)))
    return {row.id: row.name for row in rows}


RECORD_FIELDS = tuple(
    column.name for column in RequestRecord.__table__.columns if column.name != "id"
)


def _record(row: Any) -> dict[str, Any]:
    record = {name: getattr(row, name) for name in RECORD_FIELDS}
    created = record["created_at"]
    if isinstance(created, datetime):
        record["created_at"] = utc(created).isoformat().replace("+00:00", "Z")  # type: ignore[union-attr]
    return record


async def page(
    conn: AsyncConnection, where: UsageFilter, status: int | None, limit: int, after: int | None
) -> tuple[list[dict[str, Any]], int | None]:
    """Newest first; `after` is the last id of the previous page (the cursor)."""
    clauses = where.where()
    if status is not None:
        clauses.append(R.status_code == status)
    if after is not None:
        clauses.append(R.id < after)
    query = select(RequestRecord.__table__).where(*clauses)
    rows = (await conn.execute(query.order_by(R.id.desc()).limit(limit + 1))).all()
    more = len(rows) > limit
    rows = rows[:limit]
    return [_record(row) for row in rows], (rows[-1].id if more else None)


async def one(conn: AsyncConnection, request_id: str) -> dict[str, Any] | None:
    row = (
        await conn.execute(select(RequestRecord.__table__).where(R.request_id == request_id))
    ).first()
    if row is None:
        return None
    record = _record(row)
    attempts = RequestAttempt.__table__
    found = await conn.execute(
        select(attempts).where(attempts.c.request_id == request_id).order_by(attempts.c.attempt)
    )
    record["attempt_log"] = [
        {
            "attempt": a.attempt,
            "created_at": utc(a.created_at).isoformat().replace("+00:00", "Z")  # type: ignore[union-attr]
            if isinstance(a.created_at, datetime)
            else a.created_at,
            "route_id": a.route_id,
            "provider": a.provider,
            "upstream_model": a.upstream_model,
            "kind": a.kind,
            "status_code": a.status_code,
            "outcome": a.outcome,
            "latency_ms": a.latency_ms,
        }
        for a in found
    ]
    return record
