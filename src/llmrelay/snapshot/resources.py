"""Provider resources in the snapshot: each account as a ProviderSnap of its own (the
provider with the account's credential in place of its own) and each route of such a
provider as one variant per account, so the executor sends an attempt to a variant exactly
as it sends one to a route, with nothing to look up per request.

A provider whose resources are all disabled has none left to call with: its routes are
built disabled (its own credential is not a silent stand-in for accounts the operator
switched off). A provider without any resource row is untouched: its credential is its one
implicit resource, and its routes carry no variants."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace
from types import MappingProxyType

from llmrelay.snapshot.model import ProviderSnap, ResourceSnap, RouteSnap
from llmrelay.store.credentials import open_credentials
from llmrelay.store.crypto import Sealer
from llmrelay.store.models import ProviderResource


def attach(
    providers: dict[str, ProviderSnap], rows: Iterable[ProviderResource], sealer: Sealer
) -> frozenset[str]:
    """Give each provider in `providers` (replaced in place) its enabled resources; the
    ids of providers that have resources but none enabled."""
    by_provider: dict[str, list[ProviderResource]] = defaultdict(list)
    for row in rows:
        by_provider[row.provider_id].append(row)
    exhausted = set()
    for provider_id, resource_rows in by_provider.items():
        provider = providers.get(provider_id)
        if provider is None:
            continue
        enabled = sorted(
            (row for row in resource_rows if not row.disabled),
            key=lambda row: (row.priority, row.position, row.name),
        )
        if not enabled:
            exhausted.add(provider_id)
            continue
        providers[provider_id] = replace(
            provider, resources=tuple(_resource(provider, row, sealer) for row in enabled)
        )
    return frozenset(exhausted)


def _resource(provider: ProviderSnap, row: ProviderResource, sealer: Sealer) -> ResourceSnap:
    credentials = open_credentials(row, sealer) or {}
    calling = replace(
        provider,
        api_key=credentials.get("api_key"),
        headers=MappingProxyType({**provider.headers, **(credentials.get("headers") or {})}),
        resources=(),
        resource_id=row.id,
    )
    return ResourceSnap(
        id=row.id,
        name=row.name,
        priority=row.priority,
        weight=row.weight,
        rpm=row.rpm,
        tpm=row.tpm,
        provider=calling,
    )


def with_variants(route: RouteSnap) -> RouteSnap:
    """The route with one variant per resource of its provider (unchanged without any)."""
    resources = route.provider.resources
    if not resources:
        return route
    variants = tuple(
        replace(
            route,
            provider=resource.provider,
            resource=resource,
            breaker_key=resource.breaker_key,
            variants=(),
        )
        for resource in resources
    )
    return replace(route, variants=variants)
