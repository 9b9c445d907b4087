"""Projects (model allowlist, routing policy; limits and budget by the limits permission, so
a billing role can set budgets) and tenants (created by a platform admin only)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmrelay.console.forms import FormState, Kind, body_of, text, words
from llmrelay.console.listing import Column, field, listing
from llmrelay.console.pages.money import month_spend
from llmrelay.console.web import (
    Console,
    Visit,
    form_visit,
    page,
    see_other,
    tenant_choices,
    visit,
)

PROJECT: dict[str, Kind] = {"models": "list", "routing_policy": "text"}
LIMITS: dict[str, Kind] = {
    "limits.rpm": "text",
    "limits.tpm": "text",
    "limits.concurrency": "text",
    "monthly_budget_usd": "text",
}


PROJECT_COLUMNS = (
    Column("name", "Name", field("name")),
    Column("budget", "Monthly budget", field("monthly_budget_micros")),
    Column("policy", "Routing policy", field("routing_policy")),
    Column("created", "Created", field("created_at")),
)


async def _list(found: Visit, form: FormState, status: int = 200) -> Response:
    rows = (await found.read("/projects", {"limit": 500}))["data"]
    shown = listing(
        rows,
        found.request.query_params,
        PROJECT_COLUMNS,
        ("name", "models", "routing_policy"),
        "name",
    )
    return found.render(
        "projects.html",
        status,
        projects=shown.rows,
        listing=shown,
        form=form,
        tenants=await tenant_choices(found, "projects:write"),
    )


async def projects(console: Console, request: Request) -> Response:
    found = await visit(console, request, "projects:read")
    return await _list(found, FormState())


async def create(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "projects:write")
    body = body_of(fields, PROJECT | LIMITS, clear_empty=False) | {"name": text(fields, "name")}
    if not body.get("limits"):
        body.pop("limits", None)
    query = {"tenant_id": text(fields, "tenant_id")}
    answer = await found.admin.call("POST", "/projects", query=query, body=body)
    if not answer.ok:
        return await _list(found, FormState.failed(fields, answer), answer.status)
    return see_other(f"/projects/{answer.body['id']}", found)


async def _detail(found: Visit, project_id: str, form: FormState, status: int = 200) -> Response:
    project = await found.read(f"/projects/{project_id}")
    keys: list[Any] = []
    if found.can("keys:read"):
        keys = (await found.admin.get("/keys", {"project_id": project_id, "limit": 500})).data
    if not form.values:
        limits = project["limits"]
        form.values = {
            "models": " ".join(project["models"] or []),
            "routing_policy": project["routing_policy"] or "",
            "limits.rpm": str(limits["rpm"] or ""),
            "limits.tpm": str(limits["tpm"] or ""),
            "limits.concurrency": str(limits["concurrency"] or ""),
            "monthly_budget_usd": str(project["monthly_budget_usd"] or ""),
            "guardrails": ", ".join(project.get("guardrails") or []),
        }
    tenant_name = found.tenant_name(project["tenant_id"])
    if found.platform_admin and tenant_name == "another tenant":
        tenant = await found.admin.get(f"/tenants/{project['tenant_id']}")
        tenant_name = str(tenant.body.get("name")) if tenant.ok else tenant_name
    spend = await month_spend(found, project, "project")
    return found.render(
        "project.html",
        status,
        project=project,
        keys=keys,
        form=form,
        tenant_name=tenant_name,
        spend=spend,
    )


async def project(console: Console, request: Request) -> Response:
    found = await visit(console, request, "projects:read")
    return await _detail(found, request.path_params["project_id"], FormState())


async def change(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "projects:write")
    project_id = request.path_params["project_id"]
    body = body_of(fields, PROJECT, clear_empty=True)
    if "guardrails" in fields and found.can("guardrails:write"):  # needs its own permission
        body["guardrails"] = words(fields["guardrails"])
    answer = await found.admin.call(
        "PATCH", f"/projects/{project_id}", body=body, if_match=fields.get("version")
    )
    if not answer.ok:
        return await _detail(found, project_id, FormState.failed(fields, answer), answer.status)
    return see_other(f"/projects/{project_id}", found)


async def limits(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "limits:write")
    project_id = request.path_params["project_id"]
    answer = await found.admin.call(
        "PUT",
        f"/projects/{project_id}/limits",
        body=body_of(fields, LIMITS, clear_empty=False),
        if_match=fields.get("version"),
    )
    if not answer.ok:
        return await _detail(found, project_id, FormState.failed(fields, answer), answer.status)
    return see_other(f"/projects/{project_id}", found)


async def delete(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "projects:write")
    project_id = request.path_params["project_id"]
    answer = await found.admin.call(
        "DELETE", f"/projects/{project_id}", if_match=fields.get("version")
    )
    if not answer.ok:
        return await _detail(found, project_id, FormState(message=answer.message), answer.status)
    return see_other("/projects", found)


TENANT_COLUMNS = (
    Column("slug", "Slug", field("slug")),
    Column("name", "Name", field("name")),
    Column("created", "Created", field("created_at")),
)


async def _tenants(found: Visit, form: FormState, status: int = 200) -> Response:
    rows = (await found.read("/tenants", {"limit": 500}))["data"]
    shown = listing(rows, found.request.query_params, TENANT_COLUMNS, ("slug", "name"), "slug")
    return found.render("tenants.html", status, tenants=shown.rows, listing=shown, form=form)


async def tenants(console: Console, request: Request) -> Response:
    found = await visit(console, request, "tenants:read")
    return await _tenants(found, FormState())


async def create_tenant(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "tenants:write")
    body = {
        "slug": text(fields, "slug"),
        "name": text(fields, "name"),
        "require_2fa": fields.get("require_2fa") == "on",
    }
    answer = await found.admin.call("POST", "/tenants", body=body)
    if not answer.ok:
        return await _tenants(found, FormState.failed(fields, answer), answer.status)
    return see_other("/tenants", found)


async def change_tenant(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "tenants:write")
    tenant_id = request.path_params["tenant_id"]
    body = {"name": text(fields, "name"), "require_2fa": fields.get("require_2fa") == "on"}
    answer = await found.admin.call(
        "PATCH", f"/tenants/{tenant_id}", body=body, if_match=fields.get("version")
    )
    if not answer.ok:
        return await _tenants(found, FormState(message=answer.message), answer.status)
    return see_other("/tenants", found)


def routes(console: Console) -> list[Route]:
    item = "/projects/{project_id}"
    return [
        page(console, "/projects", projects),
        page(console, "/projects", create, ["POST"]),
        page(console, item, project),
        page(console, item, change, ["POST"]),
        page(console, item + "/limits", limits, ["POST"]),
        page(console, item + "/delete", delete, ["POST"]),
        page(console, "/tenants", tenants),
        page(console, "/tenants", create_tenant, ["POST"]),
        page(console, "/tenants/{tenant_id}", change_tenant, ["POST"]),
    ]
