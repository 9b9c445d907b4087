"""GET /api/admin/catalogue: the models the bundled catalogue knows, with context windows,
capabilities and list prices (the prices records are charged when neither the route nor the
virtual model has one). Any signed-in caller may read it: it is the package's own data."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends

from llmrelay.admin.access import Actor, authenticate
from llmrelay.admin.catalogue.schemas import CatalogueModelOut, CataloguePage, ListPrice
from llmrelay.metering.catalogue import CatalogueModel, bundled

router = APIRouter(tags=["catalogue"])


def _usd(micros: int | None) -> float | None:
    return None if micros is None else micros / 1_000_000


def _price(model: CatalogueModel, now: float) -> ListPrice | None:
    found = [(start, price) for start, price in model.prices if start <= now]
    if not found:
        return None
    start, price = found[-1]
    return ListPrice(
        since=datetime.fromtimestamp(start, UTC),
        input_per_mtok=_usd(price.input),
        cached_input_per_mtok=_usd(price.cached_input),
        cache_write_per_mtok=_usd(price.cache_write),
        output_per_mtok=_usd(price.output),
    )


@router.get("/catalogue")
async def catalogue(actor: Annotated[Actor, Depends(authenticate)]) -> CataloguePage:
    """Every catalogue model, by provider then id, with its list price in force."""
    now = time.time()
    models = sorted(bundled().models.values(), key=lambda m: (m.provider, m.id))
    return CataloguePage(
        data=[
            CatalogueModelOut(
                id=m.id,
                provider=m.provider,
                context_window=m.context_window,
                max_output=m.max_output,
                capabilities=list(m.capabilities),
                price=_price(m, now),
            )
            for m in models
        ]
    )
