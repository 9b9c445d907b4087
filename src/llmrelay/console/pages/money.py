"""Money beyond the wallet page: refunds, balance adjustments and reconciling reservations
whose metering failed (/billing/adjustments), and month-to-date spend per project and key
against their monthly budgets (/spend)."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmrelay.console import periods
from llmrelay.console.forms import FormState, text
from llmrelay.console.pages.billing import billing_tenants
from llmrelay.console.web import Console, Visit, form_visit, page, see_other, visit

RESERVATION_STATUSES = ("metering_failed", "held", "settled", "released")
#: The admin API's names of the amounts these forms send in USD.
_USD = {"amount_micros": "amount_usd", "cost_micros": "cost_usd"}


async def _adjustments(
    found: Visit,
    tenant_id: str | None,
    forms: dict[str, FormState],
    status: int = 200,
    **extra: Any,
) -> Response:
    tenants = await billing_tenants(found)
    if tenant_id is None:
        tenant_id = tenants[0]["id"] if tenants else None
    reservations: list[Any] = []
    wallet = None
    shown = found.request.query_params.get("status") or "metering_failed"
    if tenant_id is not None:
        base = f"/billing/{tenant_id}"
        answer = await found.admin.get(f"{base}/reservations", {"status": shown, "limit": 50})
        reservations = answer.data
        got = await found.admin.get(f"{base}/wallet")
        wallet = got.body if got.ok else None
    return found.render(
        "adjustments.html",
        status,
        tenants=tenants,
        tenant_id=tenant_id,
        wallet=wallet,
        reservations=reservations,
        shown=shown,
        statuses=RESERVATION_STATUSES,
        refund=forms.get("refund") or FormState(),
        adjustment=forms.get("adjustment") or FormState(),
        reconcile=forms.get("reconcile") or FormState(),
        fresh_id=f"console-{secrets.token_hex(8)}",
        **extra,
    )


async def adjustments(console: Console, request: Request) -> Response:
    found = await visit(console, request, "billing:write")
    handed = found.take_flash() or {}
    tenant_id = request.query_params.get("tenant_id") or None
    return await _adjustments(found, tenant_id, {}, notice=handed.get("notice"))


async def _money_post(console: Console, request: Request, kind: str) -> Response:
    """A refund or an adjustment, each with the id the form was rendered with (a form sent
    twice applies once)."""
    found, fields = await form_visit(console, request, "billing:write")
    tenant_id = request.path_params["tenant_id"]
    body: dict[str, Any] = {
        "amount_usd": text(fields, "amount_usd"),
        "reason": text(fields, "reason"),
        f"{kind}_id": text(fields, f"{kind}_id"),
    }
    if kind == "refund":
        for name in ("request_id", "order_id"):
            if text(fields, name):
                body[name] = text(fields, name)
    path = "refunds" if kind == "refund" else "adjustments"
    answer = await found.admin.call("POST", f"/billing/{tenant_id}/{path}", body=body)
    if not answer.ok:
        forms = {kind: FormState.failed(fields, answer, _USD)}
        return await _adjustments(found, tenant_id, forms, answer.status)
    said = "Refund" if kind == "refund" else "Adjustment"
    notice = (
        f"{said} of ${answer.body['amount_usd']} applied: the balance is "
        f"${answer.body['balance_usd']}."
        if answer.body.get("applied", True)
        else f"This {kind} was applied before (same id): nothing changed."
    )
    return see_other(f"/billing/adjustments?tenant_id={tenant_id}", found, {"notice": notice})


async def refund(console: Console, request: Request) -> Response:
    return await _money_post(console, request, "refund")


async def adjustment(console: Console, request: Request) -> Response:
    return await _money_post(console, request, "adjustment")


async def reconcile(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "billing:write")
    tenant_id, request_id = request.path_params["tenant_id"], request.path_params["request_id"]
    answer = await found.admin.call(
        "POST",
        f"/billing/{tenant_id}/reservations/{request_id}/reconcile",
        body={"cost_usd": text(fields, "cost_usd")},
    )
    if not answer.ok:
        form = FormState(message=f"{request_id}: {answer.message}")
        return await _adjustments(found, tenant_id, {"reconcile": form}, answer.status)
    notice = f"The reservation of request {request_id[:12]}… is settled."
    return see_other(f"/billing/adjustments?tenant_id={tenant_id}", found, {"notice": notice})


def _month_start(now: datetime) -> datetime:
    return now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


async def _spent(found: Visit, group_by: str, since: datetime) -> dict[str, dict[str, Any]]:
    """Month-to-date figures per project or key id."""
    answer = await found.admin.get(
        "/usage/timeseries",
        {"since": periods.iso(since), "bucket": "day", "group_by": group_by},
    )
    sums: dict[str, dict[str, Any]] = {}
    for point in answer.data:
        key = str(point.get("group_id") or point.get("group") or "")
        row = sums.setdefault(key, {"cost_micros": 0, "requests": 0, "name": point.get("group")})
        row["cost_micros"] += point["cost_micros"]
        row["requests"] += point["requests"]
    return sums


async def month_spend(found: Visit, item: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """This month's spend of one project or key against its budget (for its own page), or
    None when the role reads no usage."""
    if not found.can("usage:read"):
        return None
    since = _month_start(datetime.now(UTC))
    answer = await found.admin.get(
        "/usage/summary", {kind: item["id"], "since": periods.iso(since)}
    )
    if not answer.ok:
        return None
    spent = {
        item["id"]: {"cost_micros": answer.body["cost_micros"], "requests": answer.body["requests"]}
    }
    return _rows([item], spent)[0] | {"since": since}


def _rows(items: list[dict[str, Any]], spent: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for item in items:
        used = spent.get(item["id"], {})
        cost = used.get("cost_micros", 0) / 1_000_000
        budget = item.get("monthly_budget_usd")
        share = cost / float(budget) * 100 if budget else None
        rows.append(
            {
                **item,
                "spent_usd": cost,
                "requests": used.get("requests", 0),
                "budget_usd": float(budget) if budget is not None else None,
                "share": share,
                "bar": min(share, 100.0) if share is not None else None,
            }
        )
    rows.sort(key=lambda r: (-(r["share"] or -1), -r["spent_usd"], r["name"]))
    return rows


async def spend(console: Console, request: Request) -> Response:
    found = await visit(console, request, "usage:read")
    since = _month_start(datetime.now(UTC))
    projects: list[dict[str, Any]] = []
    keys: list[dict[str, Any]] = []
    if found.can("projects:read"):
        projects = (await found.admin.get("/projects", {"limit": 500})).data
    if found.can("keys:read"):
        keys = (await found.admin.get("/keys", {"limit": 500})).data
    names = {p["id"]: p["name"] for p in projects}
    for key in keys:
        key["project_name"] = names.get(key["project_id"], "")
    return found.render(
        "spend.html",
        since=since,
        projects=_rows(projects, await _spent(found, "project", since)),
        keys=_rows(keys, await _spent(found, "key", since)),
    )


def routes(console: Console) -> list[Route]:
    tenant = "/billing/{tenant_id}"
    return [
        page(console, "/billing/adjustments", adjustments),
        page(console, tenant + "/refunds", refund, ["POST"]),
        page(console, tenant + "/adjustments", adjustment, ["POST"]),
        page(console, tenant + "/reservations/{request_id}/reconcile", reconcile, ["POST"]),
        page(console, "/spend", spend),
    ]
