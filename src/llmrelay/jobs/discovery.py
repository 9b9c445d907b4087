"""Model discovery (job kind `model_discovery`, payload {"provider_id"}, dedupe key
`discover:<provider_id>`): list the provider's upstream models and keep them as its model
inventory (the admin API's GET /providers/{id}/models), each entry enriched from the bundled
catalogue (metering/catalogue.py) when its id matches a catalogue model:

    {"id": "gpt-4o-mini-2024-07-18", "source": "discovered", "catalogue_id": "gpt-4o-mini",
     "context_window": 128000, "max_output": 16384, "capabilities": ["tools", ...],
     "pricing": {"input_per_mtok": 0.15, "cached_input_per_mtok": 0.075, "output_per_mtok": 0.6}}

`context_window` and `max_output` are the provider's own figures when its list has them
(Gemini's does), else the catalogue's; `pricing` is the catalogue's list price in force now.

Entries an operator added by hand stay: every entry whose `source` is not "discovered" (an
entry put through the API without a `source`, or with "source": "manual"), in its place and
ahead of the discovered ones; a discovered model with the same id as a hand entry is left out.
The rest of the inventory is replaced by what the provider lists now. A change moves the
provider's version (its ETag); discovery is not an operator's action, so it is logged, not
audited; the routing snapshot does not read the inventory, so nothing is announced.
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any, Final

import structlog
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm.exc import StaleDataError

from llmrelay.jobs import probe, queue
from llmrelay.jobs.keys import discovery_key
from llmrelay.jobs.kinds import GiveUp, JobContext, JobKind, RetryLater
from llmrelay.jobs.services import Services
from llmrelay.metering.catalogue import Catalogue, bundled
from llmrelay.metering.cost import Price
from llmrelay.providers.errors import UpstreamAddressRefused, UpstreamError
from llmrelay.providers.model_list import (
    ListedModel,
    Listing,
    UnlistableProvider,
    list_models,
)
from llmrelay.snapshot.builder import provider_snap
from llmrelay.store.crypto import CredentialError
from llmrelay.store.db import session_factory
from llmrelay.store.models import Provider

log = structlog.get_logger(__name__)

DISCOVERY_KIND: Final = "model_discovery"
DISCOVERED: Final = "discovered"
#: The most entries an inventory holds (the admin API's limit for a hand-written one too).
MAX_INVENTORY: Final = 5000
_MICROS: Final = Decimal(1_000_000)


def entry(listed: ListedModel, catalogue: Catalogue, now: float) -> dict[str, Any]:
    """One inventory entry for a listed model."""
    found: dict[str, Any] = {"id": listed.id, "source": DISCOVERED}
    if listed.display_name:
        found["name"] = listed.display_name
    known = catalogue.model(listed.id)
    context = listed.context_window or (known.context_window if known else None)
    output = listed.max_output or (known.max_output if known else None)
    if known is not None:
        found["catalogue_id"] = known.id
    if context:
        found["context_window"] = context
    if output:
        found["max_output"] = output
    if known is not None and known.capabilities:
        found["capabilities"] = list(known.capabilities)
    price = known.price_at(now) if known is not None else None
    if price is not None:
        found["pricing"] = pricing(price)
    return found


def pricing(price: Price) -> dict[str, float]:
    """A price in the config's words (USD per million tokens), buckets that are set."""
    buckets = {
        "input_per_mtok": price.input,
        "cached_input_per_mtok": price.cached_input,
        "cache_write_per_mtok": price.cache_write,
        "output_per_mtok": price.output,
    }
    return {name: float(Decimal(v) / _MICROS) for name, v in buckets.items() if v is not None}


def merged(
    held: list[dict[str, Any]] | None, discovered: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], int]:
    """The new inventory: the hand entries as they are, then the discovered ones by id
    (those a hand entry names left out), within MAX_INVENTORY; and how many were cut."""
    manual = [e for e in held or [] if e.get("source") != DISCOVERED]
    taken = {str(e.get("id")) for e in manual}
    fresh = sorted((e for e in discovered if e["id"] not in taken), key=lambda e: str(e["id"]))
    unique = list({e["id"]: e for e in fresh}.values())
    room = max(0, MAX_INVENTORY - len(manual))
    return manual + unique[:room], max(0, len(unique) - room)


async def enqueue(conn: AsyncConnection | AsyncSession, provider: Provider, *, now: float) -> str:
    """Queue a discovery of the provider (in the caller's transaction); the id of the one
    queued or already waiting."""
    key = discovery_key(provider.id)
    made = await queue.enqueue(
        conn,
        DISCOVERY_KIND,
        {"provider_id": provider.id},
        now=now,
        dedupe_key=key,
        max_attempts=4,
        tenant_id=provider.tenant_id,
    )
    if made is not None:
        return made
    held = await queue.holder(conn, key)
    if held is None:  # it ended between the two statements: the key is free now
        return await enqueue(conn, provider, now=now)
    return held


async def run(context: JobContext) -> dict[str, Any]:
    provider_id = context.payload.get("provider_id")
    if not isinstance(provider_id, str):
        raise GiveUp("payload.provider_id: a provider id is required")
    services: Services = context.services
    async with session_factory(services.engine)() as session:
        row = await session.get(Provider, provider_id)
        if row is None:
            return {"provider_id": provider_id, "status": "deleted"}
        try:
            provider = provider_snap(row, services.sealer)
        except CredentialError as sealed:
            raise GiveUp(f"the provider's credentials cannot be opened: {sealed}") from None
    try:
        listing = await list_models(services.registry, provider, all_pages=True)
    except UpstreamAddressRefused as refused:  # no connection made; retrying changes nothing
        raise GiveUp(f"provider {provider.slug}: {refused}") from None
    except UpstreamError as failed:
        raise RetryLater(f"provider {provider.slug} unreachable: {failed}") from None
    except UnlistableProvider as unlistable:
        raise GiveUp(str(unlistable)) from None
    if listing.models is None:
        await _refused(services, provider_id, provider.slug, listing)
    assert listing.models is not None
    now = time.time()
    catalogue = bundled()
    found = [entry(listed, catalogue, now) for listed in listing.models]
    try:
        return await _store(services, provider_id, found)
    except StaleDataError:
        raise RetryLater("the provider changed meanwhile", delay_s=1.0) from None


async def _refused(services: Services, provider_id: str, slug: str, listing: Listing) -> None:
    """The provider did not list its models: retry what may pass, give up on the rest (a
    refused credential also queues a health probe). Always raises."""
    status = listing.status
    said = probe.masked(status, listing.detail or "")
    if 200 <= status < 300:
        raise GiveUp(f"provider {slug} answered a model list this version cannot read: {said}")
    if listing.credentials_refused:
        async with services.engine.begin() as conn:
            await probe.enqueue(conn, provider_id, now=time.time())
        if services.wake is not None:
            services.wake()
        raise GiveUp(f"provider {slug} refused the credentials ({said}); a health probe is queued")
    if status == 429 or status >= 500:
        raise RetryLater(f"provider {slug}: {said}")
    raise GiveUp(f"provider {slug} has no model list ({said})")


async def _store(
    services: Services, provider_id: str, found: list[dict[str, Any]]
) -> dict[str, Any]:
    async with session_factory(services.engine)() as session, session.begin():
        row = await session.get(Provider, provider_id)
        if row is None:
            return {"provider_id": provider_id, "status": "deleted"}
        before = row.model_inventory
        inventory, cut = merged(before, found)
        old_ids = {e.get("id") for e in before or [] if e.get("source") == DISCOVERED}
        new_ids = {e["id"] for e in inventory if e.get("source") == DISCOVERED}
        changed = inventory != before
        if changed:
            row.model_inventory = inventory  # the version moves on flush (the ETag)
        slug = row.slug
    result = {
        "provider_id": provider_id,
        "listed": len(found),
        "models": len(inventory),
        "added": len(new_ids - old_ids),
        "removed": len(old_ids - new_ids),
        "kept_manual": len(inventory) - len(new_ids),
        "changed": changed,
    }
    if cut:
        result["cut"] = cut
    log.info("models_discovered", provider=slug, **result)
    return result


def kind() -> JobKind:
    return JobKind(DISCOVERY_KIND, run, max_attempts=4, timeout_s=300.0)
