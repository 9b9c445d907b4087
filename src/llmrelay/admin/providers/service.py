"""The rules of providers, shared by the admin API and `llmrelay apply`: ProviderConfig's
validation (slug, type rules, http(s) base URL, reserved headers, timeouts), one slug per
tenant, and credentials (the API key and the extra headers, which may carry secrets too)
sealed with AES-GCM under the provider's id: write-only, never returned (the API shows
whether a key is set, its last four characters and the header names).

A slug is stable (clients pin "model:slug"; policies name it), so it cannot be changed, and
a provider that routes or policies still name cannot be deleted (deleting it would silently
drop those routes).

Its base URL is judged by the outbound address policy (outbound/policy.py) of whoever sets
it: a tenant's admin may point a provider at public addresses only (unless
LLMRELAY_TENANT_OUTBOUND_ALLOW opens more), the operator (YAML, admin token, platform admin)
at private and loopback ones too. The row remembers who (`declared_by`), and every connection
to it is judged by that audience's rules again (outbound/connector.py)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import orjson
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.kit.problems import AddressRefused, Conflict, Invalid, from_validation
from llmrelay.admin.kit.rows import Outcome, assign
from llmrelay.admin.providers import repository, resource_service
from llmrelay.config.schema import ProviderConfig
from llmrelay.jobs import queue
from llmrelay.jobs.keys import probe_key
from llmrelay.outbound.policy import OutboundPolicies, RefusedAddress, check_url
from llmrelay.store.credentials import open_credentials
from llmrelay.store.crypto import CredentialError, Sealer
from llmrelay.store.models import OPERATOR_DECLARED, TENANT_DECLARED, Provider, new_id

_SECRET_FIELDS = ("api_key", "headers")
#: Changes after which a pending health probe of the provider runs at once.
_REPROBE = frozenset({"credentials", "base_url", "type", "api_version"})
#: The most models one provider's inventory lists (the largest public catalogues have a few
#: hundred).
MAX_INVENTORY = 5000


def parse(data: Mapping[str, Any]) -> ProviderConfig:
    try:
        return ProviderConfig.model_validate(dict(data))
    except ValidationError as exc:
        raise from_validation(exc) from None


def _credentials(api_key: str | None, headers: Mapping[str, str]) -> dict[str, Any] | None:
    if api_key is None and not headers:
        return None
    return {"api_key": api_key, "headers": dict(headers)}


def _seal(row: Provider, wanted: dict[str, Any] | None, sealer: Sealer) -> None:
    if wanted is None:
        row.credentials_sealed = row.credentials_key_id = row.api_key_last_four = None
        return
    row.credentials_sealed = sealer.seal(orjson.dumps(wanted), context=row.id)
    row.credentials_key_id = sealer.key_id
    key = wanted["api_key"]
    row.api_key_last_four = key[-4:] if key else None


def _values(config: ProviderConfig) -> dict[str, Any]:
    return {
        "type": config.type.value,
        "base_url": config.effective_base_url,
        "timeout_s": config.timeout_s,
        "connect_timeout_s": config.connect_timeout_s,
        "first_token_timeout_s": config.first_token_timeout_s,
        "stream_idle_timeout_s": config.stream_idle_timeout_s,
        "api_version": config.api_version,
        "region": config.region,
        "preset": config.preset,
    }


async def admit_base_url(url: str | None, declared_by: str, policies: OutboundPolicies) -> None:
    """AddressRefused (400, naming the rule) when `declared_by`'s audience may not reach the
    URL's host. A host that does not resolve now passes: its connections are judged when
    they are made."""
    if url is None:
        return
    policy = policies.of(declared_by == TENANT_DECLARED)
    try:
        await check_url(url, policy, policies.resolve, what="provider", unresolved_ok=True)
    except RefusedAddress as refused:
        raise AddressRefused(f"base_url: {refused}", "base_url") from None


def upsert_provider(
    session: AsyncSession,
    tenant_id: str,
    config: ProviderConfig,
    row: Provider | None,
    sealer: Sealer,
    declared_by: str = OPERATOR_DECLARED,
) -> Outcome[Provider]:
    """Create or bring one provider in line with `config` (what apply does: the operator
    declares it); credentials are re-sealed only when they differ from the stored ones."""
    created = row is None
    if row is None:
        row = Provider(id=new_id(), tenant_id=tenant_id, slug=config.slug)
        session.add(row)
    changed = assign(row, {**_values(config), "declared_by": declared_by})
    wanted = _credentials(config.api_key, config.headers)
    try:
        same = not created and open_credentials(row, sealer) == wanted
    except CredentialError:
        same = False  # sealed under another secret key: the new value replaces it
    if created or not same:
        _seal(row, wanted, sealer)
        if not created:
            changed.append("credentials")
    return Outcome(row, created, [] if created else changed)


async def create_provider(
    session: AsyncSession,
    tenant_id: str,
    config: ProviderConfig,
    sealer: Sealer,
    *,
    declared_by: str = OPERATOR_DECLARED,
    policies: OutboundPolicies | None = None,
) -> Provider:
    if await repository.by_slug(session, tenant_id, config.slug) is not None:
        raise Conflict(f"slug: a provider {config.slug!r} exists", "slug")
    await admit_base_url(config.effective_base_url, declared_by, policies or OutboundPolicies())
    row = upsert_provider(session, tenant_id, config, None, sealer, declared_by).row
    await session.flush()
    if config.resources is not None:
        await resource_service.sync_resources(session, row, config.resources, sealer)
    return row


def current_config(row: Provider) -> dict[str, Any]:
    """The provider as a config mapping, without its credentials (never opened to merge a
    change that does not touch them)."""
    stored = {
        "slug": row.slug,
        "type": row.type,
        "base_url": row.base_url,
        "timeout_s": row.timeout_s,
        "connect_timeout_s": row.connect_timeout_s,
        "first_token_timeout_s": row.first_token_timeout_s,
        "stream_idle_timeout_s": row.stream_idle_timeout_s,
        "api_version": row.api_version,
        "region": row.region,
        "preset": row.preset,
    }
    return {k: v for k, v in stored.items() if v is not None}


async def update_provider(
    session: AsyncSession,
    row: Provider,
    changes: Mapping[str, Any],
    sealer: Sealer,
    *,
    declared_by: str = OPERATOR_DECLARED,
    policies: OutboundPolicies | None = None,
) -> list[str]:
    """A partial change, validated whole. `api_key` and `headers` replace the stored ones
    when given (`api_key: null` removes the key); left out, they stay as they are. A change
    that names or moves the base URL is judged by `declared_by`'s outbound policy and makes
    the provider theirs; any other change leaves who declared it as it was."""
    if "slug" in changes and changes["slug"] != row.slug:
        raise Invalid("slug: a provider's slug cannot change (clients and policies use it)", "slug")
    merged = {**current_config(row), **changes}
    if changes.get("type") not in (None, row.type) and "base_url" not in changes:
        merged.pop("base_url", None)  # the old type's default URL is not the new one's
    config = parse(merged)
    values = _values(config)
    if "base_url" in changes or values["base_url"] != row.base_url:
        await admit_base_url(values["base_url"], declared_by, policies or OutboundPolicies())
        values["declared_by"] = declared_by
    changed = assign(row, values)
    if any(name in changes for name in _SECRET_FIELDS):
        try:
            stored = open_credentials(row, sealer)
            readable = True
        except CredentialError:  # sealed under another secret key: replaced whole
            stored, readable = None, False
        old = stored or {}
        api_key = changes["api_key"] if "api_key" in changes else old.get("api_key")
        headers = config.headers if "headers" in changes else old.get("headers") or {}
        wanted = _credentials(api_key, headers)
        if wanted != stored or not readable:
            _seal(row, wanted, sealer)
            changed.append("credentials")
    # `resources` given: the whole set, as apply does.
    if config.resources is not None and await resource_service.sync_resources(
        session, row, config.resources, sealer
    ):
        changed.append("resources")
    await reprobe_if_changed(session, row, changed)
    await session.flush()
    return changed


async def reprobe_if_changed(session: AsyncSession, row: Provider, changed: list[str]) -> None:
    """A probe waiting to look at this provider again (it was found unhealthy) looks now
    when its credentials or address changed: a fixed key brings the provider back without
    waiting for the probe's next round (jobs/probe.py)."""
    if _REPROBE.intersection(changed):
        await queue.hasten(session, probe_key(row.id), now=time.time())


async def delete_provider(session: AsyncSession, row: Provider) -> None:
    models = await repository.models_routing_to(session, row.id)
    if models:
        raise Conflict(f"models {', '.join(models)} still route to this provider")
    policies = await repository.policies_naming(session, row.tenant_id, row.slug)
    if policies:
        raise Conflict(f"routing policies {', '.join(policies)} still name this provider")
    await session.delete(row)
    await session.flush()


def _inventory_entry(index: int, entry: Any) -> dict[str, Any]:
    if isinstance(entry, str):
        entry = {"id": entry}
    if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
        raise Invalid(f"models[{index}]: a model id or {{'id': ...}}", f"models[{index}]")
    name = entry["id"]
    if not 1 <= len(name) <= 200:
        raise Invalid(f"models[{index}].id: 1 to 200 characters", f"models[{index}].id")
    return dict(entry)


async def set_inventory(session: AsyncSession, row: Provider, models: list[Any]) -> bool:
    """Replace the provider's model inventory (ids unique; extra fields kept as given)."""
    if len(models) > MAX_INVENTORY:
        raise Invalid(f"models: at most {MAX_INVENTORY} entries", "models")
    entries = [_inventory_entry(i, entry) for i, entry in enumerate(models)]
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        if entry["id"] in seen:
            raise Invalid(f"models[{index}].id: {entry['id']!r} twice", f"models[{index}].id")
        seen.add(entry["id"])
    changed = assign(row, {"model_inventory": entries})
    await session.flush()
    return bool(changed)
