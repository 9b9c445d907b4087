"""Session affinity: a conversation stays on the route that served it.

Clients that send `x-llmrelay-session-id` keep hitting the same route (provider, credential,
upstream model) while it is healthy, so provider-side prompt caches stay warm. The map is per
process, bounded, and forgets sessions idle for `ttl_s`; a route that is not a candidate any
more, or whose breaker is not closed, is simply not preferred (the strategy's order stands).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar

R = TypeVar("R")


class SessionAffinity:
    def __init__(
        self,
        *,
        max_sessions: int = 100_000,
        ttl_s: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._routes: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._max = max_sessions
        self._ttl_s = ttl_s
        self._clock = clock

    def route_for(self, session: str) -> str | None:
        entry = self._routes.get(session)
        if entry is None:
            return None
        route_id, seen = entry
        if self._clock() - seen > self._ttl_s:
            del self._routes[session]
            return None
        return route_id

    def remember(self, session: str, route_id: str) -> None:
        routes = self._routes
        routes[session] = (route_id, self._clock())
        routes.move_to_end(session)
        while len(routes) > self._max:
            routes.popitem(last=False)

    def prefer(
        self,
        session: str,
        ordered: list[R],
        route_id_of: Callable[[R], str],
        usable: Callable[[str], bool],
    ) -> list[R]:
        """`ordered` with the session's route first, when it is there and `usable`."""
        route_id = self.route_for(session)
        if route_id is None or not ordered or route_id_of(ordered[0]) == route_id:
            return ordered
        for index, route in enumerate(ordered):
            if route_id_of(route) == route_id:
                if not usable(route_id):
                    return ordered
                return [route, *ordered[:index], *ordered[index + 1 :]]
        return ordered

    def __len__(self) -> int:
        return len(self._routes)
