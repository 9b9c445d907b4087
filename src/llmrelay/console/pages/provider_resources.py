"""A provider's resources (its accounts) on the provider page: add one (the key is
write-only, as the provider's), disable or enable one (an administrator's switch that no
health check undoes), remove one. The list itself is rendered by providers.py's detail."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmrelay.console.forms import FormState, Kind, body_of, text
from llmrelay.console.pages.providers import detail
from llmrelay.console.web import Console, form_visit, page, see_other

ADD: dict[str, Kind] = {
    "name": "text",
    "api_key": "text",
    "priority": "text",
    "weight": "text",
    "rpm": "text",
    "tpm": "text",
}


async def add(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "providers:write")
    provider_id = request.path_params["provider_id"]
    body = {
        name: (value if name in ("name", "api_key") else _number(value))
        for name, value in body_of(fields, ADD, clear_empty=False).items()
    }
    answer = await found.admin.call("POST", f"/providers/{provider_id}/resources", body=body)
    if not answer.ok:
        form = FormState.failed(fields, answer)
        return await detail(found, provider_id, form, answer.status)
    return see_other(f"/providers/{provider_id}", found)


async def toggle(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "providers:write")
    provider_id = request.path_params["provider_id"]
    path = f"/providers/{provider_id}/resources/{request.path_params['resource_id']}"
    answer = await found.admin.call(
        "PATCH",
        path,
        body={"disabled": text(fields, "disabled") == "true"},
        if_match=fields.get("version"),
    )
    if not answer.ok:
        return await detail(found, provider_id, FormState(message=answer.message), answer.status)
    return see_other(f"/providers/{provider_id}", found)


async def remove(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "providers:write")
    provider_id = request.path_params["provider_id"]
    path = f"/providers/{provider_id}/resources/{request.path_params['resource_id']}"
    answer = await found.admin.call("DELETE", path, if_match=fields.get("version"))
    if not answer.ok:
        return await detail(found, provider_id, FormState(message=answer.message), answer.status)
    return see_other(f"/providers/{provider_id}", found)


def _number(value: str) -> int | float | str:
    """A typed number as the API takes it (anything else is sent as typed: the API names it)."""
    try:
        return int(value)
    except ValueError:
        try:
            return float(value)
        except ValueError:
            return value


def routes(console: Console) -> list[Route]:
    base = "/providers/{provider_id}/resources"
    return [
        page(console, base, add, ["POST"]),
        page(console, base + "/{resource_id}/toggle", toggle, ["POST"]),
        page(console, base + "/{resource_id}/delete", remove, ["POST"]),
    ]
