"""Users and roles: the accounts of the user's tenants with their memberships; invite (an
account with a one-time temporary password, shown once, and a membership); change a role;
remove from a tenant; disable or enable an account.

An invitation goes by mail (the invitee chooses a password from its link, on the console's
/accept-invitation page), or, where no mail can reach the user, as a temporary password shown
once here."""

from __future__ import annotations

import secrets
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmrelay.admin.access import Role
from llmrelay.console.forms import FormState, text, words
from llmrelay.console.web import (
    Console,
    Visit,
    form_visit,
    only_tenant,
    page,
    see_other,
    tenant_choices,
    visit,
)

#: Roles a membership can hold (platform admin is an account flag).
ROLES = tuple(r.value for r in Role if r is not Role.PLATFORM_ADMIN)


async def _tenant_names(found: Visit) -> dict[str, str]:
    if not found.can("tenants:read"):
        return {}
    return {t["id"]: t["name"] for t in (await found.admin.get("/tenants", {"limit": 500})).data}


async def _page(found: Visit, form: FormState, status: int = 200, **extra: Any) -> Response:
    rows = (await found.read("/users", {"limit": 500}))["data"]
    return found.render(
        "users.html",
        status,
        users=rows,
        form=form,
        roles=ROLES,
        tenants=await tenant_choices(found, "users:write"),
        tenant_names=await _tenant_names(found),
        **extra,
    )


async def users(console: Console, request: Request) -> Response:
    found = await visit(console, request, "users:read")
    return await _page(found, FormState(values={"role": "developer", "how": "email"}))


async def invite(console: Console, request: Request) -> Response:
    """By mail (POST /invitations: the invitee chooses a password from the link; an existing
    account joins at once and is told), or with a temporary password shown once here (an
    existing account then becomes a member)."""
    found, fields = await form_visit(console, request, "users:write")
    tenant_id = text(fields, "tenant_id")
    if tenant_id is None:
        tenant_id = await only_tenant(found, "users:write")
    projects = words(fields.get("project_ids")) or None
    person: dict[str, Any] = {
        "email": text(fields, "email") or "",
        "name": text(fields, "name"),
        "tenant_id": tenant_id,
        "role": text(fields, "role"),
        "project_ids": projects,
    }
    fresh = FormState(values={"role": "developer", "how": fields.get("how", "email")})
    if fields.get("how", "email") == "email":
        answer = await found.admin.call("POST", "/invitations", body=person)
        if answer.ok:
            expires = str(answer.body.get("expires_at") or "")[:16].replace("T", " ")
            notice = (
                f"An invitation is on its way to {person['email']} (its link works until "
                f"{expires} UTC)."
                if answer.body.get("pending")
                else f"{person['email']} already had an account: added, and told by mail."
            )
            return await _page(found, fresh, notice=notice)
        return await _page(found, FormState.failed(fields, answer), answer.status)
    password = secrets.token_urlsafe(15)  # 20 characters, 120 bits
    answer = await found.admin.call("POST", "/users", body=person | {"password": password})
    if answer.status == 409 and tenant_id is not None:
        member = {"email": person["email"], "role": person["role"], "project_ids": projects}
        added = await found.admin.call("POST", f"/tenants/{tenant_id}/members", body=member)
        if added.ok:
            notice = f"{person['email']} already had an account: added as a member."
            return await _page(found, fresh, notice=notice)
        answer = added
    if not answer.ok:
        return await _page(found, FormState.failed(fields, answer), answer.status)
    return await _page(found, fresh, invited={"email": person["email"], "password": password})


async def change_member(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "users:write")
    tenant_id, user_id = request.path_params["tenant_id"], request.path_params["user_id"]
    body: dict[str, Any] = {"role": text(fields, "role")}
    projects = words(fields.get("project_ids"))
    if projects:
        body["project_ids"] = projects
    else:
        body["all_projects"] = True
    answer = await found.admin.call(
        "PATCH",
        f"/tenants/{tenant_id}/members/{user_id}",
        body=body,
        if_match=fields.get("version"),
    )
    if not answer.ok:
        return await _page(found, FormState(message=answer.message), answer.status)
    return see_other("/users", found)


async def remove_member(console: Console, request: Request) -> Response:
    found, _ = await form_visit(console, request, "users:write")
    tenant_id, user_id = request.path_params["tenant_id"], request.path_params["user_id"]
    answer = await found.admin.call("DELETE", f"/tenants/{tenant_id}/members/{user_id}")
    if not answer.ok:
        return await _page(found, FormState(message=answer.message), answer.status)
    return see_other("/users", found)


async def change_user(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "users:write")
    user_id = request.path_params["user_id"]
    body = {"disabled": fields.get("disabled") == "on"}
    answer = await found.admin.call(
        "PATCH", f"/users/{user_id}", body=body, if_match=fields.get("version")
    )
    if not answer.ok:
        return await _page(found, FormState(message=answer.message), answer.status)
    return see_other("/users", found)


def routes(console: Console) -> list[Route]:
    member = "/tenants/{tenant_id}/members/{user_id}"
    return [
        page(console, "/users", users),
        page(console, "/users", invite, ["POST"]),
        page(console, "/users/{user_id}", change_user, ["POST"]),
        page(console, member, change_member, ["POST"]),
        page(console, member + "/delete", remove_member, ["POST"]),
    ]
