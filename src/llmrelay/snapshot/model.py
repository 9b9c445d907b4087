"""Frozen records of one configuration generation. Built once, shared by every request."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from llmrelay.guardrails.policy import Guard
from llmrelay.metering.cost import Price

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: (provider type, upstream model) of routes that generate images (Operation.IMAGES): a model
#: whose routes all are is an image model (ModelSnap.image).
IMAGE_ROUTES: Final = frozenset({("openai_codex", "gpt-image-2")})


@dataclass(frozen=True, slots=True)
class ProviderSnap:
    id: str
    slug: str
    type: str
    base_url: str | None
    api_key: str | None
    headers: Mapping[str, str]
    timeout_s: float
    connect_timeout_s: float
    first_token_timeout_s: float
    stream_idle_timeout_s: float
    api_version: str | None
    region: str | None = None
    #: An OpenAI-compatible server's preset name (providers/presets.py).
    preset: str | None = None
    #: Its base URL was set by a tenant's admin, not the operator: the outbound address
    #: policy for tenants applies to every connection made to it (outbound/).
    tenant_declared: bool = False
    #: Its accounts (provider resources) that are not disabled, by (priority, position);
    #: empty: the provider's own credential is its one implicit resource.
    resources: tuple[ResourceSnap, ...] = ()
    #: Set on the copy a resource calls with (ResourceSnap.provider): that resource's id.
    resource_id: str | None = None


@dataclass(frozen=True, slots=True)
class ResourceSnap:
    """One account of a provider: its own credential, health (the breaker keyed
    `breaker_key`), priority and quota buckets (gateway/resources.py)."""

    id: str
    name: str
    priority: int
    weight: float
    #: Requests and tokens per minute (None: no bucket).
    rpm: int | None
    tpm: int | None
    #: The provider as this account calls it: the account's api_key and headers.
    provider: ProviderSnap

    @property
    def breaker_key(self) -> str:
        return "resource:" + self.id


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a route's upstream model is known to do. None is unknown, and an unknown
    capability is never held against a route."""

    tools: bool | None = None
    images: bool | None = None
    json_schema: bool | None = None
    streaming: bool | None = None
    #: The longest prompt it takes, in tokens.
    context_window: int | None = None


@dataclass(frozen=True, slots=True)
class RouteSnap:
    id: str
    provider: ProviderSnap
    upstream_model: str
    priority: int
    weight: float
    tag: str | None
    #: Never tried: an administrator's switch (config `disabled`), or `denied`.
    disabled: bool
    position: int
    capabilities: Capabilities | None = None
    #: The route's own price (config `routes[].pricing`), before the model's.
    price: Price | None = None
    #: Its provider's health probe found it unavailable (the snapshot's denylist): left out
    #: of routing like a disabled route (`disabled` is set too) until a probe succeeds.
    denied: bool = False
    #: The provider resource this attempt target uses (set on `variants` only).
    resource: ResourceSnap | None = None
    #: One copy of this route per resource of its provider, by resource priority, each
    #: calling with its resource's credential; empty without resources.
    variants: tuple[RouteSnap, ...] = ()
    #: The breaker that judges it: the route's own (its id), or its resource's.
    breaker_key: str = ""

    def __post_init__(self) -> None:
        if not self.breaker_key:
            key = self.id if self.resource is None else self.resource.breaker_key
            object.__setattr__(self, "breaker_key", key)


@dataclass(frozen=True, slots=True)
class ModelSnap:
    id: str
    tenant_id: str
    name: str
    strategy: str
    #: Every route, ordered by (priority, position); disabled ones included and flagged.
    routes: tuple[RouteSnap, ...]
    retry_attempts: int
    retry_backoff_ms: int
    deadline_s: float
    fallbacks: tuple[str, ...]
    context_fallbacks: tuple[str, ...]
    embedding: bool
    price: Price | None
    created: int
    #: Sticky routing: how long an idle conversation keeps its route; None: off.
    affinity_ttl_s: float | None = 3600.0
    #: Mid-stream rescue of chat streams (gateway/rescue.py): off unless opted in.
    stream_rescue: bool = False
    #: The routes not disabled, same order (worked out once: every request starts from it).
    enabled_routes: tuple[RouteSnap, ...] = field(init=False, compare=False, repr=False)
    #: Whether any route declares capabilities (else requests are not examined for them).
    capability_aware: bool = field(init=False, compare=False, repr=False)
    #: Sticky routing acts: it is on and there is more than one route, or more than one
    #: account of a route's openai_codex provider (conversations stick to its account), to
    #: choose from (else a request derives no conversation key at all).
    sticky: bool = field(init=False, compare=False, repr=False)
    #: Some enabled route's provider has resources (else attempts go to routes as they are).
    resourced: bool = field(init=False, compare=False, repr=False)
    #: An image model: served on /v1/images/generations only, because every route targets
    #: an image model upstream (IMAGE_ROUTES: the subscription-backed `gpt-image-2` of an
    #: openai_codex provider, the virtual model `codex-gpt-image-2`).
    image: bool = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        enabled = tuple(r for r in self.routes if not r.disabled)
        object.__setattr__(self, "enabled_routes", enabled)
        aware = any(r.capabilities is not None for r in enabled)
        object.__setattr__(self, "capability_aware", aware)
        choices = len(enabled) > 1 or any(
            len(r.variants) > 1 and r.provider.type == "openai_codex" for r in enabled
        )
        object.__setattr__(self, "sticky", self.affinity_ttl_s is not None and choices)
        object.__setattr__(self, "resourced", any(r.variants for r in enabled))
        image = bool(self.routes) and all(
            (r.provider.type, r.upstream_model) in IMAGE_ROUTES for r in self.routes
        )
        object.__setattr__(self, "image", image)


@dataclass(frozen=True, slots=True)
class PolicySnap:
    """A routing policy: a route passes when every allowlist that is set holds the route's
    value (a route without a tag or a provider without a region fails a tag or region
    list); `strategy`, when set, replaces the model's."""

    id: str
    name: str
    providers: frozenset[str] | None
    tags: frozenset[str] | None
    regions: frozenset[str] | None
    strategy: str | None

    def allows(self, route: RouteSnap) -> bool:
        return (
            (self.providers is None or route.provider.slug in self.providers)
            and (self.tags is None or route.tag in self.tags)
            and (self.regions is None or route.provider.region in self.regions)
        )


@dataclass(frozen=True, slots=True)
class Limits:
    rpm: int | None = None
    tpm: int | None = None
    concurrency: int | None = None
    monthly_budget_micros: int | None = None


@dataclass(frozen=True, slots=True)
class ProjectSnap:
    id: str
    tenant_id: str
    name: str
    allowed_models: frozenset[str] | None
    limits: Limits


@dataclass(frozen=True, slots=True)
class KeySnap:
    id: str
    name: str
    tenant_id: str
    project: ProjectSnap
    status: str
    #: Expiry as a Unix timestamp (compared with time.time() on every request).
    expires_at: float | None
    #: Key list ∩ project list; None means every model of the tenant.
    allowed_models: frozenset[str] | None
    ip_allowlist: tuple[IPNetwork, ...]
    limits: Limits
    #: The APIs the key may call (apikeys.SCOPES names); None means every API, so a key
    #: without scopes costs one attribute check and a scoped one a frozenset lookup.
    scopes: frozenset[str] | None = None
    #: The routing policy in force: the key's binding, else the project's, else the global
    #: one (the most specific alone); None when none is bound.
    policy: PolicySnap | None = None
    #: Whether the request and response bodies of its requests are kept (config `capture:
    #: full`; gateway/capture.py): a bool, so a key that does not capture costs one check.
    capture: bool = False
    #: Whether its tenant's wallet is prepaid (billing/): each request reserves before the
    #: provider call and settles after it. A bool, so a key that is not costs one check.
    prepaid: bool = False
    #: The guardrail rules in force (its bindings: global, its project's, its own; see
    #: guardrails/policy.py); None when none is: such a key costs one attribute check.
    guard: Guard | None = None

    def allows_model(self, name: str) -> bool:
        return self.allowed_models is None or name in self.allowed_models


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    failures: int = 3
    cooldown_s: float = 10.0
    #: Never under `cooldown_s` where it is used (routing/breaker.py).
    max_cooldown_s: float = 30.0


@dataclass(frozen=True, slots=True)
class Snapshot:
    generation: int
    built_at: float
    keys_by_digest: Mapping[str, KeySnap] = field(default_factory=lambda: MappingProxyType({}))
    #: tenant id -> model name -> model
    models: Mapping[str, Mapping[str, ModelSnap]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    breaker: BreakerSettings = field(default_factory=BreakerSettings)
    #: When this snapshot stops being right without any change to the config: the Unix time
    #: the next scheduled price version starts (None when none is scheduled). Nothing moves
    #: the generation then, so the holder rebuilds at that moment (snapshot/reload.py).
    rebuild_at: float | None = None
    #: Providers their health probe found unavailable (table provider_health): their routes
    #: are built disabled (`RouteSnap.denied`), so no request tries them.
    denied_providers: frozenset[str] = frozenset()
    #: tenant id -> the model its preferences name as `default_model`: what a request for the
    #: model `default` gets when the tenant has no model of that name (gateway/requests.py).
    #: A tenant's `fallback_model` needs no field: it is appended to each of its models'
    #: `fallbacks` at build time (snapshot/builder.py), so it costs a request nothing.
    default_models: Mapping[str, ModelSnap] = field(default_factory=lambda: MappingProxyType({}))

    def model(self, tenant_id: str, name: str) -> ModelSnap | None:
        return self.models.get(tenant_id, MappingProxyType({})).get(name)

    def tenant_models(self, tenant_id: str) -> Mapping[str, ModelSnap]:
        return self.models.get(tenant_id, MappingProxyType({}))
