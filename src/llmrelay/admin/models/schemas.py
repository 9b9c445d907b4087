"""What the models API answers with (requests are the config schema's ModelConfig and
RouteConfig). Prices are USD per million tokens, as in the file."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import BaseModel

from llmrelay.admin.kit.rows import micros_to_usd
from llmrelay.store.models import PriceVersion, Route, VirtualModel
from llmrelay.store.types import utcnow


class RouteOut(BaseModel):
    id: str
    model_id: str
    provider: str
    provider_id: str
    upstream_model: str
    priority: int
    weight: float
    tag: str | None
    disabled: bool
    position: int
    capabilities: dict[str, Any] | None
    #: The route's own price, micro-USD per million tokens by bucket.
    pricing_micros: dict[str, int] | None
    version: int


class PriceOut(BaseModel):
    id: str
    model_id: str
    effective_from: datetime
    #: True for the version charged now; a later one is scheduled.
    in_force: bool
    input_per_mtok: float | None
    output_per_mtok: float | None
    cached_input_per_mtok: float | None
    cache_write_per_mtok: float | None
    source: str


class Retry(BaseModel):
    attempts: int
    backoff_ms: int


class Affinity(BaseModel):
    enabled: bool
    ttl_s: float


class ModelOut(BaseModel):
    id: str
    tenant_id: str
    name: str
    strategy: str
    retry: Retry
    deadline_s: float
    fallbacks: list[str]
    context_fallbacks: list[str]
    embedding: bool
    affinity: Affinity
    stream_rescue: bool
    #: "served", or "draft": no route left (its last one was removed); kept in the
    #: directory, not served, until a route is added.
    status: str
    routes: list[RouteOut]
    #: The price version in force (null: none).
    price: PriceOut | None
    version: int
    created_at: datetime
    updated_at: datetime


class ModelPage(BaseModel):
    data: list[ModelOut]
    next_cursor: str | None


class PricePage(BaseModel):
    data: list[PriceOut]


def route_out(row: Route, slugs: Mapping[str, str]) -> RouteOut:
    return RouteOut(
        id=row.id,
        model_id=row.model_id,
        provider=slugs.get(row.provider_id, ""),
        provider_id=row.provider_id,
        upstream_model=row.upstream_model,
        priority=row.priority,
        weight=row.weight,
        tag=row.tag,
        disabled=row.disabled,
        position=row.position,
        capabilities=row.capabilities,
        pricing_micros=row.pricing,
        version=row.version,
    )


def _usd(value: int | None) -> float | None:
    found: Decimal | None = micros_to_usd(value)
    return None if found is None else float(found)


def price_out(row: PriceVersion, in_force: bool) -> PriceOut:
    return PriceOut(
        id=row.id,
        model_id=row.model_id,
        effective_from=row.effective_from,
        in_force=in_force,
        input_per_mtok=_usd(row.input_micros_per_mtok),
        output_per_mtok=_usd(row.output_micros_per_mtok),
        cached_input_per_mtok=_usd(row.cached_input_micros_per_mtok),
        cache_write_per_mtok=_usd(row.cache_write_micros_per_mtok),
        source=row.source,
    )


def prices_out(rows: Sequence[PriceVersion]) -> list[PriceOut]:
    """Newest first, the one in force marked."""
    now = utcnow()
    current = next((r.id for r in rows if r.effective_from <= now), None)
    return [price_out(r, r.id == current) for r in rows]


def model_out(
    row: VirtualModel,
    routes: Sequence[Route],
    slugs: Mapping[str, str],
    prices: Sequence[PriceVersion],
) -> ModelOut:
    listed = prices_out(prices)
    return ModelOut(
        id=row.id,
        tenant_id=row.tenant_id,
        name=row.name,
        strategy=row.strategy,
        retry=Retry(attempts=row.retry_attempts, backoff_ms=row.retry_backoff_ms),
        deadline_s=row.deadline_s,
        fallbacks=row.fallbacks,
        context_fallbacks=row.context_fallbacks,
        embedding=row.embedding,
        affinity=Affinity(enabled=row.affinity_enabled, ttl_s=row.affinity_ttl_s),
        stream_rescue=row.stream_rescue,
        status="served" if routes else "draft",
        routes=[route_out(r, slugs) for r in routes],
        price=next((p for p in listed if p.in_force), None),
        version=row.version,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
