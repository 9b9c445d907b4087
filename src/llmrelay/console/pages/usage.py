"""Usage analytics: filters, group by, the previous period of the same length side by side,
and a CSV export streamed from the admin API's time series."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from llmrelay.console import periods
from llmrelay.console.charts import chart
from llmrelay.console.web import Console, Visit, page, visit

GROUPS = ("model", "provider", "project", "key")
FILTERS = ("project", "key", "model", "provider")
SUMMED = (
    "requests",
    "errors",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cost_micros",
)
CSV_COLUMNS = (
    "start",
    "group",
    "requests",
    "errors",
    "error_rate",
    "input_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cost_usd",
    "latency_p50_ms",
    "latency_p95_ms",
    "ttfb_p50_ms",
    "ttfb_p95_ms",
    "estimated_requests",
)


def _period(params: Mapping[str, str]) -> periods.Period:
    bucket = "day" if params.get("bucket") == "day" else "hour"
    until = periods.parse(params.get("until")) or datetime.now(UTC).replace(
        minute=0, second=0, microsecond=0
    ) + timedelta(hours=1)
    since = periods.parse(params.get("since")) or until - timedelta(days=7)
    return periods.Period(since, until, bucket)


def _query(params: Mapping[str, str], period: periods.Period) -> dict[str, Any]:
    query: dict[str, Any] = {name: params.get(name) or None for name in FILTERS}
    group = params.get("group_by")
    return (
        query
        | period.query()
        | {
            "bucket": period.bucket,
            "group_by": group if group in GROUPS else None,
        }
    )


#: The row of requests that have no value for the grouping, in plain words (never "all").
NO_GROUP = {
    "model": "No model (refused before one was chosen)",
    "provider": "No provider (never sent to one)",
    "project": "No project (unauthenticated)",
    "key": "No key (unauthenticated)",
}
ALL = "All requests"


def _totals(points: list[dict[str, Any]], group_by: str | None) -> dict[str, dict[str, Any]]:
    """Per group (or one row for all requests): the sums over the period."""
    found: dict[str, dict[str, Any]] = {}
    missing = NO_GROUP.get(group_by or "", ALL)
    for point in points:
        group = str(point.get("group") or missing) if group_by else ALL
        row = found.setdefault(group, dict.fromkeys(SUMMED, 0))
        for name in SUMMED:
            row[name] += point[name]
    for row in found.values():
        row["error_rate"] = row["errors"] / row["requests"] if row["requests"] else 0.0
        row["cost_usd"] = row["cost_micros"] / 1_000_000
    return found


async def _options(found: Visit) -> dict[str, list[str]]:
    async def names(permission: str, path: str, field: str) -> list[str]:
        if not found.can(permission):
            return []
        return sorted({r[field] for r in (await found.admin.get(path, {"limit": 500})).data})

    return {
        "project": await names("projects:read", "/projects", "name"),
        "model": await names("models:read", "/models", "name"),
        "provider": await names("providers:read", "/providers", "slug"),
    }


async def usage(console: Console, request: Request) -> Response:
    found = await visit(console, request, "usage:read")
    params = request.query_params
    period = _period(params)
    query = _query(params, period)
    answer = await found.admin.get("/usage/timeseries", query)
    values: dict[str, Any] = {
        "params": {k: params.get(k, "") for k in (*FILTERS, "group_by", "bucket")},
        "since": periods.iso(period.since)[:16],
        "until": periods.iso(period.until)[:16],
        "groups": GROUPS,
        "options": await _options(found),
        "error": None,
    }
    if not answer.ok:  # a bad filter: the admin API's words, next to the filters
        values["error"] = answer.message
        return found.render("usage.html", answer.status, **values)
    before = await found.read("/usage/timeseries", query | period.previous.query())
    group_by = query["group_by"]
    now_totals = _totals(answer.body["data"], group_by)
    before_totals = _totals(before["data"], group_by)
    summary_now = await found.read(
        "/usage/summary", {k: query[k] for k in (*FILTERS, "since", "until")}
    )
    summary_before = await found.read(
        "/usage/summary", {k: query[k] for k in FILTERS} | period.previous.query()
    )
    starts = period.starts()
    per_start: dict[datetime | None, float] = {}
    for point in answer.body["data"]:
        moment = periods.parse(point["start"])
        per_start[moment] = per_start.get(moment, 0.0) + point["requests"]
    requests_chart = chart(
        "Requests",
        "",
        starts,
        period.bucket,
        [("requests", [per_start.get(s, 0.0) for s in starts])],
        "No requests in this period",
        whole=True,
    )
    groups = sorted(
        set(now_totals) | set(before_totals),
        key=lambda g: -now_totals.get(g, {}).get("requests", 0),
    )
    values.update(
        now=summary_now,
        before=summary_before,
        rows=groups,
        now_totals=now_totals,
        before_totals=before_totals,
        requests_chart=requests_chart,
        delta=periods.delta,
        previous=(periods.iso(period.previous.since)[:16], periods.iso(period.since)[:16]),
        csv_query=str(request.url.query),
    )
    return found.render("usage.html", **values)


def _csv_row(point: Mapping[str, Any]) -> list[Any]:
    latency, ttfb = point["latency_ms"], point["ttfb_ms"]
    return [
        point["start"],
        point.get("group", ""),
        point["requests"],
        point["errors"],
        point["error_rate"],
        point["input_tokens"],
        point["cached_input_tokens"],
        point["cache_write_tokens"],
        point["output_tokens"],
        point["reasoning_tokens"],
        point["cost_usd"],
        latency["p50"],
        latency["p95"],
        ttfb["p50"],
        ttfb["p95"],
        point["estimated_requests"],
    ]


async def export(console: Console, request: Request) -> Response:
    """The time series as CSV, one line per bucket (and group), written as it is sent."""
    found = await visit(console, request, "usage:read")
    period = _period(request.query_params)
    body = await found.read("/usage/timeseries", _query(request.query_params, period))

    async def lines() -> AsyncIterator[str]:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        for point in body["data"]:
            writer.writerow(["" if v is None else v for v in _csv_row(point)])
            if buffer.tell() > 16_384:
                yield buffer.getvalue()
                buffer.seek(0)
                buffer.truncate()
        yield buffer.getvalue()

    name = f"usage-{period.since:%Y%m%dT%H%M}-{period.until:%Y%m%dT%H%M}.csv"
    return StreamingResponse(
        lines(),
        media_type="text/csv; charset=utf-8",
        headers={"content-disposition": f'attachment; filename="{name}"'},
    )


def routes(console: Console) -> list[Route]:
    return [page(console, "/usage", usage), page(console, "/usage.csv", export)]
