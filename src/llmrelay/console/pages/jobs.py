"""Background jobs (probes, discovery, price sync, retention, background responses,
webhooks): the list with filters and pages by cursor, and cancelling one."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmrelay.console.web import Console, form_visit, page, see_other, visit

STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")


async def jobs(console: Console, request: Request) -> Response:
    found = await visit(console, request, "jobs:read")
    params = {n: request.query_params.get(n, "").strip() for n in ("kind", "status", "cursor")}
    query = {k: v or None for k, v in params.items()}
    answer = await found.admin.get("/jobs", {**query, "limit": 50})
    if not answer.ok:
        return found.render(
            "jobs.html",
            answer.status,
            rows=[],
            params=params,
            statuses=STATUSES,
            error=answer.message,
            next_cursor=None,
        )
    return found.render(
        "jobs.html",
        rows=answer.body["data"],
        params=params,
        statuses=STATUSES,
        error=None,
        next_cursor=answer.body["next_cursor"],
    )


async def cancel(console: Console, request: Request) -> Response:
    found, _ = await form_visit(console, request, "jobs:write")
    answer = await found.admin.call("POST", f"/jobs/{request.path_params['job_id']}/cancel")
    if not answer.ok:
        rows = (await found.read("/jobs", {"limit": 50}))["data"]
        return found.render(
            "jobs.html",
            answer.status,
            rows=rows,
            params={},
            statuses=STATUSES,
            error=answer.message,
            next_cursor=None,
        )
    return see_other("/jobs", found)


def routes(console: Console) -> list[Route]:
    return [
        page(console, "/jobs", jobs),
        page(console, "/jobs/{job_id}/cancel", cancel, ["POST"]),
    ]
