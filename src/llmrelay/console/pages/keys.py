"""API keys: the list, create (the secret shown this once: it is not stored), change
(limits, budget, allowlists, scopes, expiry, payload capture), rotate (a new secret, shown once),
revoke, delete."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmrelay.console.forms import FormState, Kind, body_of, text, words
from llmrelay.console.listing import Column, field, listing
from llmrelay.console.pages.money import month_spend
from llmrelay.console.web import Console, Visit, form_visit, page, see_other, visit

FIELDS: dict[str, Kind] = {
    "models": "list",
    "limits.rpm": "text",
    "limits.tpm": "text",
    "limits.concurrency": "text",
    "monthly_budget_usd": "text",
    "ip_allowlist": "list",
    "scopes": "list",
    "expires_at": "text",
    "capture": "text",
    "routing_policy": "text",
}


KEY_COLUMNS = (
    Column("name", "Name", field("name")),
    Column("project", "Project", field("project_name")),
    Column("status", "Status", field("status")),
    Column("capture", "Capture", field("capture")),
    Column("last_used", "Last used", field("last_used_at")),
    Column("created", "Created", field("created_at")),
)


def _body(fields: dict[str, str], *, create: bool, guardrails: bool = False) -> dict[str, Any]:
    """`guardrails`: the user may bind guardrail policies (guardrails:write)."""
    body = body_of(fields, FIELDS, clear_empty=not create)
    if guardrails and "guardrails" in fields:
        chosen = words(fields["guardrails"])
        if chosen or not create:
            body["guardrails"] = chosen
    if not create and body.get("ip_allowlist") is None:
        body["ip_allowlist"] = []  # the field's "none" is an empty list, not null
    body["disabled"] = fields.get("disabled") == "on"
    return body


async def _projects(found: Visit) -> list[dict[str, Any]]:
    if not found.can("projects:read"):
        return []
    return (await found.admin.get("/projects", {"limit": 500})).data


async def _list(found: Visit, form: FormState, status: int = 200, **extra: Any) -> Response:
    query = {
        "limit": 500,
        "project_id": found.request.query_params.get("project_id"),
        "status": found.request.query_params.get("status"),
    }
    rows = (await found.read("/keys", query))["data"]
    projects = await _projects(found)
    names = {p["id"]: p["name"] for p in projects}
    for row in rows:
        row["project_name"] = names.get(row["project_id"], "")
    shown = listing(
        rows,
        found.request.query_params,
        KEY_COLUMNS,
        ("name", "project_name", "prefix", "last_four", "status", "capture"),
        "name",
        keep=("project_id", "status"),
    )
    return found.render(
        "keys.html",
        status,
        keys=shown.rows,
        listing=shown,
        projects=projects,
        project_names=names,
        form=form,
        filters=query,
        **extra,
    )


async def keys(console: Console, request: Request) -> Response:
    found = await visit(console, request, "keys:read")
    return await _list(found, FormState(values={"capture": ""}))


async def create(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "keys:write")
    project_id = text(fields, "project_id") or ""
    body = _body(fields, create=True, guardrails=found.can("guardrails:write"))
    body["name"] = text(fields, "name")
    answer = await found.admin.call("POST", f"/projects/{project_id}/keys", body=body)
    if not answer.ok:
        names = {"project_id": "project_id"} if answer.status == 404 else None
        form = FormState.failed(fields, answer, names)
        if answer.status == 404:
            form.errors["project_id"] = "choose a project you may add keys to"
        return await _list(found, form, answer.status)
    return _secret_once(found, answer.body, "created")


def _secret_once(found: Visit, key: dict[str, Any], action: str) -> Response:
    """To the page that shows the new secret this once (a redirect: a reload posts nothing)."""
    handed = {"key": {n: key.get(n) for n in ("id", "name", "key")}, "action": action}
    return see_other(f"/keys/{key['id']}/secret", found, handed)


async def secret(console: Console, request: Request) -> Response:
    """The secret a create or rotate made, shown once; afterwards the key's page."""
    found = await visit(console, request, "keys:read")
    handed = found.take_flash()
    if not handed or not isinstance(handed.get("key"), dict):
        return see_other(f"/keys/{request.path_params['key_id']}", found)
    return found.render("key_secret.html", key=handed["key"], action=handed.get("action", ""))


async def _detail(found: Visit, key_id: str, form: FormState, status: int = 200) -> Response:
    key = await found.read(f"/keys/{key_id}")
    projects = await _projects(found)
    project = next((p for p in projects if p["id"] == key["project_id"]), None)
    values = form.values or {
        "models": " ".join(key["models"] or []),
        "limits.rpm": key["limits"]["rpm"] or "",
        "limits.tpm": key["limits"]["tpm"] or "",
        "limits.concurrency": key["limits"]["concurrency"] or "",
        "monthly_budget_usd": key["monthly_budget_usd"] or "",
        "ip_allowlist": " ".join(key["ip_allowlist"]),
        "scopes": " ".join(key.get("scopes") or []),
        "expires_at": (key["expires_at"] or "")[:16],
        "capture": key["capture"],
        "routing_policy": key["routing_policy"] or "",
        "guardrails": ", ".join(key.get("guardrails") or []),
        "disabled": "on" if key["status"] == "disabled" else "",
    }
    form.values = {k: str(v) for k, v in values.items()}
    spend = await month_spend(found, key, "key")
    return found.render("key.html", status, key=key, project=project, form=form, spend=spend)


async def key(console: Console, request: Request) -> Response:
    found = await visit(console, request, "keys:read")
    return await _detail(found, request.path_params["key_id"], FormState())


async def change(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "keys:write")
    key_id = request.path_params["key_id"]
    answer = await found.admin.call(
        "PATCH",
        f"/keys/{key_id}",
        body=_body(fields, create=False, guardrails=found.can("guardrails:write")),
        if_match=fields.get("version"),
    )
    if not answer.ok:
        return await _detail(found, key_id, FormState.failed(fields, answer), answer.status)
    return see_other(f"/keys/{key_id}", found)


async def rotate(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "keys:write")
    key_id = request.path_params["key_id"]
    grace = text(fields, "grace_s")
    body = {"grace_s": grace} if grace else None
    answer = await found.admin.call("POST", f"/keys/{key_id}/rotate", body=body)
    if not answer.ok:
        return await _detail(found, key_id, FormState(message=answer.message), answer.status)
    return _secret_once(found, answer.body, "rotated")


async def revoke(console: Console, request: Request) -> Response:
    found, _ = await form_visit(console, request, "keys:write")
    key_id = request.path_params["key_id"]
    answer = await found.admin.call("POST", f"/keys/{key_id}/revoke")
    if not answer.ok:
        return await _detail(found, key_id, FormState(message=answer.message), answer.status)
    return see_other(f"/keys/{key_id}", found)


async def delete(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "keys:write")
    key_id = request.path_params["key_id"]
    answer = await found.admin.call("DELETE", f"/keys/{key_id}", if_match=fields.get("version"))
    if not answer.ok:
        return await _detail(found, key_id, FormState(message=answer.message), answer.status)
    return see_other("/keys", found)


def routes(console: Console) -> list[Route]:
    item = "/keys/{key_id}"
    return [
        page(console, "/keys", keys),
        page(console, "/keys", create, ["POST"]),
        page(console, item, key),
        page(console, item + "/secret", secret),
        page(console, item, change, ["POST"]),
        page(console, item + "/rotate", rotate, ["POST"]),
        page(console, item + "/revoke", revoke, ["POST"]),
        page(console, item + "/delete", delete, ["POST"]),
    ]
