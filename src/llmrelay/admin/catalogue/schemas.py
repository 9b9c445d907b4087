"""What the catalogue route answers: each bundled model with the list price in force."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class ListPrice(BaseModel):
    """USD per million tokens, by bucket (null: the catalogue gives none), from `since`."""

    since: datetime
    input_per_mtok: float | None
    cached_input_per_mtok: float | None
    cache_write_per_mtok: float | None
    output_per_mtok: float | None


class CatalogueModelOut(BaseModel):
    id: str
    provider: str
    context_window: int | None
    max_output: int | None
    capabilities: list[str]
    #: The list price in force now (null: none yet).
    price: ListPrice | None


class CataloguePage(BaseModel):
    data: list[CatalogueModelOut]
