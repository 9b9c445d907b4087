"""Routing policies (allowlists of providers, tags and regions a route must pass, and a
strategy that replaces the model's, bound to projects and keys by name) and the gateway-wide
routing settings (circuit breakers and the global policy), over /policies and
/settings/routing."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmrelay.console.forms import FormState, Kind, body_of, text
from llmrelay.console.listing import Column, field, listing
from llmrelay.console.pages.models import STRATEGIES
from llmrelay.console.web import (
    Console,
    Visit,
    form_visit,
    page,
    see_other,
    tenant_choices,
    visit,
)

POLICY: dict[str, Kind] = {
    "providers": "list",
    "tags": "list",
    "regions": "list",
    "strategy": "text",
}
BREAKER: dict[str, Kind] = {
    "breaker.failures": "text",
    "breaker.cooldown_s": "text",
    "breaker.max_cooldown_s": "text",
}
COLUMNS = (
    Column("name", "Name", field("name")),
    Column("strategy", "Strategy", field("strategy")),
    Column("updated", "Changed", field("updated_at")),
)


async def _show(found: Visit, form: FormState, status: int = 200, **extra: Any) -> Response:
    rows = (await found.read("/policies", {"limit": 500}))["data"]
    shown = listing(
        rows, found.request.query_params, COLUMNS, ("name", "providers", "tags", "regions"), "name"
    )
    settings = await found.admin.get("/settings/routing")
    routing = settings.body if settings.ok else None
    settings_form = extra.pop("settings_form", None) or FormState()
    if routing is not None and not settings_form.values:
        breaker = routing.get("breaker") or {}
        settings_form.values = {
            "breaker.failures": str(breaker.get("failures", "")),
            "breaker.cooldown_s": str(breaker.get("cooldown_s", "")),
            "breaker.max_cooldown_s": str(breaker.get("max_cooldown_s", "")),
            "policy": str(routing.get("policy") or ""),
        }
    slugs: list[str] = []
    if found.can("providers:read"):
        slugs = sorted(
            {p["slug"] for p in (await found.admin.get("/providers", {"limit": 500})).data}
        )
    return found.render(
        "routing.html",
        status,
        policies=shown.rows,
        names=sorted(r["name"] for r in rows),
        listing=shown,
        form=form,
        settings=routing,
        settings_etag=settings.header("etag") or "",
        settings_form=settings_form,
        strategies=STRATEGIES,
        providers=slugs,
        tenants=await tenant_choices(found, "policies:write"),
        **extra,
    )


async def routing(console: Console, request: Request) -> Response:
    found = await visit(console, request, "policies:read")
    handed = found.take_flash() or {}
    return await _show(found, FormState(), notice=handed.get("notice"))


async def create(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "policies:write")
    body = body_of(fields, POLICY, clear_empty=False) | {"name": text(fields, "name")}
    query = {"tenant_id": text(fields, "tenant_id")}
    answer = await found.admin.call("POST", "/policies", query=query, body=body)
    if not answer.ok:
        return await _show(found, FormState.failed(fields, answer), answer.status)
    return see_other(f"/routing/{answer.body['id']}", found, {"notice": "Policy created."})


async def _detail(
    found: Visit, policy_id: str, form: FormState, status: int = 200, **extra: Any
) -> Response:
    policy = await found.read(f"/policies/{policy_id}")
    if not form.values:
        form.values = {
            "name": policy["name"],
            "providers": ", ".join(policy["providers"] or []),
            "tags": ", ".join(policy["tags"] or []),
            "regions": ", ".join(policy["regions"] or []),
            "strategy": policy["strategy"] or "",
        }
    bound: dict[str, list[dict[str, Any]]] = {"projects": [], "keys": []}
    if found.can("projects:read"):
        projects = (await found.admin.get("/projects", {"limit": 500})).data
        bound["projects"] = [p for p in projects if p.get("routing_policy") == policy["name"]]
    if found.can("keys:read"):
        keys = (await found.admin.get("/keys", {"limit": 500})).data
        bound["keys"] = [k for k in keys if k.get("routing_policy") == policy["name"]]
    return found.render(
        "routing_policy.html",
        status,
        policy=policy,
        form=form,
        strategies=STRATEGIES,
        bound=bound,
        **extra,
    )


async def policy(console: Console, request: Request) -> Response:
    found = await visit(console, request, "policies:read")
    handed = found.take_flash() or {}
    return await _detail(
        found, request.path_params["policy_id"], FormState(), notice=handed.get("notice")
    )


async def change(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "policies:write")
    policy_id = request.path_params["policy_id"]
    body = body_of(fields, POLICY, clear_empty=True) | {"name": text(fields, "name")}
    answer = await found.admin.call(
        "PATCH", f"/policies/{policy_id}", body=body, if_match=fields.get("version")
    )
    if not answer.ok:
        return await _detail(found, policy_id, FormState.failed(fields, answer), answer.status)
    return see_other(f"/routing/{policy_id}", found, {"notice": "Saved."})


async def delete(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "policies:write")
    policy_id = request.path_params["policy_id"]
    answer = await found.admin.call(
        "DELETE", f"/policies/{policy_id}", if_match=fields.get("version")
    )
    if not answer.ok:
        return await _detail(found, policy_id, FormState(message=answer.message), answer.status)
    return see_other("/routing", found, {"notice": "Policy deleted."})


async def settings(console: Console, request: Request) -> Response:
    """The gateway-wide routing settings, replaced whole with the ETag read."""
    found, fields = await form_visit(console, request, "policies:write")
    body = body_of(fields, BREAKER, clear_empty=False)
    if text(fields, "policy"):
        body["policy"] = text(fields, "policy")
    answer = await found.admin.call(
        "PUT", "/settings/routing", body=body, if_match=fields.get("etag") or None
    )
    if not answer.ok:
        failed = FormState.failed(fields, answer)
        return await _show(found, FormState(), answer.status, settings_form=failed)
    return see_other("/routing", found, {"notice": "Routing settings saved."})


def routes(console: Console) -> list[Route]:
    item = "/routing/{policy_id}"
    return [
        page(console, "/routing", routing),
        page(console, "/routing", create, ["POST"]),
        page(console, "/routing/settings", settings, ["POST"]),
        page(console, item, policy),
        page(console, item, change, ["POST"]),
        page(console, item + "/delete", delete, ["POST"]),
    ]
