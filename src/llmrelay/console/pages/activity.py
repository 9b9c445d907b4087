"""Activity: the request records (filters, pages by cursor) and one request with its attempt
log and, for keys that capture them, its bodies (shown escaped, as text); and the audit log."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmrelay.console import periods
from llmrelay.console.web import Console, page, visit

REQUEST_FILTERS = ("project", "key", "model", "provider", "status", "since", "until", "cursor")
AUDIT_FILTERS = ("actor", "action", "target", "since", "until", "cursor")


def _params(request: Request, names: tuple[str, ...]) -> dict[str, str]:
    return {name: request.query_params.get(name, "").strip() for name in names}


def _query(params: dict[str, str]) -> dict[str, Any]:
    query: dict[str, Any] = {k: v or None for k, v in params.items()}
    for name in ("since", "until"):  # a datetime-local input's value is UTC here
        moment = periods.parse(params.get(name))
        query[name] = periods.iso(moment) if moment else (params.get(name) or None)
    return query


async def requests(console: Console, request: Request) -> Response:
    found = await visit(console, request, "usage:read")
    params = _params(request, REQUEST_FILTERS)
    answer = await found.admin.get("/requests", {**_query(params), "limit": 50})
    if not answer.ok:
        return found.render(
            "activity.html",
            answer.status,
            rows=[],
            params=params,
            error=answer.message,
            next_cursor=None,
        )
    return found.render(
        "activity.html",
        rows=answer.body["data"],
        params=params,
        error=None,
        next_cursor=answer.body["next_cursor"],
    )


async def request_detail(console: Console, request: Request) -> Response:
    found = await visit(console, request, "usage:read")
    record = await found.read(f"/requests/{request.path_params['request_id']}")
    key_name = project_name = None
    if record.get("key_id") and found.can("keys:read"):
        key = await found.admin.get(f"/keys/{record['key_id']}")
        key_name = key.body.get("name") if key.ok else None
    if record.get("project_id") and found.can("projects:read"):
        project = await found.admin.get(f"/projects/{record['project_id']}")
        project_name = project.body.get("name") if project.ok else None
    return found.render("request.html", record=record, key_name=key_name, project_name=project_name)


async def audit(console: Console, request: Request) -> Response:
    found = await visit(console, request, "audit:read")
    params = _params(request, AUDIT_FILTERS)
    answer = await found.admin.get("/audit", {**_query(params), "limit": 50})
    if not answer.ok:
        return found.render(
            "audit.html",
            answer.status,
            rows=[],
            params=params,
            error=answer.message,
            next_cursor=None,
        )
    return found.render(
        "audit.html",
        rows=answer.body["data"],
        params=params,
        error=None,
        next_cursor=answer.body["next_cursor"],
    )


def routes(console: Console) -> list[Route]:
    return [
        page(console, "/activity", requests),
        page(console, "/activity/{request_id}", request_detail),
        page(console, "/audit", audit),
    ]
