"""A route targets a model its provider offers: where the provider's inventory is known
(listed by discovery or set through the admin API: `providers.model_inventory`), a route
added or changed through the admin API must name an upstream model in it.

Where the rule does not apply, and why:
- a provider whose inventory was never listed (null): nothing to check against, so any
  upstream model is taken (listing it, by discovery or `PUT /providers/{id}/models`, turns
  the rule on);
- `llmrelay apply`: the file is the operator's whole declaration, often applied before any
  listing, and a file that applied once must apply again unchanged after discovery ran;
- the exceptions in INVENTORY_EXEMPT: upstream models a provider type serves without
  listing them (the subscription-backed virtual image model `codex-gpt-image-2` routes to
  `gpt-image-2` on an `openai_codex` provider, whose model list never names it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from typing import Final

from llmrelay.admin.kit.problems import Invalid
from llmrelay.config.schema import RouteConfig
from llmrelay.store.models import Provider

#: provider type -> upstream models a route may name though no inventory lists them.
INVENTORY_EXEMPT: Final[Mapping[str, frozenset[str]]] = {
    "openai_codex": frozenset({"gpt-image-2"}),
}


def offered(provider: Provider, upstream_model: str) -> bool:
    """Whether a route of `provider` may target `upstream_model`."""
    inventory = provider.model_inventory
    if inventory is None or upstream_model in INVENTORY_EXEMPT.get(provider.type, ()):
        return True
    return any(entry.get("id") == upstream_model for entry in inventory)


def check(provider: Provider, upstream_model: str, field: str = "upstream_model") -> None:
    """Invalid (400, naming `field`) when the provider's inventory lacks the model."""
    if not offered(provider, upstream_model):
        raise Invalid(
            f"{field}: provider {provider.slug!r} does not offer {upstream_model!r} (its model"
            " inventory lists what it offers: GET /api/admin/providers/{id}/models)",
            field,
        )


def check_routes(
    wanted: Sequence[RouteConfig],
    providers: Mapping[str, Provider],
    kept: Set[tuple[str, str]] = frozenset(),
) -> None:
    """`check` for a model's complete route list (a create, or a change that lists them);
    routes it has already, (provider id, upstream model) in `kept`, stay as they are."""
    for index, route in enumerate(wanted):
        provider = providers.get(route.provider)
        if provider is not None and (provider.id, route.upstream_model) not in kept:
            check(provider, route.upstream_model, f"routes[{index}].upstream_model")
