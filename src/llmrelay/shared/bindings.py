"""Conversation bindings and stored responses' homes, shared by the replicas.

`SharedAffinity` is routing/affinity.py's `AffinityStore` over shared entries: a binding
this process knows (it made it, or read it less than `LOCAL_FRESH_S` ago) answers from
memory; any other is read from the shared store once (one Redis GET, or one PostgreSQL
SELECT without Redis). `remember` returns at once and writes behind; a turn that keeps its
route rewrites the shared entry only when a tenth of its time to live has passed (the idle
time starts over without a write per turn).

`ResponseHomes` maps a Response's id to the route that holds it and the project it belongs
to (`GET /v1/responses/{id}`, cancel, `previous_response_id` through any replica), with the
same local cache and the same time to live as sticky bindings' default (an hour).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

import orjson

from llmrelay.shared.store import Entries
from llmrelay.shared.writer import WriteBehind

#: A binding read from the shared store is trusted from memory this long, then read again
#: (another replica may have moved the conversation since).
LOCAL_FRESH_S: Final = 30.0
#: How long a stored response's home is kept.
RESPONSE_HOME_TTL_S: Final = 3600.0
#: The most entries each local cache keeps (least recently used forgotten first).
LOCAL_MAX: Final = 100_000


class _LocalCache:
    """key -> (value, trusted until, rewritten at), bounded."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._items: OrderedDict[str, tuple[str, float, float]] = OrderedDict()
        self._clock = clock

    def get(self, key: str) -> str | None:
        entry = self._items.get(key)
        if entry is None:
            return None
        if self._clock() > entry[1]:
            del self._items[key]
            return None
        return entry[0]

    def written_at(self, key: str, value: str) -> float | None:
        entry = self._items.get(key)
        return entry[2] if entry is not None and entry[0] == value else None

    def put(self, key: str, value: str, trusted_s: float, written_at: float) -> None:
        items = self._items
        items[key] = (value, self._clock() + trusted_s, written_at)
        items.move_to_end(key)
        while len(items) > LOCAL_MAX:
            items.popitem(last=False)


class SharedAffinity:
    """Conversation bindings shared by the replicas (see the module's docstring)."""

    def __init__(
        self, entries: Entries, writer: WriteBehind, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._entries = entries
        self._writer = writer
        self._clock = clock
        self._local = _LocalCache(clock)

    async def bound(self, key: str) -> str | None:
        known = self._local.get(key)
        if known is not None:
            return known
        try:
            found = await self._entries.get("a:" + key)
        except Exception:  # noqa: BLE001 - no shared answer: the strategy's own order
            return None
        if found is not None:
            self._local.put(key, found, LOCAL_FRESH_S, 0.0)
        return found

    def remember(self, key: str, route_id: str, ttl_s: float) -> None:
        now = self._clock()
        written = self._local.written_at(key, route_id)
        if written is not None and now - written < ttl_s / 10:
            return  # the same route, rewritten recently: the shared entry lives on
        self._local.put(key, route_id, min(ttl_s, LOCAL_FRESH_S), now)
        self._writer.put("a:" + key, route_id, ttl_s)


class ResponseHomes:
    """Response id -> (route id, project id), shared by the replicas."""

    def __init__(
        self, entries: Entries, writer: WriteBehind, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._entries = entries
        self._writer = writer
        self._local = _LocalCache(clock)

    def remember(self, response_id: str, route_id: str, project_id: str | None) -> None:
        value = orjson.dumps([route_id, project_id]).decode()
        self._local.put(response_id, value, RESPONSE_HOME_TTL_S, 0.0)
        self._writer.put("r:" + response_id, value, RESPONSE_HOME_TTL_S)

    async def home(self, response_id: str) -> tuple[str, str | None] | None:
        value = self._local.get(response_id)
        if value is None:
            value = await self._entries.get("r:" + response_id)
            if value is None:
                return None
            self._local.put(response_id, value, LOCAL_FRESH_S, 0.0)
        route_id, project_id = orjson.loads(value)
        return str(route_id), None if project_id is None else str(project_id)

    async def written(self) -> None:
        await self._writer.flush()


class LocalHomes:
    """Response homes of this process alone: one process on SQLite without Redis (no task,
    no serialisation: the default setup pays nothing for sharing)."""

    def __init__(self, max_entries: int = LOCAL_MAX) -> None:
        self._held: OrderedDict[str, tuple[str, str | None]] = OrderedDict()
        self._max = max_entries

    def remember(self, response_id: str, route_id: str, project_id: str | None) -> None:
        held = self._held
        held[response_id] = (route_id, project_id)
        held.move_to_end(response_id)
        while len(held) > self._max:
            held.popitem(last=False)

    async def home(self, response_id: str) -> tuple[str, str | None] | None:
        return self._held.get(response_id)

    async def written(self) -> None:
        pass
