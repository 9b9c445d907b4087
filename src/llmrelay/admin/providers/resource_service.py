"""The rules of provider resources (a provider's accounts), shared by the admin API and
`llmrelay apply`: ResourceConfig's validation (name, header-safe key, reserved headers,
priority, weight >= 0, rpm/tpm), one name per provider, and credentials sealed with AES-GCM
under the resource's own id, exactly as a provider's: write-only, never returned (the API
shows whether a key is set, its last four characters and the header names).

A resource is an account of its provider: it has no slug of its own to pin, and deleting
it needs no check (routes name the provider). Disabling one is an administrator's switch
that no health check undoes (the snapshot leaves it out: docs/configuration.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.kit.problems import Conflict, Invalid, from_validation
from llmrelay.admin.kit.rows import assign, touch
from llmrelay.config.schema import CODEX_RESOURCE_KEY_REFUSED, ResourceConfig
from llmrelay.store.credentials import open_credentials
from llmrelay.store.crypto import CredentialError, Sealer
from llmrelay.store.models import Provider, ProviderResource, new_id

_SECRET_FIELDS = ("api_key", "headers")


def parse(data: Mapping[str, Any]) -> ResourceConfig:
    try:
        return ResourceConfig.model_validate(dict(data))
    except ValidationError as exc:
        raise from_validation(exc) from None


def refuse_codex_key(provider: Provider, api_key: str | None) -> None:
    """An openai_codex provider's resources are ChatGPT accounts signed in by OAuth: a key
    given for one is refused, as the YAML loader refuses it (config/schema.py), before
    anything is written. (Removing one, `api_key: null`, stays allowed.)"""
    if api_key is not None and provider.type == "openai_codex":
        raise Invalid(f"api_key: {CODEX_RESOURCE_KEY_REFUSED}", "api_key")


async def resources_of(session: AsyncSession, provider_id: str) -> list[ProviderResource]:
    rows = await session.scalars(
        select(ProviderResource)
        .where(ProviderResource.provider_id == provider_id)
        .order_by(ProviderResource.priority, ProviderResource.position, ProviderResource.name)
    )
    return list(rows)


async def get(session: AsyncSession, provider_id: str, resource_id: str) -> ProviderResource | None:
    row = await session.get(ProviderResource, resource_id)
    return row if row is not None and row.provider_id == provider_id else None


def _values(config: ResourceConfig) -> dict[str, Any]:
    return {
        "priority": config.priority,
        "weight": config.weight,
        "disabled": config.disabled,
        "rpm": config.rpm,
        "tpm": config.tpm,
    }


def _credentials(api_key: str | None, headers: Mapping[str, str]) -> dict[str, Any] | None:
    if api_key is None and not headers:
        return None
    return {"api_key": api_key, "headers": dict(headers)}


def _seal(row: ProviderResource, wanted: dict[str, Any] | None, sealer: Sealer) -> None:
    if wanted is None:
        row.credentials_sealed = row.credentials_key_id = row.api_key_last_four = None
        return
    row.credentials_sealed = sealer.seal(orjson.dumps(wanted), context=row.id)
    row.credentials_key_id = sealer.key_id
    key = wanted["api_key"]
    row.api_key_last_four = key[-4:] if key else None


def _stored(row: ProviderResource, sealer: Sealer) -> tuple[dict[str, Any] | None, bool]:
    """The stored credentials, and whether they could be opened."""
    try:
        return open_credentials(row, sealer), True
    except CredentialError:  # sealed under another secret key: replaced whole
        return None, False


def current_config(row: ProviderResource) -> dict[str, Any]:
    """The resource as a config mapping, without its credentials."""
    stored = {
        "name": row.name,
        "priority": row.priority,
        "weight": row.weight,
        "disabled": row.disabled,
        "rpm": row.rpm,
        "tpm": row.tpm,
    }
    return {k: v for k, v in stored.items() if v is not None}


async def create_resource(
    session: AsyncSession, provider: Provider, config: ResourceConfig, sealer: Sealer
) -> ProviderResource:
    refuse_codex_key(provider, config.api_key)
    existing = await resources_of(session, provider.id)
    if any(r.name == config.name for r in existing):
        raise Conflict(f"name: the provider has a resource {config.name!r}", "name")
    position = max((r.position for r in existing), default=-1) + 1
    row = ProviderResource(
        id=new_id(), provider_id=provider.id, name=config.name, position=position
    )
    assign(row, _values(config))
    _seal(row, _credentials(config.api_key, config.headers), sealer)
    session.add(row)
    touch(provider)
    await session.flush()
    return row


async def update_resource(
    session: AsyncSession,
    provider: Provider,
    row: ProviderResource,
    changes: Mapping[str, Any],
    sealer: Sealer,
) -> list[str]:
    """A partial change, validated whole; `api_key` and `headers` replace the stored ones
    when given (`api_key: null` removes the key), and stay as they are when left out."""
    refuse_codex_key(provider, changes.get("api_key"))
    if "name" in changes and changes["name"] != row.name:
        others = await resources_of(session, provider.id)
        if any(r.name == changes["name"] and r.id != row.id for r in others):
            raise Conflict(f"name: the provider has a resource {changes['name']!r}", "name")
    config = parse({**current_config(row), **changes})
    values = {**_values(config), "name": config.name}
    changed = assign(row, values)
    if any(name in changes for name in _SECRET_FIELDS):
        stored, readable = _stored(row, sealer)
        old = stored or {}
        api_key = changes["api_key"] if "api_key" in changes else old.get("api_key")
        headers = config.headers if "headers" in changes else old.get("headers") or {}
        wanted = _credentials(api_key, headers)
        if wanted != stored or not readable:
            _seal(row, wanted, sealer)
            changed.append("credentials")
    if changed:
        touch(provider)
    await session.flush()
    return changed


async def delete_resource(session: AsyncSession, provider: Provider, row: ProviderResource) -> None:
    await session.delete(row)
    touch(provider)
    await session.flush()


async def sync_resources(
    session: AsyncSession,
    provider: Provider,
    wanted: Sequence[ResourceConfig],
    sealer: Sealer,
) -> list[str]:
    """Make the provider's resources exactly `wanted` (what apply does): matched by name,
    credentials re-sealed only when they differ, others deleted. What changed, as
    "added NAME" / "changed NAME" / "removed NAME"."""
    current = {r.name: r for r in await resources_of(session, provider.id)}
    changes: list[str] = []
    for position, config in enumerate(wanted):
        row = current.pop(config.name, None)
        created = row is None
        if row is None:
            row = ProviderResource(id=new_id(), provider_id=provider.id, name=config.name)
            session.add(row)
        changed = assign(row, {**_values(config), "position": position})
        wanted_credentials = _credentials(config.api_key, config.headers)
        stored, readable = (None, False) if created else _stored(row, sealer)
        if created or not readable or stored != wanted_credentials:
            _seal(row, wanted_credentials, sealer)
            changed.append("credentials")
        if created:
            changes.append(f"added {config.name}")
        elif changed:
            changes.append(f"changed {config.name}")
    for name, row in current.items():
        await session.delete(row)
        changes.append(f"removed {name}")
    if changes:
        touch(provider)
    await session.flush()
    return changes
