"""Virtual models and their routes: strategy, weights, priorities, fallbacks, each route's
breaker state (live), and the model's price versions."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmrelay.console.forms import FormState, Kind, body_of, text
from llmrelay.console.listing import Column, field, listing
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

STRATEGIES = ("priority", "fixed", "weighted", "least_time", "cost_first", "load_balance", "tag")
CHANGE: dict[str, Kind] = {
    "strategy": "text",
    "fallbacks": "list",
    "context_fallbacks": "list",
    "deadline_s": "text",
    "retry.attempts": "text",
    "retry.backoff_ms": "text",
}
ROUTE: dict[str, Kind] = {"priority": "text", "weight": "text", "tag": "text"}
PRICE: dict[str, Kind] = {
    "input_per_mtok": "text",
    "output_per_mtok": "text",
    "cached_input_per_mtok": "text",
    "cache_write_per_mtok": "text",
    "effective_from": "text",
}
#: The admin API's names of the create form's first route.
FIRST_ROUTE = {
    "routes[0].provider": "provider",
    "routes[0].upstream_model": "upstream_model",
    "routes": "upstream_model",
}


async def _breakers(found: Visit) -> dict[str, Any]:
    """The routes' breaker states, and whether the page may poll them (only when this
    gateway's admin API has the health route)."""
    probe = await health(found)
    states = {b["route_id"]: b["state"] for b in (probe or {}).get("breakers", [])}
    return {"breakers": states, "live_breakers": probe is not None}


async def _inventory(found: Visit) -> list[tuple[str, str]]:
    """(provider slug, model id) of every provider's discovered inventory, offered when a
    route is added (the upstream model field's suggestions)."""
    if not found.can("providers:read"):
        return []
    offered: list[tuple[str, str]] = []
    for provider in (await found.admin.get("/providers", {"limit": 500})).data:
        listed = await found.admin.get(f"/providers/{provider['id']}/models")
        for model in (listed.body.get("models") or []) if listed.ok else []:
            offered.append((provider["slug"], str(model["id"])))
    return sorted(set(offered))


async def _slugs(found: Visit) -> list[str]:
    if not found.can("providers:read"):
        return []
    return sorted({p["slug"] for p in (await found.admin.get("/providers", {"limit": 500})).data})


MODEL_COLUMNS = (
    Column("name", "Model", field("name")),
    Column("strategy", "Strategy", field("strategy")),
    Column("routes", "Routes", lambda m: len(m.get("routes") or ())),
    Column("price", "Price in force", lambda m: (m.get("price") or {}).get("input_per_mtok")),
)


async def _list(found: Visit, form: FormState, status: int = 200) -> Response:
    rows = (await found.read("/models", {"limit": 500}))["data"]
    shown = listing(
        rows,
        found.request.query_params,
        MODEL_COLUMNS,
        ("name", "strategy", "routes", "fallbacks"),
        "name",
    )
    return found.render(
        "models.html",
        status,
        models=shown.rows,
        listing=shown,
        inventory=await _inventory(found),
        **await _breakers(found),
        form=form,
        strategies=STRATEGIES,
        providers=await _slugs(found),
        tenants=await tenant_choices(found, "models:write"),
    )


async def models(console: Console, request: Request) -> Response:
    found = await visit(console, request, "models:read")
    return await _list(found, FormState(values={"strategy": "priority"}))


async def create(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "models:write")
    body = body_of(fields, CHANGE, clear_empty=False)
    body["name"] = text(fields, "name")
    body["embedding"] = fields.get("embedding") == "on"
    route = body_of(fields, {"provider": "text", "upstream_model": "text"}, clear_empty=False)
    body["routes"] = [route]
    pricing = body_of(
        fields, {"input_per_mtok": "text", "output_per_mtok": "text"}, clear_empty=False
    )
    if pricing:
        body["pricing"] = pricing
    if not body["retry"]:
        del body["retry"]
    query = {"tenant_id": text(fields, "tenant_id")}
    answer = await found.admin.call("POST", "/models", query=query, body=body)
    if not answer.ok:
        return await _list(found, FormState.failed(fields, answer, FIRST_ROUTE), answer.status)
    return see_other(f"/models/{answer.body['id']}", found)


async def _detail(found: Visit, model_id: str, form: FormState, status: int = 200) -> Response:
    model = await found.read(f"/models/{model_id}")
    prices: list[Any] = []
    if found.can("prices:read"):
        prices = (await found.admin.get(f"/models/{model_id}/prices")).data
    return found.render(
        "model.html",
        status,
        model=model,
        prices=prices,
        inventory=await _inventory(found),
        **await _breakers(found),
        form=form,
        strategies=STRATEGIES,
        providers=await _slugs(found),
    )


async def model(console: Console, request: Request) -> Response:
    found = await visit(console, request, "models:read")
    return await _detail(found, request.path_params["model_id"], FormState())


async def _submit(
    console: Console,
    request: Request,
    permission: str,
    method: str,
    path: str,
    body: Any,
    version_field: str = "version",
) -> Response:
    """A change from a form of the model's page: back to the page, or the page again with
    the admin API's error (and the input kept)."""
    found, fields = await form_visit(console, request, permission)
    model_id = request.path_params["model_id"]
    payload = body(fields) if callable(body) else body
    answer = await found.admin.call(
        method,
        path.format(**request.path_params),
        body=payload,
        if_match=fields.get(version_field) if method in ("PATCH", "DELETE") else None,
    )
    if not answer.ok:
        return await _detail(found, model_id, FormState.failed(fields, answer), answer.status)
    if method == "DELETE" and path == "/models/{model_id}":
        return see_other("/models", found)
    return see_other(f"/models/{model_id}", found)


async def change(console: Console, request: Request) -> Response:
    return await _submit(
        console,
        request,
        "models:write",
        "PATCH",
        "/models/{model_id}",
        lambda f: body_of(f, CHANGE, clear_empty=True),
    )


async def delete(console: Console, request: Request) -> Response:
    return await _submit(console, request, "models:write", "DELETE", "/models/{model_id}", None)


def _route_body(fields: dict[str, str]) -> dict[str, Any]:
    body = body_of(fields, ROUTE, clear_empty=False)
    body["disabled"] = fields.get("disabled") == "on"
    return body


async def add_route(console: Console, request: Request) -> Response:
    def body(fields: dict[str, str]) -> dict[str, Any]:
        new = body_of(fields, {"provider": "text", "upstream_model": "text"}, clear_empty=False)
        return new | _route_body(fields)

    return await _submit(
        console, request, "models:write", "POST", "/models/{model_id}/routes", body
    )


async def change_route(console: Console, request: Request) -> Response:
    return await _submit(
        console,
        request,
        "models:write",
        "PATCH",
        "/models/{model_id}/routes/{route_id}",
        _route_body,
    )


async def delete_route(console: Console, request: Request) -> Response:
    return await _submit(
        console, request, "models:write", "DELETE", "/models/{model_id}/routes/{route_id}", None
    )


async def add_price(console: Console, request: Request) -> Response:
    return await _submit(
        console,
        request,
        "prices:write",
        "POST",
        "/models/{model_id}/prices",
        lambda f: body_of(f, PRICE, clear_empty=False),
    )


async def delete_price(console: Console, request: Request) -> Response:
    return await _submit(
        console, request, "prices:write", "DELETE", "/models/{model_id}/prices/{price_id}", None
    )


def routes(console: Console) -> list[Route]:
    item = "/models/{model_id}"
    route = item + "/routes/{route_id}"
    return [
        page(console, "/models", models),
        page(console, "/models", create, ["POST"]),
        page(console, item, model),
        page(console, item, change, ["POST"]),
        page(console, item + "/delete", delete, ["POST"]),
        page(console, item + "/routes", add_route, ["POST"]),
        page(console, route, change_route, ["POST"]),
        page(console, route + "/delete", delete_route, ["POST"]),
        page(console, item + "/prices", add_price, ["POST"]),
        page(console, item + "/prices/{price_id}/delete", delete_price, ["POST"]),
    ]
