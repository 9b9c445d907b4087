"""Responses the gateway stores itself: those a chat-only provider answered (the Responses
request went through chat, so no provider keeps them). `GET /v1/responses/{id}` reads one
back, a cancel is refused as OpenAI refuses it for a finished synchronous response, and
`previous_response_id` naming one continues it: the stored conversation (its input items
and its output) comes before the new input, and the call goes through chat as any other.

Each entry is the Response, the input items that led to it and its project, under
`s:RESPONSE_ID` for `RESPONSE_HOME_TTL_S` (an hour). Shared by the replicas (Redis, or
PostgreSQL's `shared_entries`), sealed with LLMRELAY_SECRET_KEY as job payloads are
(AES-GCM, context `stored-response:ID`): a copy of Redis or of the database shows no text.
One process on SQLite without Redis keeps them in memory (the last 2,000, unsealed).
`store: false` keeps nothing. A stored Response gets an id of the gateway's own
(`resp_` + 32 hex digits), never one derived from the upstream's chat id.

Streamed answers are kept too (gateway/responses_relay.py): the stream's Response carries the
gateway's id from its first event, and is kept at its `response.completed` (or
`response.incomplete`) event, before that event reaches the client. A stream finished by a
mid-stream rescue (its last events written by the gateway) is not kept.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Final

import orjson

from llmrelay.shared.bindings import RESPONSE_HOME_TTL_S
from llmrelay.shared.store import Entries
from llmrelay.shared.writer import WriteBehind
from llmrelay.store.crypto import Sealer

#: (project id, the Response, the input items that led to it).
Stored = tuple[str | None, dict[str, Any], list[Any]]

#: Kept in memory by a replica for what it stored itself (no unsealing on its own reads).
_RECENT_MAX: Final = 1_000


#: The most a process keeps in memory without a shared store: each entry holds a whole
#: conversation (an agent's can be hundreds of kB).
LOCAL_CONVERSATIONS_MAX: Final = 2_000


class LocalConversations:
    def __init__(self, max_entries: int = LOCAL_CONVERSATIONS_MAX) -> None:
        self._held: OrderedDict[str, Stored] = OrderedDict()
        self._max = max_entries

    def keep(self, response_id: str, stored: Stored) -> None:
        held = self._held
        held[response_id] = stored
        held.move_to_end(response_id)
        while len(held) > self._max:
            held.popitem(last=False)

    async def get(self, response_id: str) -> Stored | None:
        return self._held.get(response_id)


class SharedConversations:
    def __init__(self, entries: Entries, writer: WriteBehind, sealer: Sealer) -> None:
        self._entries = entries
        self._writer = writer
        self._sealer = sealer
        self._recent = LocalConversations(_RECENT_MAX)

    def keep(self, response_id: str, stored: Stored) -> None:
        self._recent.keep(response_id, stored)
        plain = orjson.dumps(list(stored))
        sealed = self._sealer.seal(plain, context=_context(response_id))
        self._writer.put("s:" + response_id, sealed, RESPONSE_HOME_TTL_S)

    async def get(self, response_id: str) -> Stored | None:
        recent = await self._recent.get(response_id)
        if recent is not None:
            return recent
        sealed = await self._entries.get("s:" + response_id)
        if sealed is None:
            return None
        project, response, items = orjson.loads(
            self._sealer.open(sealed, context=_context(response_id))
        )
        return project, response, items


def _context(response_id: str) -> str:
    return "stored-response:" + response_id


def as_items(given: Any) -> list[Any]:
    """A Responses `input` as a list of items (a string is one user message)."""
    if isinstance(given, str):
        return [{"type": "message", "role": "user", "content": given}]
    return list(given) if isinstance(given, list) else []


def continued(stored: Stored, payload: dict[str, Any]) -> dict[str, Any]:
    """`payload` continuing the stored Response: its conversation, then the new input."""
    _, response, items = stored
    body = {k: v for k, v in payload.items() if k != "previous_response_id"}
    body["input"] = [*items, *response.get("output", []), *as_items(payload.get("input"))]
    return body
