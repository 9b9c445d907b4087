"""Operations pages: webhooks (a project's signing secret, shown on request and rotated, and
its deliveries with their attempts), the mail outbox (what was mailed and whether it went),
and sign-up and tenant preferences (how self-service sign-up is set; each tenant's default
and fallback models and low-balance alert)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmrelay.console.forms import FormState, text
from llmrelay.console.web import Console, Visit, form_visit, page, see_other, visit

DELIVERY_STATUSES = ("pending", "delivered", "failed")
MAIL_STATUSES = ("pending", "sent", "failed")


async def _projects(found: Visit) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = (await found.read("/projects", {"limit": 500}))["data"]
    return rows


async def webhooks(console: Console, request: Request) -> Response:
    found = await visit(console, request, "projects:read")
    projects = await _projects(found)
    chosen = request.query_params.get("project") or (projects[0]["id"] if projects else "")
    status = request.query_params.get("status", "")
    cursor = request.query_params.get("cursor")
    deliveries: list[Any] = []
    next_cursor = None
    error = None
    if chosen:
        answer = await found.admin.get(
            "/webhooks/deliveries",
            {"project": chosen, "status": status or None, "cursor": cursor, "limit": 25},
        )
        if answer.ok:
            deliveries, next_cursor = answer.body["data"], answer.body["next_cursor"]
        else:
            error = answer.message
    handed = found.take_flash() or {}
    return found.render(
        "webhooks.html",
        projects=projects,
        chosen=chosen,
        shown_status=status,
        statuses=DELIVERY_STATUSES,
        deliveries=deliveries,
        next_cursor=next_cursor,
        error=error,
        secret=handed.get("secret") if handed.get("project") == chosen else None,
        notice=handed.get("notice"),
    )


async def reveal(console: Console, request: Request) -> Response:
    """The project's signing secret, shown once on the page the redirect leads to."""
    found, _ = await form_visit(console, request, "projects:write")
    project_id = request.path_params["project_id"]
    rotate = request.url.path.endswith("/rotate")
    path = f"/projects/{project_id}/webhook-secret" + ("/rotate" if rotate else "")
    answer = await found.admin.call("POST" if rotate else "GET", path)
    if not answer.ok:
        raise found.refused(answer)
    handed = {"project": project_id, "secret": answer.body["secret"]}
    if rotate:
        handed["notice"] = "A new secret signs every event from now on; update your receivers."
    return see_other(f"/webhooks?project={project_id}", found, handed)


async def mail(console: Console, request: Request) -> Response:
    found = await visit(console, request, "users:read")
    params = {
        n: request.query_params.get(n, "").strip() for n in ("status", "kind", "to", "cursor")
    }
    answer = await found.admin.get("/mail/outbox", {**params, "limit": 50})
    return found.render(
        "mail.html",
        answer.status if not answer.ok else 200,
        mails=answer.body["data"] if answer.ok else [],
        smtp=answer.body.get("smtp_configured") if answer.ok else None,
        next_cursor=answer.body.get("next_cursor") if answer.ok else None,
        error=None if answer.ok else answer.message,
        params=params,
        statuses=MAIL_STATUSES,
    )


async def _tenants(found: Visit) -> list[dict[str, Any]]:
    if found.can("tenants:read"):
        rows = (await found.admin.get("/tenants", {"limit": 500})).data
        if rows:
            return rows
    return [
        {"id": m["tenant_id"], "name": m.get("tenant_name") or "a tenant"}
        for m in found.me.get("memberships") or ()
    ]


async def _settings_page(
    found: Visit, forms: dict[str, FormState] | None = None, status: int = 200, **extra: Any
) -> Response:
    signup = await found.admin.get("/settings/signup")
    tenants = await _tenants(found)
    models: list[str] = []
    if found.can("models:read"):
        models = sorted(
            m["name"]
            for m in (await found.admin.get("/models", {"limit": 500})).data
            if not m["embedding"]
        )
    forms = forms or {}
    preferences = []
    for tenant in tenants:
        answer = await found.admin.get(f"/tenants/{tenant['id']}/preferences")
        if not answer.ok:
            continue
        form = forms.get(tenant["id"]) or FormState(
            values={
                "default_model": answer.body.get("default_model") or "",
                "fallback_model": answer.body.get("fallback_model") or "",
                "low_balance_usd": ""
                if answer.body.get("low_balance_usd") is None
                else f"{answer.body['low_balance_usd']:g}",
            }
        )
        preferences.append({"tenant": tenant, "prefs": answer.body, "form": form})
    return found.render(
        "settings.html",
        status,
        signup=signup.body if signup.ok else None,
        preferences=preferences,
        models=models,
        **extra,
    )


async def settings(console: Console, request: Request) -> Response:
    found = await visit(console, request, "tenants:read")
    handed = found.take_flash() or {}
    return await _settings_page(found, notice=handed.get("notice"))


async def preferences(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "tenants:write")
    tenant_id = request.path_params["tenant_id"]
    body = {
        "default_model": text(fields, "default_model"),
        "fallback_model": text(fields, "fallback_model"),
        "low_balance_usd": text(fields, "low_balance_usd"),
    }
    answer = await found.admin.call(
        "PUT", f"/tenants/{tenant_id}/preferences", body=body, if_match=fields.get("version")
    )
    if not answer.ok:
        forms = {tenant_id: FormState.failed(fields, answer)}
        return await _settings_page(found, forms, answer.status)
    return see_other("/settings", found, {"notice": "Preferences saved."})


def routes(console: Console) -> list[Route]:
    secret = "/webhooks/{project_id}/secret"
    return [
        page(console, "/webhooks", webhooks),
        page(console, secret, reveal, ["POST"]),
        page(console, secret + "/rotate", reveal, ["POST"]),
        page(console, "/mail", mail),
        page(console, "/settings", settings),
        page(console, "/settings/{tenant_id}/preferences", preferences, ["POST"]),
    ]
