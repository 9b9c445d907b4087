"""An openai_codex provider's ChatGPT account on its page (docs/codex.md): who is signed in and
the usage limits, the device code sign-in (start: the code and the URL are shown; finish: one
poll, signed in once the user approved), refreshing the limits now, and signing out. Through
the admin API, as every page."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmrelay.console.forms import FormState
from llmrelay.console.web import Console, Visit, form_visit, page, see_other


async def account(found: Visit, provider_id: str, *, refresh: bool) -> dict[str, Any] | None:
    """The account as GET /providers/{id}/codex shows it; None when it cannot be read."""
    query = {"refresh": "true"} if refresh else None
    answer = await found.admin.get(f"/providers/{provider_id}/codex", query)
    return answer.body if answer.ok else None


async def device_start(console: Console, request: Request) -> Response:
    from llmrelay.console.pages.providers import detail

    found, _ = await form_visit(console, request, "providers:write")
    provider_id = request.path_params["provider_id"]
    answer = await found.admin.call("POST", f"/providers/{provider_id}/codex/device")
    if not answer.ok:
        return await detail(found, provider_id, FormState(message=answer.message), answer.status)
    return await detail(found, provider_id, FormState(), device=answer.body)


async def device_finish(console: Console, request: Request) -> Response:
    from llmrelay.console.pages.providers import detail

    found, fields = await form_visit(console, request, "providers:write")
    provider_id = request.path_params["provider_id"]
    poll = {"device_auth_id": fields.get("device_auth_id"), "user_code": fields.get("user_code")}
    answer = await found.admin.call(
        "POST", f"/providers/{provider_id}/codex/device/poll", body=poll
    )
    if answer.status == 202:
        device = {**poll, "verification_url": fields.get("verification_url"), "pending": True}
        return await detail(found, provider_id, FormState(), 200, device=device)
    if not answer.ok:
        return await detail(found, provider_id, FormState(message=answer.message), answer.status)
    return see_other(f"/providers/{provider_id}", found)


async def sign_out(console: Console, request: Request) -> Response:
    from llmrelay.console.pages.providers import detail

    found, _ = await form_visit(console, request, "providers:write")
    provider_id = request.path_params["provider_id"]
    answer = await found.admin.call("DELETE", f"/providers/{provider_id}/codex")
    if not answer.ok:
        return await detail(found, provider_id, FormState(message=answer.message), answer.status)
    return see_other(f"/providers/{provider_id}", found)


def routes(console: Console) -> list[Route]:
    item = "/providers/{provider_id}/codex"
    return [
        page(console, item + "/device", device_start, ["POST"]),
        page(console, item + "/device/finish", device_finish, ["POST"]),
        page(console, item + "/sign-out", sign_out, ["POST"]),
    ]
