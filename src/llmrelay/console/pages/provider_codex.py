"""An openai_codex provider's ChatGPT accounts on its page (docs/codex.md), each one of its
resources: every account with its resource, plan, usage limits and token; the device code
sign-in (start: the code and the URL are shown, optionally onto a named resource; finish: one
poll, signed in once the user approved), refreshing the limits now, and signing out one
account or all. Through the admin API, as every page."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmrelay.config.schema import Slug
from llmrelay.console.forms import FormState
from llmrelay.console.web import Console, Visit, form_visit, page, see_other

#: A resource's name, as the admin API checks it (checked here too, before the user is sent
#: to approve a code the poll would then refuse to file).
_RESOURCE_NAME: TypeAdapter[str] = TypeAdapter(Slug)


async def account(found: Visit, provider_id: str, *, refresh: bool) -> dict[str, Any] | None:
    """The accounts as GET /providers/{id}/codex shows them (every one in `accounts`); None
    when they cannot be read."""
    query = {"refresh": "true"} if refresh else None
    answer = await found.admin.get(f"/providers/{provider_id}/codex", query)
    if not answer.ok:
        return None
    body: dict[str, Any] = answer.body
    for shown in body.get("accounts") or []:
        _with_resets(shown.get("limits") or {})
    return body


def _with_resets(limits: dict[str, Any]) -> None:
    """Each window's reset (Unix seconds in the API) as the page says it: `resets`."""
    for window in ("primary", "secondary"):
        found = limits.get(window)
        if isinstance(found, dict) and isinstance(found.get("resets_at"), int | float):
            at = datetime.fromtimestamp(found["resets_at"], UTC)
            found["resets"] = at.strftime("%Y-%m-%d %H:%M UTC")


def _resource(fields: dict[str, str]) -> str | None:
    """The optional resource the sign-in goes to; None: blank."""
    return (fields.get("resource") or "").strip() or None


async def device_start(console: Console, request: Request) -> Response:
    from llmrelay.console.pages.providers import detail

    found, fields = await form_visit(console, request, "providers:write")
    provider_id = request.path_params["provider_id"]
    resource = _resource(fields)
    if resource is not None:
        try:
            _RESOURCE_NAME.validate_python(resource)
        except ValidationError:
            form = FormState(
                values={"resource": resource},
                errors={
                    "resource": "a resource name is lower-case letters, digits, '.', '_' "
                    "or '-' (at most 64), starting with a letter or digit"
                },
            )
            return await detail(found, provider_id, form, 400)
    answer = await found.admin.call("POST", f"/providers/{provider_id}/codex/device")
    if not answer.ok:
        return await detail(found, provider_id, FormState(message=answer.message), answer.status)
    return await detail(
        found, provider_id, FormState(), device={**answer.body, "resource": resource}
    )


async def device_finish(console: Console, request: Request) -> Response:
    from llmrelay.console.pages.providers import detail

    found, fields = await form_visit(console, request, "providers:write")
    provider_id = request.path_params["provider_id"]
    poll: dict[str, Any] = {
        "device_auth_id": fields.get("device_auth_id"),
        "user_code": fields.get("user_code"),
    }
    resource = _resource(fields)
    if resource is not None:
        poll["resource"] = resource
    answer = await found.admin.call(
        "POST", f"/providers/{provider_id}/codex/device/poll", body=poll
    )
    if answer.status == 202:
        device = {
            **poll,
            "resource": resource,
            "verification_url": fields.get("verification_url"),
            "pending": True,
        }
        return await detail(found, provider_id, FormState(), 200, device=device)
    if not answer.ok:
        return await detail(found, provider_id, FormState(message=answer.message), answer.status)
    signed = answer.body.get("account") or {}
    who = signed.get("email") or signed.get("account_id") or "the account"
    notice = f"Signed {who} in onto resource {signed.get('resource') or 'unknown'}."
    return see_other(f"/providers/{provider_id}", found, {"codex_notice": notice})


async def sign_out(console: Console, request: Request) -> Response:
    """Every account, or the one the form's `resource` names (a row's button)."""
    from llmrelay.console.pages.providers import detail

    found, fields = await form_visit(console, request, "providers:write")
    provider_id = request.path_params["provider_id"]
    resource = _resource(fields)
    query = {"resource": resource} if resource is not None else None
    answer = await found.admin.call("DELETE", f"/providers/{provider_id}/codex", query=query)
    if not answer.ok:
        return await detail(found, provider_id, FormState(message=answer.message), answer.status)
    notice = f"Signed {resource} out." if resource else "Signed every account out."
    return see_other(f"/providers/{provider_id}", found, {"codex_notice": notice})


def routes(console: Console) -> list[Route]:
    item = "/providers/{provider_id}/codex"
    return [
        page(console, item + "/device", device_start, ["POST"]),
        page(console, item + "/device/finish", device_finish, ["POST"]),
        page(console, item + "/sign-out", sign_out, ["POST"]),
    ]
