"""Chat Completions chunks -> OpenAI Responses stream events, one chunk at a time.

Chat streams flat deltas: text, refusal, tool calls numbered among themselves, a
finish_reason, and (when asked for) usage in a last chunk without choices. The Responses
API streams semantic events about numbered output items, each opened (`output_item.added`),
filled by deltas and closed (`output_item.done`) before the next one opens, every event
carrying a `sequence_number`; the final `response.completed` holds the whole response. The
SDK's stream helper checks that items are opened before their deltas and closed with the
same id, so each item's id is fixed when it opens.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from llmrelay.protocols.responses_chat import (
    base_id,
    function_call_item,
    message_item,
    output_text_part,
    refusal_part,
    response_object,
    response_status,
    responses_usage_from_chat,
)

__all__ = ["ChatStreamToResponses"]

Event = tuple[str, dict[str, Any]]


@dataclass
class _Part:
    """A content part of the message item; text is kept in pieces and joined once."""

    kind: str  # "output_text" or "refusal"
    pieces: list[str] = field(default_factory=list)

    def wire(self) -> dict[str, Any]:
        text = "".join(self.pieces)
        return output_text_part(text) if self.kind == "output_text" else refusal_part(text)


@dataclass
class _Item:
    """An output item: a message (with parts) or a function call (with argument pieces)."""

    kind: str  # "message" or "function_call"
    id: str
    output_index: int
    call_id: str = ""
    name: str = ""
    parts: list[_Part] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)
    status: str = "in_progress"

    def wire(self) -> dict[str, Any]:
        if self.kind == "message":
            return message_item(self.id, [part.wire() for part in self.parts], self.status)
        arguments = "".join(self.arguments)
        return function_call_item(self.id, self.call_id, self.name, arguments, self.status)


class ChatStreamToResponses:
    """chat.completion.chunk dicts -> (event type, event data) pairs.

    Items are closed as soon as the next one opens or the finish_reason arrives, as the
    Responses API does; `response.completed` waits for `finish()` because Chat sends usage
    after the finish_reason, in a chunk of its own.
    """

    def __init__(self, *, model: str, request: dict[str, Any]) -> None:
        self.model = model
        self.request = request
        self._sequence = 0
        self._started = False
        self._done = False
        self._base = ""
        self._created_at = int(time.time())
        self._items: list[_Item] = []
        self._open: _Item | None = None
        self._calls: dict[int, _Item] = {}  # Chat tool call index -> its output item
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] | None = None

    def feed(self, chunk: dict[str, Any]) -> list[Event]:
        if self._done:
            return []
        events = self._start(chunk)
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            # reasoning_content (DeepSeek, Qwen, vLLM) is not relayed: a reasoning item's
            # summary is not the raw chain of thought, and the whole answer drops it too.
            for kind, key in (("output_text", "content"), ("refusal", "refusal")):
                if isinstance(delta.get(key), str) and delta[key]:
                    events += self._text(kind, delta[key])
            for call in delta.get("tool_calls") or []:
                if isinstance(call, dict):
                    events += self._tool_call(call)
            if choice.get("finish_reason"):
                self._finish_reason = str(choice["finish_reason"])
                events += self._close()
        return events

    def finish(self) -> list[Event]:
        """The Chat stream ended: close what is open and hand over the whole response."""
        if self._done:
            return []
        events = self._start(None) + self._close()
        status, incomplete = response_status(self._finish_reason)
        response = self._response(status, incomplete_details=incomplete)
        self._done = True
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return [*events, self._event(kind, response=response)]

    def error(self, message: str) -> list[Event]:
        """The upstream failed mid-stream. Open items are left unfinished (the failed
        response lists them as incomplete): their content is not the model's last word."""
        if self._done:
            return []
        events = self._start(None)
        for item in self._items:
            if item.status == "in_progress":
                item.status = "incomplete"
        response = self._response("failed", error={"code": "server_error", "message": message})
        self._done = True
        return [*events, self._event("response.failed", response=response)]

    def _event(self, kind: str, **data: Any) -> Event:
        event = {"type": kind, **data, "sequence_number": self._sequence}
        self._sequence += 1
        return kind, event

    def _response(self, status: str, **details: Any) -> dict[str, Any]:
        return response_object(
            response_id=f"resp_{self._base}",
            created_at=self._created_at,
            model=self.model,
            request=self.request,
            status=status,
            output=[item.wire() for item in self._items],
            usage=responses_usage_from_chat(self._usage) if status != "in_progress" else None,
            **details,
        )

    def _start(self, chunk: dict[str, Any] | None) -> list[Event]:
        if self._started:
            return []
        self._started = True
        self._base = base_id(chunk.get("id") if chunk else None)
        created = chunk.get("created") if chunk else None
        if isinstance(created, int) and not isinstance(created, bool):
            self._created_at = created
        return [
            self._event("response.created", response=self._response("in_progress")),
            self._event("response.in_progress", response=self._response("in_progress")),
        ]

    def _open_item(self, item: _Item) -> list[Event]:
        events = self._close()
        self._items.append(item)
        self._open = item
        events.append(
            self._event(
                "response.output_item.added", output_index=item.output_index, item=item.wire()
            )
        )
        return events

    def _text(self, kind: str, text: str) -> list[Event]:
        events: list[Event] = []
        item = self._open
        if item is None or item.kind != "message":
            item = _Item("message", f"msg_{self._base}", len(self._items))
            if any(other.kind == "message" for other in self._items):
                item.id = f"msg_{self._base}_{item.output_index}"
            events += self._open_item(item)
        if not item.parts or item.parts[-1].kind != kind:
            if item.parts:
                events += self._close_part(item)
            item.parts.append(_Part(kind))
            events.append(
                self._event(
                    "response.content_part.added",
                    item_id=item.id,
                    output_index=item.output_index,
                    content_index=len(item.parts) - 1,
                    part=item.parts[-1].wire(),
                )
            )
        item.parts[-1].pieces.append(text)
        fields: dict[str, Any] = {
            "item_id": item.id,
            "output_index": item.output_index,
            "content_index": len(item.parts) - 1,
            "delta": text,
        }
        if kind == "output_text":
            events.append(self._event("response.output_text.delta", **fields, logprobs=[]))
        else:
            events.append(self._event("response.refusal.delta", **fields))
        return events

    def _tool_call(self, call: dict[str, Any]) -> list[Event]:
        index = call.get("index", 0)
        function = call.get("function") or {}
        events: list[Event] = []
        item = self._calls.get(index)
        if item is None:
            item = _Item(
                "function_call",
                f"fc_{self._base}_{len(self._calls)}",
                len(self._items),
                call_id=str(call.get("id") or "call_" + uuid.uuid4().hex),
                name=str(function.get("name") or ""),
            )
            self._calls[index] = item
            events += self._open_item(item)
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            item.arguments.append(arguments)
            # A call resumed after the next one began (no known provider does this) still
            # gets its arguments in the final response; its done event has gone already.
            if item is self._open:
                events.append(
                    self._event(
                        "response.function_call_arguments.delta",
                        item_id=item.id,
                        output_index=item.output_index,
                        delta=arguments,
                    )
                )
        return events

    def _close_part(self, item: _Item) -> list[Event]:
        part = item.parts[-1].wire()
        where = {
            "item_id": item.id,
            "output_index": item.output_index,
            "content_index": len(item.parts) - 1,
        }
        if part["type"] == "output_text":
            done = self._event("response.output_text.done", **where, text=part["text"], logprobs=[])
        else:
            done = self._event("response.refusal.done", **where, refusal=part["refusal"])
        return [done, self._event("response.content_part.done", **where, part=part)]

    def _close(self) -> list[Event]:
        item, self._open = self._open, None
        if item is None:
            return []
        events: list[Event] = []
        if item.kind == "message":
            events += self._close_part(item)
        else:
            events.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item.id,
                    output_index=item.output_index,
                    arguments="".join(item.arguments),
                )
            )
        # Cut short by the token limit or a filter, the item is as incomplete as the response.
        item.status = (
            "completed" if response_status(self._finish_reason)[0] == "completed" else "incomplete"
        )
        events.append(
            self._event(
                "response.output_item.done", output_index=item.output_index, item=item.wire()
            )
        )
        return events
