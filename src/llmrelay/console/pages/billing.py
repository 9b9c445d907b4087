"""Billing (prepaid wallets): a tenant's balance, its ledger and top-up orders, a top-up
through Stripe Checkout, and the prepaid and auto top-up settings. Low-balance mails link
here. Refunds, adjustments and reconciling a reservation: pages/money.py."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmrelay.console.forms import FormState, text
from llmrelay.console.web import Console, Visit, form_visit, page, see_other, visit

#: The admin API's names of the amounts the forms send in USD.
_USD_FIELDS = {
    "auto_topup_threshold_micros": "auto_topup_threshold_usd",
    "auto_topup_amount_micros": "auto_topup_amount_usd",
    "amount_micros": "amount_usd",
}


async def billing_tenants(found: Visit) -> list[dict[str, Any]]:
    """The tenants whose billing the user may read: (id, name), in a stable order."""
    if found.platform_admin or found.can("tenants:read"):
        rows = (await found.admin.get("/tenants", {"limit": 500})).data
        allowed = set(found.tenants_for("billing:read"))
        return [t for t in rows if found.platform_admin or t["id"] in allowed]
    return [{"id": t, "name": found.tenant_name(t)} for t in found.tenants_for("billing:read")]


async def _show(
    found: Visit, tenant_id: str | None, form: FormState, status: int = 200, **extra: Any
) -> Response:
    tenants = await billing_tenants(found)
    if tenant_id is None:
        tenant_id = tenants[0]["id"] if tenants else None
    if tenant_id is None:
        return found.render("billing.html", status, tenants=[], tenant_id=None, form=form)
    base = f"/billing/{tenant_id}"
    wallet = await found.admin.get(f"{base}/wallet")
    if not wallet.ok:
        raise found.refused(wallet)
    cursor = found.request.query_params.get("cursor")
    ledger = await found.read(f"{base}/ledger", {"limit": 25, "cursor": cursor})
    orders = await found.read(f"{base}/orders", {"limit": 10})
    return found.render(
        "billing.html",
        status,
        tenants=tenants,
        tenant_id=tenant_id,
        wallet=wallet.body,
        etag=wallet.header("etag") or "",
        ledger=ledger["data"],
        next_cursor=ledger["next_cursor"],
        orders=orders["data"],
        form=form,
        **extra,
    )


async def billing(console: Console, request: Request) -> Response:
    found = await visit(console, request, "billing:read")
    handed = found.take_flash() or {}
    return await _show(
        found,
        request.query_params.get("tenant_id") or None,
        FormState(),
        order=handed.get("order"),
        notice=handed.get("notice"),
    )


async def settings(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "billing:write")
    tenant_id = request.path_params["tenant_id"]
    body: dict[str, Any] = {
        "prepaid": fields.get("prepaid") == "on",
        "auto_topup_enabled": fields.get("auto_topup_enabled") == "on",
    }
    for name in ("auto_topup_threshold_usd", "auto_topup_amount_usd"):
        if text(fields, name):
            body[name] = text(fields, name)
    answer = await found.admin.call(
        "PATCH", f"/billing/{tenant_id}/wallet", body=body, if_match=fields.get("etag")
    )
    if not answer.ok:
        form = FormState.failed(fields, answer, _USD_FIELDS)
        form.values.setdefault("prepaid", "")  # unchecked boxes are not sent: keep them off
        form.values.setdefault("auto_topup_enabled", "")
        return await _show(found, tenant_id, form, answer.status)
    return see_other(f"/billing?tenant_id={tenant_id}", found)


async def top_up(console: Console, request: Request) -> Response:
    """An order on Stripe Checkout, then a link to pay it (a link, not a redirect: the
    console's forms may only lead to this site)."""
    found, fields = await form_visit(console, request, "billing:write")
    tenant_id = request.path_params["tenant_id"]
    answer = await found.admin.call(
        "POST", f"/billing/{tenant_id}/checkout", body={"amount_usd": text(fields, "amount_usd")}
    )
    if not answer.ok:
        return await _show(
            found, tenant_id, FormState.failed(fields, answer, _USD_FIELDS), answer.status
        )
    order = {n: answer.body.get(n) for n in ("id", "amount_usd", "checkout_url")}
    return see_other(f"/billing?tenant_id={tenant_id}", found, {"order": order})


def routes(console: Console) -> list[Route]:
    return [
        page(console, "/billing", billing),
        page(console, "/billing/{tenant_id}/wallet", settings, ["POST"]),
        page(console, "/billing/{tenant_id}/checkout", top_up, ["POST"]),
    ]
