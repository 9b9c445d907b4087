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
from llmrelay.console.forms import FormState, text
from llmrelay.console.listing import Column, field, listing
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


USER_COLUMNS = (
    Column("email", "User", field("email")),
    Column("two_factor", "Two-factor", field("totp_enabled")),
)


async def _page(found: Visit, form: FormState, status: int = 200, **extra: Any) -> Response:
    everyone = (await found.read("/users", {"limit": 500}))["data"]
    for row in everyone:
        row["roles"] = [m["role"] for m in row.get("memberships") or ()]
    shown = listing(
        everyone, found.request.query_params, USER_COLUMNS, ("email", "name", "roles"), "email"
    )
    rows = shown.rows
    projects: list[dict[str, Any]] = []
    if found.can("projects:read"):
        projects = (await found.admin.get("/projects", {"limit": 500})).data
    return found.render(
        "users.html",
        status,
        users=rows,
        form=form,
        roles=ROLES,
        tenants=await tenant_choices(found, "users:write"),
        tenant_names=await _tenant_names(found),
        projects=projects,
        project_names={p["id"]: p["name"] for p in projects},
        listing=shown,
        invitations=await _invitations(found),
        **extra,
    )


async def users(console: Console, request: Request) -> Response:
    found = await visit(console, request, "users:read")
    handed = found.take_flash() or {}
    return await _page(
        found,
        FormState(values={"role": "developer", "how": handed.get("how", "email")}),
        notice=handed.get("notice"),
        warning=handed.get("warning"),
        invited=handed.get("invited"),
    )


def _mailed(email: str, body: dict[str, Any]) -> dict[str, str]:
    """What the page says about an invitation by mail, the truth about the mail included."""
    if not body.get("pending"):
        said = f"{email} already had an account: added to the tenant"
    else:
        expires = str(body.get("expires_at") or "")[:16].replace("T", " ")
        said = f"{email} is invited (the link works until {expires} UTC)"
    if body.get("mail") == "no_smtp":
        return {
            "warning": f"{said}, but no mail server is configured (LLMRELAY_SMTP_URL): the "
            "mail waits in the outbox and goes out once one is. To let them in now, invite "
            "them with a temporary password instead.",
            "how": "password",
        }
    if not body.get("pending"):
        return {"notice": f"{said}, and told by mail."}
    return {"notice": f"{said}: the invitation is on its way to {email}."}


async def invite(console: Console, request: Request) -> Response:
    """By mail (POST /invitations: the invitee chooses a password from the link; an existing
    account joins at once and is told), or with a temporary password shown once (an
    existing account then becomes a member)."""
    found, fields = await form_visit(console, request, "users:write")
    tenant_id = text(fields, "tenant_id")
    if tenant_id is None:
        tenant_id = await only_tenant(found, "users:write")
    projects = project_ids(fields)
    person: dict[str, Any] = {
        "email": text(fields, "email") or "",
        "name": text(fields, "name"),
        "tenant_id": tenant_id,
        "role": text(fields, "role"),
        "project_ids": projects,
    }
    if fields.get("how", "email") == "email":
        answer = await found.admin.call("POST", "/invitations", body=person)
        if answer.ok:
            return see_other("/users", found, _mailed(person["email"], answer.body))
        return await _page(found, FormState.failed(fields, answer), answer.status)
    password = secrets.token_urlsafe(15)  # 20 characters, 120 bits
    answer = await found.admin.call("POST", "/users", body=person | {"password": password})
    if answer.status == 409 and tenant_id is not None:
        member = {"email": person["email"], "role": person["role"], "project_ids": projects}
        added = await found.admin.call("POST", f"/tenants/{tenant_id}/members", body=member)
        if added.ok:
            notice = f"{person['email']} already had an account: added as a member."
            return see_other("/users", found, {"notice": notice})
        answer = added
    if not answer.ok:
        return await _page(found, FormState.failed(fields, answer), answer.status)
    invited = {"email": person["email"], "password": password}
    return see_other("/users", found, {"invited": invited, "how": "password"})


async def change_member(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "users:write")
    tenant_id, user_id = request.path_params["tenant_id"], request.path_params["user_id"]
    body: dict[str, Any] = {"role": text(fields, "role")}
    projects = project_ids(fields)
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


async def _invitations(found: Visit) -> list[dict[str, Any]]:
    answer = await found.admin.get("/invitations")
    return answer.data


async def resend_invitation(console: Console, request: Request) -> Response:
    found, _ = await form_visit(console, request, "users:write")
    user_id = request.path_params["user_id"]
    answer = await found.admin.call("POST", f"/invitations/{user_id}/resend")
    if not answer.ok:
        return await _page(found, FormState(message=answer.message), answer.status)
    handed = _mailed(answer.body["email"], answer.body)
    if "notice" in handed:
        handed["notice"] = f"A new link is on its way to {answer.body['email']}."
    return see_other("/users", found, handed)


async def revoke_invitation(console: Console, request: Request) -> Response:
    found, _ = await form_visit(console, request, "users:write")
    user_id = request.path_params["user_id"]
    answer = await found.admin.call("DELETE", f"/invitations/{user_id}")
    if not answer.ok:
        return await _page(found, FormState(message=answer.message), answer.status)
    return see_other(
        "/users", found, {"notice": "The invitation is revoked: its link no longer works."}
    )


def project_ids(fields: dict[str, str]) -> list[str] | None:
    """The projects a membership is limited to: the form's checked project boxes
    (`project:<id>`), or None (every project)."""
    found = [
        name.partition(":")[2] for name, value in fields.items() if name.startswith("project:")
    ]
    return [p for p in found if p] or None


def routes(console: Console) -> list[Route]:
    member = "/tenants/{tenant_id}/members/{user_id}"
    return [
        page(console, "/users", users),
        page(console, "/users", invite, ["POST"]),
        page(console, "/users/{user_id}", change_user, ["POST"]),
        page(console, member, change_member, ["POST"]),
        page(console, member + "/delete", remove_member, ["POST"]),
        page(console, "/invitations/{user_id}/resend", resend_invitation, ["POST"]),
        page(console, "/invitations/{user_id}/revoke", revoke_invitation, ["POST"]),
    ]
