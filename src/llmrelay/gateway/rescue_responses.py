"""What a mid-stream rescue (gateway/rescue_events.py) reads and writes of an OpenAI
Responses stream: the client's one message item with one `output_text` part, then the
continuation's text as more `response.output_text.delta`s of that part (numbered on from the
last `sequence_number`), and the stream's end: the part, item and response done, the
response the one `response.created` announced (same id), its output the whole text, its
usage every route's summed.

Exact only while the output is that one text part: reasoning, a refusal, a tool call, a
second item or part refuse the rescue, as does a part already done. A request that continues
a conversation its provider holds (`previous_response_id`, `conversation`) has no chat form
another route could be given whole: refused too."""

from __future__ import annotations

from typing import Any, Final

import orjson

from llmrelay.gateway.rescue_events import EventTranscript
from llmrelay.protocols.responses_chat import (
    message_item,
    output_text_part,
    response_status,
    responses_request_to_chat,
    responses_usage_from_chat,
)
from llmrelay.protocols.translation import TranslationError

#: Events that say nothing about the output.
_ANNOUNCEMENTS: Final = frozenset({"response.created", "response.in_progress", "response.queued"})
_DONE: Final = frozenset(
    {
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
        "response.incomplete",
        "response.failed",
    }
)


class ResponsesTranscript(EventTranscript):
    def __init__(self) -> None:
        super().__init__()
        #: The response as `response.created` announced it (None: not yet).
        self.response: dict[str, Any] | None = None
        self.item_id: Any = None
        self.output_index: Any = None
        self.content_index: Any = None
        self.sequence = 0

    def _read(self, name: str | None, event: dict[str, Any]) -> None:
        kind = event.get("type") or name
        sequence = event.get("sequence_number")
        if type(sequence) is int and sequence > self.sequence:
            self.sequence = sequence
        if kind == "response.output_text.delta":
            delta = event.get("delta")
            if event.get("item_id") != self.item_id or type(delta) is not str:
                self.exact = False
                return
            self.add(delta)
        elif kind in _ANNOUNCEMENTS:
            response = event.get("response")
            if type(response) is dict and self.response is None:
                self.response = dict(response)
        elif kind == "response.output_item.added":
            item = event.get("item")
            if self.item_id is not None or type(item) is not dict or item.get("type") != "message":
                self.exact = False
                return
            self.item_id = item.get("id")
            self.output_index = event.get("output_index")
        elif kind == "response.content_part.added":
            part = event.get("part")
            if (
                self.content_index is not None
                or type(part) is not dict
                or part.get("type") != "output_text"
            ):
                self.exact = False
                return
            self.content_index = event.get("content_index")
        elif kind in _DONE:
            self.finished = True
        else:
            self.exact = False  # reasoning, refusals, tool calls, annotations...

    def chat_form(self, payload: dict[str, Any]) -> dict[str, Any]:
        if payload.get("previous_response_id") or payload.get("conversation"):
            raise TranslationError("the conversation is held by the provider that began it")
        if self.response is None:
            raise TranslationError("the response was never announced")
        chat, _dropped = responses_request_to_chat(payload, upstream_model="")
        return chat

    def _next(self) -> int:
        self.sequence += 1
        return self.sequence

    def _where(self) -> dict[str, Any]:
        return {
            "item_id": self.item_id,
            "output_index": self.output_index,
            "content_index": self.content_index,
        }

    def text_event(self, text: str) -> bytes:
        event = {
            "type": "response.output_text.delta",
            **self._where(),
            "delta": text,
            "logprobs": [],
            "sequence_number": self._next(),
        }
        return _event("response.output_text.delta", event)

    def closing(self, text: str, finish: str, usage: dict[str, Any]) -> bytes:
        status, incomplete = response_status(finish)
        part = output_text_part(text)
        item = message_item(str(self.item_id), [part], status)
        where = self._where()
        done = {"type": "response.output_text.done", **where, "text": text, "logprobs": []}
        done["sequence_number"] = self._next()
        part_done = {"type": "response.content_part.done", **where, "part": part}
        part_done["sequence_number"] = self._next()
        item_done = {
            "type": "response.output_item.done",
            "output_index": self.output_index,
            "item": item,
            "sequence_number": self._next(),
        }
        response = {
            **(self.response or {}),
            "status": status,
            "incomplete_details": incomplete,
            "output": [item],
            "usage": responses_usage_from_chat(usage),
        }
        kind = "response.completed" if status == "completed" else "response.incomplete"
        end = {"type": kind, "response": response, "sequence_number": self._next()}
        return b"".join(
            (
                _event("response.output_text.done", done),
                _event("response.content_part.done", part_done),
                _event("response.output_item.done", item_done),
                _event(kind, end),
            )
        )


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
