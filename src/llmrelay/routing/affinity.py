"""Sticky routing: a conversation stays on the route that served it.

A conversation (gateway/conversation.py names it: the session header an agent sends, else
the key and its prompt's first turn) keeps hitting the same route (provider, credential,
upstream model) while that route is healthy, so the provider's prompt cache stays warm. A
binding moves only when its route is not usable (its breaker is not closed, it is not a
candidate any more, or it failed this time and another route served): the strategy's order
stands then, and the route that serves becomes the binding. An idle binding expires after
its model's `affinity.ttl_s`.

On a route whose provider has several accounts (resources) and keeps conversations per
account (providers/presets.py `account_bound`: openai_codex), the binding names the account
too (`binding`: "ROUTE/RESOURCE"): the conversation goes back to that account first, and
moves only when that account is unavailable (its breaker open, its usage limit reached, its
quota spent, or it failed this time: then the account that serves becomes the binding).

`AffinityStore` is what the gateway needs from the bindings' home. `SessionAffinity` keeps
them in this process (bounded, least recently used forgotten first); a store shared by the
replicas (Redis) fits the same two calls: `bound` is awaited on the request path, `remember`
returns at once (a shared store writes behind).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final, Protocol, TypeVar

R = TypeVar("R")

#: How long an idle binding lasts when its model says nothing (ModelConfig.affinity.ttl_s).
DEFAULT_TTL_S: Final = 3600.0


class AffinityStore(Protocol):
    async def bound(self, key: str) -> str | None:
        """The route id bound to conversation `key`, or None (never bound, or expired)."""
        ...

    def remember(self, key: str, route_id: str, ttl_s: float) -> None:
        """Bind `key` to `route_id` (again: its idle time starts over) for `ttl_s`."""
        ...


class SessionAffinity:
    """The bindings of this process."""

    def __init__(
        self,
        *,
        max_sessions: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        #: key -> (route id, when the binding expires), least recently used first.
        self._routes: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._max = max_sessions
        self._clock = clock

    async def bound(self, key: str) -> str | None:
        return self.route_for(key)

    def route_for(self, key: str) -> str | None:
        entry = self._routes.get(key)
        if entry is None:
            return None
        route_id, expires = entry
        if self._clock() > expires:
            del self._routes[key]
            return None
        return route_id

    def remember(self, key: str, route_id: str, ttl_s: float = DEFAULT_TTL_S) -> None:
        routes = self._routes
        routes[key] = (route_id, self._clock() + ttl_s)
        routes.move_to_end(key)
        while len(routes) > self._max:
            routes.popitem(last=False)

    def __len__(self) -> int:
        return len(self._routes)


def binding(route_id: str, resource_id: str | None) -> str:
    """What a conversation is bound to: its route, and on a route with resources the
    resource (account) that served."""
    return route_id if resource_id is None else f"{route_id}/{resource_id}"


def split(bound: str) -> tuple[str, str | None]:
    """A binding's route id and resource id (None when it names no resource)."""
    route_id, _, resource_id = bound.partition("/")
    return route_id, resource_id or None


def prefer(
    route_id: str,
    ordered: list[R],
    route_id_of: Callable[[R], str],
    usable: Callable[[str], bool],
) -> list[R]:
    """`ordered` with the bound route first, when it is there and `usable`."""
    if not ordered or route_id_of(ordered[0]) == route_id:
        return ordered
    for index, route in enumerate(ordered):
        if route_id_of(route) == route_id:
            if not usable(route_id):
                return ordered
            return [route, *ordered[:index], *ordered[index + 1 :]]
    return ordered
