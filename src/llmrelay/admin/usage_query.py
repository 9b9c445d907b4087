"""The usage queries behind /api/admin/usage and /api/admin/requests. Usage figures come
from the hourly rollups where they are clean and from the records elsewhere (store/rollups.py:
exact either way). The request list reads the records through their created_at and
(project_id, created_at) indexes; key and model filters narrow what those find (their own
indexes went in 0010: they cost every insert and the rollups serve the sums).

Token sums follow the record's buckets: `input_tokens` in the answers is every prompt token
(uncached + cached + cache writes: what a client's usage objects call prompt tokens), with
`cached_input_tokens` and `cache_write_tokens` as parts of it."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from llmrelay.admin.errors import AdminError
from llmrelay.store import rollups
from llmrelay.store.models import (
    ApiKey,
    Project,
    Provider,
    ProviderResource,
    RequestAttempt,
    RequestPayload,
    RequestRecord,
)

R = RequestRecord.__table__.c


@dataclass(frozen=True, slots=True)
class UsageFilter:
    project_ids: tuple[str, ...] | None = None
    key_ids: tuple[str, ...] | None = None
    model: str | None = None
    provider: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    resource: str | None = None

    def dims(self) -> rollups.Dimensions:
        return rollups.Dimensions(
            self.project_ids, self.key_ids, self.model, self.provider, self.resource
        )

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
        if self.resource is not None:
            clauses.append(R.resource_id == self.resource)
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
    visible: frozenset[str] | None = None,
    resource: str | None = None,
) -> UsageFilter:
    """Names (or ids) to ids; an unknown project or key is a 400 naming the parameter.
    `visible` is the project ids the caller may see (None: all): a project outside them is
    as unknown as one that does not exist, and no filter means all of them."""
    since, until = utc(since), utc(until)
    if since is not None and until is not None and since >= until:
        raise AdminError(400, "until: must be later than since", field="until")
    project_ids: tuple[str, ...] | None = None if visible is None else tuple(sorted(visible))
    if project is not None:
        query = select(Project.id).where(or_(Project.name == project, Project.id == project))
        if visible is not None:
            query = query.where(Project.id.in_(visible))
        project_ids = tuple(row[0] for row in await conn.execute(query))
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
    return UsageFilter(project_ids, key_ids, model, provider, since, until, resource)


def _figures(cell: rollups.Cell) -> dict[str, Any]:
    sums = cell.sums
    requests, errors, micros = sums["requests"], sums["errors"], sums["cost_micros"]
    return {
        "requests": requests,
        "errors": errors,
        "error_rate": round(errors / requests, 6) if requests else 0.0,
        "input_tokens": sums["prompt_tokens"],
        "cached_input_tokens": sums["cached_input_tokens"],
        "cache_write_tokens": sums["cache_write_tokens"],
        "output_tokens": sums["output_tokens"],
        "reasoning_tokens": sums["reasoning_tokens"],
        "cost_micros": micros,
        "cost_usd": micros / 1_000_000,
        "estimated_requests": sums["estimated"],
    }


async def summary(conn: AsyncConnection, where: UsageFilter) -> dict[str, Any]:
    total = rollups.Cell()
    found = await rollups.cells(conn, where.dims(), where.since, where.until, None, False)
    for cell in found.values():
        total.add(cell.sums, (), ())
    return _figures(total)


#: group_by values -> the rollup dimension
GROUP_COLUMNS = {
    "model": "virtual_model",
    "provider": "provider",
    "resource": "resource_id",
    "project": "project_id",
    "key": "key_id",
}


def _bucket_start(hour: datetime, bucket: str) -> datetime:
    return hour if bucket == "hour" else hour.replace(hour=0)


async def timeseries(
    conn: AsyncConnection, where: UsageFilter, bucket: str, group_by: str | None
) -> list[dict[str, Any]]:
    dimension = GROUP_COLUMNS[group_by] if group_by else None
    found = await rollups.cells(conn, where.dims(), where.since, where.until, dimension, True)
    merged: dict[tuple[datetime, str | None], rollups.Cell] = {}
    for (hour, group), cell in found.items():
        target = merged.setdefault((_bucket_start(hour, bucket), group), rollups.Cell())
        target.add(cell.sums, cell.latency, cell.ttfb)
    names = await _names(conn, group_by, {group for _, group in merged})
    series = []
    for (start, group), cell in sorted(
        merged.items(), key=lambda item: (item[0][0], item[0][1] or "")
    ):
        point: dict[str, Any] = {"start": start.isoformat().replace("+00:00", "Z")}
        if group_by:
            point["group"] = names.get(group, group)
            if group_by in ("project", "key", "resource"):
                point["group_id"] = group
        point.update(_figures(cell))
        point["latency_ms"] = _percentiles(cell.latency)
        point["ttfb_ms"] = _percentiles(cell.ttfb)
        series.append(point)
    return series


def _percentiles(bins: list[int]) -> dict[str, float | None]:
    return {"p50": rollups.quantile(bins, 0.5), "p95": rollups.quantile(bins, 0.95)}


async def _names(conn: AsyncConnection, group_by: str | None, ids: set[Any]) -> dict[Any, str]:
    """Display names of project, key and resource groups (records hold their ids); a
    resource's is "PROVIDER_SLUG/NAME"."""
    ids.discard(None)
    if not ids or group_by not in ("project", "key", "resource"):
        return {}
    if group_by == "resource":
        found = await conn.execute(
            select(ProviderResource.id, Provider.slug, ProviderResource.name)
            .join(Provider, Provider.id == ProviderResource.provider_id)
            .where(ProviderResource.id.in_(ids))
        )
        return {row.id: f"{row.slug}/{row.name}" for row in found}
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


async def visible_projects(
    conn: AsyncConnection,
    tenants: frozenset[str] | None,
    limited: Mapping[str, frozenset[str] | None],
) -> frozenset[str] | None:
    """The projects of `tenants` (None: every project, no limit), each tenant's narrowed to
    `limited[tenant]` when the caller is limited to some projects there."""
    if tenants is None:
        return None
    if not tenants:
        return frozenset()
    rows = await conn.execute(
        select(Project.id, Project.tenant_id).where(Project.tenant_id.in_(tenants))
    )
    return frozenset(
        project_id
        for project_id, tenant_id in rows
        if limited.get(tenant_id) is None or project_id in (limited[tenant_id] or ())
    )


async def one(
    conn: AsyncConnection, request_id: str, visible: frozenset[str] | None = None
) -> dict[str, Any] | None:
    """One record, or None (also when its project is not among `visible`)."""
    row = (
        await conn.execute(select(RequestRecord.__table__).where(R.request_id == request_id))
    ).first()
    if row is None or (visible is not None and row.project_id not in visible):
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
            "resource_id": a.resource_id,
            "upstream_model": a.upstream_model,
            "kind": a.kind,
            "status_code": a.status_code,
            "outcome": a.outcome,
            "latency_ms": a.latency_ms,
            "input_tokens": a.input_tokens,
            "output_tokens": a.output_tokens,
            "cost_micros": a.cost_micros,
        }
        for a in found
    ]
    record["payload"] = await _payload(conn, request_id)
    return record


async def _payload(conn: AsyncConnection, request_id: str) -> dict[str, Any] | None:
    """The request's captured bodies (its key captured them, gateway/capture.py), else None.
    Only this detail reads request_payloads: no list or usage query does."""
    payloads = RequestPayload.__table__
    row = (await conn.execute(select(payloads).where(payloads.c.request_id == request_id))).first()
    if row is None:
        return None
    request, request_encoding = body_text(row.request_body, row.request_truncated)
    response, response_encoding = body_text(row.response_body, row.response_truncated)
    return {
        "request": request,
        "request_encoding": request_encoding,
        "request_bytes": row.request_bytes,
        "request_truncated": bool(row.request_truncated),
        "response": response,
        "response_encoding": response_encoding,
        "response_bytes": row.response_bytes,
        "response_truncated": bool(row.response_truncated),
    }


def body_text(body: bytes | None, truncated: bool) -> tuple[str | None, str | None]:
    """A body for JSON: its text when it is UTF-8 ("utf-8"), else base64 ("base64"). A body
    cut at the cap may end inside a character: that last partial character (at most three
    bytes) is left out of the text rather than turning the whole body into base64."""
    if body is None:
        return None, None
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError as exc:
        if truncated and exc.start >= len(body) - 3 and exc.reason == "unexpected end of data":
            return body[: exc.start].decode("utf-8"), "utf-8"
    return base64.b64encode(body).decode("ascii"), "base64"
