"""Checks a built snapshot must pass before it may replace the one in use.

The builder already refuses rows it cannot turn into records (a route naming a missing
provider, a credential the secret key cannot open, a binding to a missing policy). These are
the checks across records: each would otherwise surface later, on some request, as a 500 or
a silently different route. `apply` checks the same things in the file; this is the last
line for whatever reached the database another way (the admin API, a hand edit, a replica
running an older version), and it runs before the swap, so a failure keeps the last good
snapshot (holder.py).
"""

from __future__ import annotations

from collections.abc import Container, Iterator

from llmrelay.config.kinds import ProviderType, Strategy
from llmrelay.snapshot.model import ModelSnap, ProviderSnap, Snapshot

_PROVIDER_TYPES = frozenset(t.value for t in ProviderType)
_STRATEGIES = frozenset(s.value for s in Strategy)
#: At most this many problems are named in the error (the rest are counted).
_NAMED = 10


class SnapshotInvalid(RuntimeError):
    """The snapshot is internally inconsistent; the message names each problem."""


def validate(snapshot: Snapshot) -> None:
    found = list(problems(snapshot))
    if found:
        more = f" (and {len(found) - _NAMED} more)" if len(found) > _NAMED else ""
        raise SnapshotInvalid("; ".join(found[:_NAMED]) + more)


def problems(snapshot: Snapshot) -> Iterator[str]:
    providers: dict[str, ProviderSnap] = {}
    for tenant_models in snapshot.models.values():
        for model in tenant_models.values():
            yield from _model_problems(model, tenant_models.keys())
            providers.update((route.provider.id, route.provider) for route in model.routes)
    for provider in providers.values():
        if provider.type not in _PROVIDER_TYPES:
            yield f"provider {provider.slug!r}: unknown type {provider.type!r}"
    policies = {key.policy.id: key.policy for key in snapshot.keys_by_digest.values() if key.policy}
    for policy in policies.values():
        if policy.strategy is not None and policy.strategy not in _STRATEGIES:
            yield f"routing policy {policy.name!r}: unknown strategy {policy.strategy!r}"


def _model_problems(model: ModelSnap, names: Container[str]) -> Iterator[str]:
    where = f"model {model.name!r}"
    if model.strategy not in _STRATEGIES:
        yield f"{where}: unknown strategy {model.strategy!r}"
    for field, targets in (
        ("fallbacks", model.fallbacks),
        ("context_fallbacks", model.context_fallbacks),
    ):
        for target in targets:
            if target not in names:
                yield f"{where}: {field} names a missing model {target!r}"
    for route in model.routes:
        if route.weight < 0:
            yield f"{where}: route to {route.provider.slug!r} has a negative weight {route.weight}"
