"""The dashboard: requests, error rate, latency, tokens and cost over a window (charts drawn
on the server, refreshed by static/live.js), the change from the previous window, and
provider health."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmrelay.console import periods
from llmrelay.console.charts import Chart, chart
from llmrelay.console.web import Console, Visit, page, visit


def _charts(period: periods.Period, points: list[dict[str, Any]]) -> list[Chart]:
    found = periods.by_start(points)
    starts = period.starts()
    rows = [found.get(s) for s in starts]
    bucket = period.bucket

    def column(name: str, scale: float = 1.0) -> list[float | None]:
        return [float(r[name]) * scale if r else 0.0 for r in rows]

    def latency(which: str) -> list[float | None]:
        return [r["latency_ms"][which] if r else None for r in rows]

    def error_rate() -> list[float | None]:  # no requests: no rate (a gap, not 0 %)
        return [float(r["error_rate"]) * 100 if r and r["requests"] else None for r in rows]

    return [
        chart(
            "Requests",
            "",
            starts,
            bucket,
            [("requests", column("requests")), ("errors", column("errors"))],
            whole=True,
        ),
        chart(
            "Error rate",
            "%",
            starts,
            bucket,
            [("error rate", error_rate())],
            "No errors in this window" if any(column("requests")) else "No requests",
        ),
        chart("Latency", "ms", starts, bucket, [("p50", latency("p50")), ("p95", latency("p95"))]),
        chart(
            "Tokens",
            "",
            starts,
            bucket,
            [("input", column("input_tokens")), ("output", column("output_tokens"))],
            "No tokens in this window",
            whole=True,
        ),
        chart(
            "Cost",
            "$",
            starts,
            bucket,
            [("cost", column("cost_usd"))],
            "No cost in this window (no priced request)",
        ),
    ]


#: The groups of the dashboard's "top" tables, and how many rows each shows.
TOPS = (("model", "Top models"), ("project", "Top projects"), ("key", "Top keys"))
TOP_ROWS = 5


async def _tops(found: Visit, period: periods.Period) -> list[dict[str, Any]]:
    """The window's busiest models, projects and keys: requests, tokens, cost, errors."""
    tables = []
    for group_by, title in TOPS:
        answer = await found.admin.get(
            "/usage/timeseries", {**period.query(), "bucket": "day", "group_by": group_by}
        )
        sums: dict[str, dict[str, Any]] = {}
        for point in answer.data:
            if not point.get("group"):
                continue
            row = sums.setdefault(
                str(point["group"]),
                {
                    "name": point["group"],
                    "id": point.get("group_id"),
                    "requests": 0,
                    "errors": 0,
                    "tokens": 0,
                    "cost_micros": 0,
                },
            )
            row["requests"] += point["requests"]
            row["errors"] += point["errors"]
            row["tokens"] += point["input_tokens"] + point["output_tokens"]
            row["cost_micros"] += point["cost_micros"]
        rows = sorted(sums.values(), key=lambda r: (-r["requests"], r["name"]))[:TOP_ROWS]
        most = max((r["requests"] for r in rows), default=0)
        for row in rows:
            row["bar"] = int(row["requests"] / most * 100 // 5 * 5) if most else 0
        tables.append({"group": group_by, "title": title, "rows": rows})
    return tables


async def health(found: Visit) -> dict[str, Any] | None:
    """Provider health and breaker states (GET /providers/health), or None when this
    gateway's admin API has no such route."""
    if not found.can("providers:read"):
        return None
    answer = await found.admin.get("/providers/health")
    if answer.status == 404 or not answer.ok:
        return None
    body: dict[str, Any] = answer.body
    return body


async def dashboard(console: Console, request: Request) -> Response:
    found = await visit(console, request)
    name = request.query_params.get("window", "24h")
    name = name if name in periods.WINDOWS else "24h"
    period = periods.window(name)
    refresh = request.query_params.get("refresh", "")
    every = min(max(int(refresh), 2), 300) if refresh.isdigit() else 15  # a wall display: faster
    values: dict[str, Any] = {"window": name, "windows": list(periods.WINDOWS), "every": every}
    if found.can("usage:read"):
        now = await found.read("/usage/summary", period.query())
        before = await found.read("/usage/summary", period.previous.query())
        series = await found.read("/usage/timeseries", {**period.query(), "bucket": period.bucket})
        values.update(
            now=now, before=before, charts=_charts(period, series["data"]), delta=periods.delta
        )
    if request.query_params.get("part") == "charts":
        return found.render("partials/dashboard_charts.html", **values)
    if found.can("usage:read"):
        values["tops"] = await _tops(found, period)
    values["health"] = await health(found)
    return found.render("dashboard.html", **values)


async def health_part(console: Console, request: Request) -> Response:
    found = await visit(console, request, "providers:read")
    return found.render("partials/health.html", health=await health(found))


def routes(console: Console) -> list[Route]:
    return [
        page(console, "/dashboard", dashboard),
        page(console, "/dashboard/health", health_part),
    ]
