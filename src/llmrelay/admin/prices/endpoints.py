"""/api/admin/models/{id}/prices: a model's price versions. HTTP only; the rules are in
service.py. Versions are append-only (no ETag needed: nothing is overwritten); only a
scheduled version (not yet in force) can be deleted."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request

from llmrelay.admin import audit
from llmrelay.admin.access import Actor, require
from llmrelay.admin.kit.http import Session, commit_change, fields
from llmrelay.admin.kit.problems import NotFound
from llmrelay.admin.models.endpoints import load as load_model
from llmrelay.admin.models.schemas import PriceOut, PricePage, prices_out
from llmrelay.admin.prices import repository, service
from llmrelay.store.types import utcnow

router = APIRouter(tags=["prices"])
Reader = Annotated[Actor, Depends(require("prices:read"))]
Writer = Annotated[Actor, Depends(require("prices:write"))]


@router.get("/models/{model_id}/prices")
async def list_prices(session: Session, actor: Reader, model_id: str) -> PricePage:
    """Every version, newest first; `in_force` marks the one charged now."""
    model = await load_model(session, actor, "prices:read", model_id)
    return PricePage(data=prices_out(await repository.for_model(session, model.id)))


@router.post("/models/{model_id}/prices", status_code=201)
async def add_price(
    request: Request,
    session: Session,
    actor: Writer,
    model_id: str,
    body: Annotated[dict[str, Any], Body(description="USD per million tokens by bucket")],
) -> PriceOut:
    """A new version: `input_per_mtok`, `output_per_mtok`, `cached_input_per_mtok`,
    `cache_write_per_mtok` (USD per million tokens), `effective_from` (default now)."""
    model = await load_model(session, actor, "prices:write", model_id)
    pricing, effective_from = service.parse(body)
    row = await service.add_price(session, model, pricing, effective_from)
    listed = prices_out(await repository.for_model(session, model.id))
    out = next(p for p in listed if p.id == row.id)
    audit.note(request, "price.create", "price", row.id, None, fields(out), model.tenant_id)
    await commit_change(request, session)
    return out


@router.delete("/models/{model_id}/prices/{price_id}", status_code=204)
async def delete_price(
    request: Request, session: Session, actor: Writer, model_id: str, price_id: str
) -> None:
    """Only a scheduled version (effective later); one in force or past is history."""
    model = await load_model(session, actor, "prices:write", model_id)
    row = await repository.get(session, price_id)
    if row is None or row.model_id != model.id:
        raise NotFound(f"no price version {price_id!r} for model {model.name!r}")
    before = {"effective_from": row.effective_from.isoformat(), "in_force": False}
    if row.effective_from <= utcnow():
        before["in_force"] = True
    await service.delete_price(session, row)
    audit.note(request, "price.delete", "price", row.id, before, None, model.tenant_id)
    await commit_change(request, session)
