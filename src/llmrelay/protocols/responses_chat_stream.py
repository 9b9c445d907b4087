"""Chat Completions chunks -> OpenAI Responses stream events, one chunk at a time.

Chat streams flat deltas: text, refusal, tool calls numbered among themselves, a
finish_reason, and (when asked for) usage in a last chunk without choices. The Responses
API streams semantic events about numbered output items, each opened (`output_item.added`),
filled by deltas and closed (`output_item.done`) before the next one opens, every event
carrying a `sequence_number`; the final `response.completed` holds the whole response. The
SDK's stream helper checks that items are opened before their deltas and closed with the
same id, so each item's id is fixed when it opens.

Reasoning deltas (`reasoning_content`, `reasoning_details`) that come before the answer open a
reasoning item (its text streamed as summary deltas when the client asked for a summary); its
`encrypted_content` is written when it closes (responses_reasoning.py). Reasoning that comes
later (a signature on a text part, a Gemini function call's own signature in its
`extra_content`) goes into one more reasoning item at the end. A call to a function that stands
for a custom tool, local_shell or apply_patch (responses_tools.py) is written whole when it
closes: its item cannot be told before its arguments are.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from llmrelay.protocols import responses_reasoning
from llmrelay.protocols.gemini_reasoning import merge_details
from llmrelay.protocols.responses_chat import (
    base_id,
    message_item,
    output_text_part,
    refusal_part,
    response_object,
    response_status,
    responses_usage_from_chat,
)
from llmrelay.protocols.responses_reasoning import Packed, reasoning_item
from llmrelay.protocols.responses_tool_calls import responses_item_of_call
from llmrelay.protocols.responses_tools import ToolNames, tool_names

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
    """An output item: a message (with parts), a tool call (with argument pieces) or
    reasoning (its text in pieces, its details gathered)."""

    kind: str  # "message", "function_call" or "reasoning"
    id: str
    output_index: int
    call_id: str = ""
    name: str = ""
    parts: list[_Part] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)
    status: str = "in_progress"
    #: A call written whole when it closes (not a plain function_call).
    deferred: bool = False
    packed: Packed = field(default_factory=Packed)

    def wire(self, names: ToolNames, summary: bool = False) -> dict[str, Any]:
        if self.kind == "message":
            return message_item(self.id, [part.wire() for part in self.parts], self.status)
        if self.kind == "reasoning":
            text = "".join(self.arguments)
            return reasoning_item(self.id, text, self.packed, summary=summary, status=self.status)
        arguments = "".join(self.arguments)
        return responses_item_of_call(
            self.id, self.call_id, self.name, arguments, self.status, names
        )


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
        self._names = tool_names(request.get("tools"))
        self._summary = responses_reasoning.wants_summary(request)
        #: Reasoning that came once the answer had begun, for a reasoning item at the end.
        self._late = _Item("reasoning", "", 0)

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
            text, details = delta.get("reasoning_content"), delta.get("reasoning_details")
            if (isinstance(text, str) and text) or (isinstance(details, list) and details):
                events += self._reasoning(text if isinstance(text, str) else "", details)
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
        events = self._start(None) + self._close() + self._late_reasoning()
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
            output=[self._wire(item) for item in self._items],
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

    def _wire(self, item: _Item) -> dict[str, Any]:
        return item.wire(self._names, self._summary)

    def _open_item(self, item: _Item) -> list[Event]:
        events = self._close()
        self._items.append(item)
        self._open = item
        if not item.deferred:
            events.append(self._added(item))
        return events

    def _added(self, item: _Item) -> Event:
        return self._event(
            "response.output_item.added", output_index=item.output_index, item=self._wire(item)
        )

    def _reasoning(self, text: str, details: Any) -> list[Event]:
        """Reasoning before the answer goes into the open reasoning item (opened here);
        after it began, into the reasoning item written at the end."""
        item = self._open
        events: list[Event] = []
        if item is None and not self._items:
            keep = bool(isinstance(details, list) and details) or bool(text and self._summary)
            if not keep:
                return events  # text-only reasoning nobody asked to see and none to keep
            item = _Item("reasoning", f"rs_{self._base}", 0)
            events += self._open_item(item)
        elif item is None or item.kind != "reasoning":
            item = self._late
        merge_details(item.packed.details, details)
        if not text:
            return events
        if item is self._late or not self._summary:
            item.arguments.append(text)
            return events
        where = {"item_id": item.id, "output_index": item.output_index, "summary_index": 0}
        if not item.arguments:
            part = {"type": "summary_text", "text": ""}
            events.append(self._event("response.reasoning_summary_part.added", **where, part=part))
        item.arguments.append(text)
        events.append(self._event("response.reasoning_summary_text.delta", **where, delta=text))
        return events

    def _late_reasoning(self) -> list[Event]:
        late = self._late
        if not late.packed and not (late.arguments and self._summary):
            return []
        late.id = f"rs_{self._base}_{len(self._items)}"
        late.output_index = len(self._items)
        late.status = "completed"
        self._items.append(late)
        self._late = _Item("reasoning", "", 0)
        item = self._wire(late)
        return [
            self._event("response.output_item.added", output_index=late.output_index, item=item),
            self._event("response.output_item.done", output_index=late.output_index, item=item),
        ]

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
            name = str(function.get("name") or "")
            meant = self._names.get(name)
            item = _Item(
                "function_call",
                f"fc_{self._base}_{len(self._calls)}",
                len(self._items),
                call_id=str(call.get("id") or "call_" + uuid.uuid4().hex),
                name=name,
                deferred=meant is not None and meant.kind != "function",
            )
            self._calls[index] = item
            events += self._open_item(item)
        extra = call.get("extra_content")
        if isinstance(extra, dict):
            # A Gemini function call's own thought signature: back with the next turn.
            self._late.packed.calls[item.call_id] = extra
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            item.arguments.append(arguments)
            # A call resumed after the next one began (no known provider does this) still
            # gets its arguments in the final response; its done event has gone already.
            if item is self._open and not item.deferred:
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
        elif item.kind == "reasoning":
            if item.arguments and self._summary:
                text = "".join(item.arguments)
                where = {"item_id": item.id, "output_index": item.output_index}
                part = {"type": "summary_text", "text": text}
                events.append(
                    self._event(
                        "response.reasoning_summary_text.done", **where, summary_index=0, text=text
                    )
                )
                events.append(
                    self._event(
                        "response.reasoning_summary_part.done", **where, summary_index=0, part=part
                    )
                )
        elif item.deferred:
            events += self._deferred(item)
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
                "response.output_item.done", output_index=item.output_index, item=self._wire(item)
            )
        )
        return events

    def _deferred(self, item: _Item) -> list[Event]:
        """A call written whole: added (in progress), its custom input given in one delta."""
        events = [self._added(item)]
        wire = self._wire(item)
        if wire["type"] == "custom_tool_call":
            where = {"item_id": wire["id"], "output_index": item.output_index}
            given = wire["input"]
            events.append(
                self._event("response.custom_tool_call_input.delta", **where, delta=given)
            )
            events.append(self._event("response.custom_tool_call_input.done", **where, input=given))
        return events
