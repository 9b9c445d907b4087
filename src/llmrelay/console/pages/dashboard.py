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
    label = "%H:00" if period.bucket == "hour" else "%m-%d"
    labels = [s.strftime(label) for s in starts]
    rows = [found.get(s) for s in starts]

    def column(name: str, scale: float = 1.0) -> list[float | None]:
        return [float(r[name]) * scale if r else 0.0 for r in rows]

    def latency(which: str) -> list[float | None]:
        return [r["latency_ms"][which] if r else None for r in rows]

    return [
        chart(
            "Requests", "", labels, [("requests", column("requests")), ("errors", column("errors"))]
        ),
        chart("Error rate", "%", labels, [("error rate", column("error_rate", 100))]),
        chart("Latency", "ms", labels, [("p50", latency("p50")), ("p95", latency("p95"))]),
        chart(
            "Tokens",
            "",
            labels,
            [("input", column("input_tokens")), ("output", column("output_tokens"))],
        ),
        chart("Cost", "$", labels, [("cost", column("cost_usd"))]),
    ]


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
    values: dict[str, Any] = {"window": name, "windows": list(periods.WINDOWS)}
    if found.can("usage:read"):
        now = await found.read("/usage/summary", period.query())
        before = await found.read("/usage/summary", period.previous.query())
        series = await found.read("/usage/timeseries", {**period.query(), "bucket": period.bucket})
        values.update(
            now=now, before=before, charts=_charts(period, series["data"]), delta=periods.delta
        )
    if request.query_params.get("part") == "charts":
        return found.render("partials/dashboard_charts.html", **values)
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
