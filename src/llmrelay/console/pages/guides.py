"""Quickstart (four steps with snippets for this gateway), the Playground (the browser
calls the data plane itself with a key kept in the page's memory), and the model catalogue
with list prices and the tenant's own models' prices in force."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmrelay.console import snippets
from llmrelay.console.listing import Column, field, listing
from llmrelay.console.web import Console, Visit, page, visit

CATALOGUE_COLUMNS = (
    Column("provider", "Provider", lambda m: (m.get("provider"), m.get("id"))),
    Column("model", "Model", field("id")),
    Column("context", "Context", field("context_window")),
    Column("input", "Input", lambda m: (m.get("price") or {}).get("input_per_mtok")),
    Column("output", "Output", lambda m: (m.get("price") or {}).get("output_per_mtok")),
)


async def _models(found: Visit) -> list[dict[str, Any]]:
    if not found.can("models:read"):
        return []
    return (await found.admin.get("/models", {"limit": 500})).data


async def quickstart(console: Console, request: Request) -> Response:
    found = await visit(console, request)
    models = await _models(found)
    chat = sorted(m["name"] for m in models if not m["embedding"])
    model = chat[0] if chat else "MODEL"
    base_url = found.api_base_url()
    return found.render(
        "quickstart.html",
        base_url=base_url,
        model=model,
        models=chat,
        first=snippets.first_request(base_url, model),
        streaming=snippets.streaming(base_url, model),
    )


async def playground(console: Console, request: Request) -> Response:
    found = await visit(console, request, "playground:read")
    embedding = sorted(m["name"] for m in await _models(found) if m["embedding"])
    return found.render("playground.html", base_url=found.api_base_url(), embedding=embedding)


async def catalogue(console: Console, request: Request) -> Response:
    found = await visit(console, request)
    listed = await found.read("/catalogue")
    shown = listing(
        listed["data"],
        request.query_params,
        CATALOGUE_COLUMNS,
        ("id", "provider", "capabilities"),
        "provider",
        page_size=200,  # a reference to read through: long pages
    )
    return found.render(
        "catalogue.html", catalogue=shown.rows, listing=shown, models=await _models(found)
    )


def routes(console: Console) -> list[Route]:
    return [
        page(console, "/quickstart", quickstart),
        page(console, "/playground", playground),
        page(console, "/catalogue", catalogue),
    ]
