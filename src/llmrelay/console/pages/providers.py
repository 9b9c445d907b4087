"""Providers: the list, create, change (credentials write-only: a blank key keeps the stored
one), delete, the model inventory, a connection test and model discovery (a job); an
openai_codex provider's ChatGPT account (provider_codex.py)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmrelay.console.forms import FormState, Kind, body_of, text
from llmrelay.console.listing import Column, field, listing
from llmrelay.console.pages import provider_codex
from llmrelay.console.pages.dashboard import health
from llmrelay.console.web import (
    Console,
    Visit,
    form_visit,
    page,
    see_other,
    tenant_choices,
    visit,
)

TYPES = (
    "openai",
    "openai_compatible",
    "azure_openai",
    "anthropic",
    "gemini",
    "openai_codex",
    "mock",
)
PRESETS = ("deepseek", "qwen", "vllm", "ollama")
_TIMEOUTS = ("timeout_s", "connect_timeout_s", "first_token_timeout_s", "stream_idle_timeout_s")
#: Fields a change may clear (the slug and type stay; credentials are handled apart).
CHANGE: dict[str, Kind] = {
    "base_url": "text",
    "region": "text",
    "preset": "text",
    "api_version": "text",
    **dict.fromkeys(_TIMEOUTS, "text"),
}
CREATE: dict[str, Kind] = {"slug": "text", "type": "text", **CHANGE, "api_key": "text"}


def _headers(value: str | None) -> dict[str, str] | None:
    """Extra upstream headers typed as `Name: value` lines (None: none typed)."""
    lines = [line for line in (value or "").splitlines() if line.strip()]
    if not lines:
        return None
    found = {}
    for line in lines:
        name, _, header_value = line.partition(":")
        found[name.strip()] = header_value.strip()
    return found


PROVIDER_COLUMNS = (
    Column("slug", "Slug", field("slug")),
    Column("type", "Type", field("type")),
    Column("region", "Region", field("region")),
    Column("health", "Health", field("health")),
)


async def _list(found: Visit, form: FormState, status: int = 200) -> Response:
    rows = (await found.read("/providers", {"limit": 500}))["data"]
    states = {}
    probe = await health(found)
    if probe is not None:
        states = {row["provider_id"]: row for row in probe.get("data", [])}
    for row in rows:
        row["health"] = states.get(row["id"], {}).get("status")
    shown = listing(
        rows,
        found.request.query_params,
        PROVIDER_COLUMNS,
        ("slug", "type", "base_url", "region", "preset", "health"),
        "slug",
    )
    return found.render(
        "providers.html",
        status,
        providers=shown.rows,
        listing=shown,
        states=states,
        form=form,
        types=TYPES,
        presets=PRESETS,
        tenants=await tenant_choices(found, "providers:write"),
    )


async def providers(console: Console, request: Request) -> Response:
    found = await visit(console, request, "providers:read")
    return await _list(found, FormState(values={"type": "openai_compatible"}))


async def create(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "providers:write")
    body = body_of(fields, CREATE, clear_empty=False)
    headers = _headers(fields.get("headers"))
    if headers:
        body["headers"] = headers
    query = {"tenant_id": text(fields, "tenant_id")}
    answer = await found.admin.call("POST", "/providers", query=query, body=body)
    if not answer.ok:
        return await _list(found, FormState.failed(fields, answer), answer.status)
    return see_other(f"/providers/{answer.body['id']}", found)


async def detail(
    found: Visit, provider_id: str, form: FormState, status: int = 200, **extra: Any
) -> Response:
    provider = await found.read(f"/providers/{provider_id}")
    inventory = await found.admin.get(f"/providers/{provider_id}/models")
    resources = await found.admin.get(f"/providers/{provider_id}/resources")
    job_id = extra.pop("job_id", None) or found.request.query_params.get("job")
    job = None
    if job_id:
        answer = await found.admin.get(f"/jobs/{job_id}")
        job = (
            answer.body
            if answer.ok
            else {"id": job_id, "status": "unknown", "error": answer.message}
        )
    if provider.get("type") == "openai_codex":
        refresh = found.request.query_params.get("usage") == "now"
        extra["codex"] = await provider_codex.account(found, provider_id, refresh=refresh)
    probe = await health(found)
    state = next(
        (r for r in (probe or {}).get("data", []) if r["provider_id"] == provider_id), None
    )
    return found.render(
        "provider.html",
        status,
        provider=provider,
        state=state,
        job=job,
        form=form,
        inventory=inventory.body if inventory.ok else None,
        resources=resources.body["data"] if resources.ok else [],
        presets=PRESETS,
        **extra,
    )


async def provider(console: Console, request: Request) -> Response:
    found = await visit(console, request, "providers:read")
    handed = found.take_flash() or {}
    return await detail(
        found,
        request.path_params["provider_id"],
        FormState(),
        tested=handed.get("tested"),
        codex_notice=handed.get("codex_notice"),
    )


async def change(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "providers:write")
    provider_id = request.path_params["provider_id"]
    body = body_of(fields, CHANGE, clear_empty=True)
    if fields.get("remove_api_key") == "on":
        body["api_key"] = None
    elif text(fields, "api_key"):
        body["api_key"] = text(fields, "api_key")
    headers = _headers(fields.get("headers"))
    if headers:
        body["headers"] = headers
    answer = await found.admin.call(
        "PATCH", f"/providers/{provider_id}", body=body, if_match=fields.get("version")
    )
    if not answer.ok:
        return await detail(found, provider_id, FormState.failed(fields, answer), answer.status)
    return see_other(f"/providers/{provider_id}", found)


async def delete(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "providers:write")
    provider_id = request.path_params["provider_id"]
    answer = await found.admin.call(
        "DELETE", f"/providers/{provider_id}", if_match=fields.get("version")
    )
    if not answer.ok:
        form = FormState(message=answer.message)
        return await detail(found, provider_id, form, answer.status)
    return see_other("/providers", found)


async def inventory(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "providers:write")
    provider_id = request.path_params["provider_id"]
    models = [line.strip() for line in fields.get("models", "").splitlines() if line.strip()]
    answer = await found.admin.call(
        "PUT",
        f"/providers/{provider_id}/models",
        body={"models": models},
        if_match=fields.get("version"),
    )
    if not answer.ok:
        form = FormState.failed(fields, answer)
        return await detail(found, provider_id, form, answer.status)
    return see_other(f"/providers/{provider_id}", found)


async def test(console: Console, request: Request) -> Response:
    """Probe now; when the provider listed models and its inventory was never filled, a
    discovery follows (a test only counts the models, discovery keeps them)."""
    found, _ = await form_visit(console, request, "providers:write")
    provider_id = request.path_params["provider_id"]
    answer = await found.admin.call("POST", f"/providers/{provider_id}/test")
    if not answer.ok:
        return await detail(found, provider_id, FormState(message=answer.message), answer.status)
    target = f"/providers/{provider_id}"
    if answer.body.get("models"):
        inventory = await found.admin.get(f"/providers/{provider_id}/models")
        if inventory.ok and inventory.body.get("models") is None:
            queued = await found.admin.call("POST", f"/providers/{provider_id}/discover")
            if queued.ok:
                target += f"?job={queued.body['job_id']}"
    return see_other(target, found, {"tested": answer.body})


async def discover(console: Console, request: Request) -> Response:
    found, _ = await form_visit(console, request, "providers:write")
    provider_id = request.path_params["provider_id"]
    answer = await found.admin.call("POST", f"/providers/{provider_id}/discover")
    if not answer.ok:
        return await detail(found, provider_id, FormState(message=answer.message), answer.status)
    return see_other(f"/providers/{provider_id}?job={answer.body['job_id']}", found)


def routes(console: Console) -> list[Route]:
    item = "/providers/{provider_id}"
    return [
        page(console, "/providers", providers),
        page(console, "/providers", create, ["POST"]),
        page(console, item, provider),
        page(console, item, change, ["POST"]),
        page(console, item + "/delete", delete, ["POST"]),
        page(console, item + "/inventory", inventory, ["POST"]),
        page(console, item + "/test", test, ["POST"]),
        page(console, item + "/discover", discover, ["POST"]),
        *provider_codex.routes(console),
    ]
