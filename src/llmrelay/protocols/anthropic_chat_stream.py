"""Chat Completions chunks as Anthropic Messages events (an Anthropic client, a provider
reached through chat).

A small state machine fed one parsed chunk at a time, so the gateway can relay each piece as
it arrives. Blocks are opened and closed one at a time, as Anthropic sends them: thinking,
text, then each tool call in turn. Reasoning (`reasoning_content`, `reasoning`,
`reasoning_details`) opens a thinking block, closed with a `signature_delta` that packs it
(anthropic_reasoning.py); reasoning that comes after that block closed (a Gemini tool call's
signature rides on the call itself) goes into one more thinking block at the end, so the
next turn carries all of it back. The closing message_delta carries the usage, which Chat
sends after the finish_reason, so it waits for the usage chunk or for `finish()`.
"""

from __future__ import annotations

import uuid
from typing import Any

from llmrelay.protocols.anthropic import stop_reason_for
from llmrelay.protocols.anthropic_reasoning import Reasoning, pack
from llmrelay.protocols.chat_anthropic import anthropic_usage_from_chat
from llmrelay.protocols.gemini_reasoning import merge_details

__all__ = ["ChatStreamToAnthropic"]

Event = tuple[str, dict[str, Any]]


class ChatStreamToAnthropic:
    """chat.completion.chunk dicts -> Anthropic Messages events. `thinking`: whether
    reasoning may be answered as thinking blocks (not when the client turned thinking off);
    `display`: the request's `thinking.display` ("omitted": blocks without their text)."""

    def __init__(
        self, *, model: str, message_id: str, thinking: bool = True, display: str | None = None
    ) -> None:
        self.model = model
        self.message_id = message_id
        self._thinking = thinking
        self._show = display != "omitted"
        self._started = False
        self._done = False
        self._blocks = 0
        self._open: int | None = None  # Anthropic index of the open block
        self._open_call: int | None = None  # Chat tool call index, when that block is one
        self._call_blocks: dict[int, int] = {}
        self._call_ids: dict[int, str] = {}
        self._stop_reason: str | None = None
        self._usage: dict[str, Any] | None = None
        #: The reasoning of the open thinking block (its index in `_reasoning_block`).
        self._reasoning = Reasoning()
        self._reasoning_block: int | None = None
        #: Reasoning that came once the first thinking block could no longer take it.
        self._late = Reasoning()

    def feed(self, chunk: dict[str, Any]) -> list[Event]:
        if self._done:
            return []
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        events = self._start()
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if self._thinking:
                events += self._think(delta)
            for field in ("content", "refusal"):
                if isinstance(delta.get(field), str) and delta[field]:
                    events += self._text(delta[field])
            for call in delta.get("tool_calls") or []:
                events += self._tool_call(call)
            if choice.get("finish_reason"):
                events += self._close()
                self._stop_reason = stop_reason_for(choice["finish_reason"])
        if self._stop_reason is not None and self._usage is not None:
            events += self._end()
        return events

    def finish(self) -> list[Event]:
        if self._done:
            return []
        return self._start() + self._end()

    def _start(self) -> list[Event]:
        if self._started:
            return []
        self._started = True
        usage = anthropic_usage_from_chat(self._usage) if self._usage else {}
        message: dict[str, Any] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": usage.get("input_tokens", 0), "output_tokens": 0},
        }
        return [("message_start", {"type": "message_start", "message": message})]

    def _open_block(self, block: dict[str, Any]) -> tuple[int, list[Event]]:
        events = self._close()
        self._open = index = self._blocks
        self._blocks += 1
        data = {"type": "content_block_start", "index": index, "content_block": block}
        return index, [*events, ("content_block_start", data)]

    def _close(self) -> list[Event]:
        if self._open is None:
            return []
        index, self._open, self._open_call = self._open, None, None
        events = []
        if index == self._reasoning_block:
            signature = {"type": "signature_delta", "signature": pack(self._reasoning)}
            events.append(self._delta(index, signature))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        return events

    @staticmethod
    def _delta(index: int, delta: dict[str, Any]) -> Event:
        return (
            "content_block_delta",
            {"type": "content_block_delta", "index": index, "delta": delta},
        )

    def _think(self, delta: dict[str, Any]) -> list[Event]:
        """A delta's reasoning: into the first thinking block while it can take it."""
        text = delta.get("reasoning_content")
        if not isinstance(text, str):
            text = delta.get("reasoning")
        details = delta.get("reasoning_details")
        if not (isinstance(text, str) and text) and not (isinstance(details, list) and details):
            return []
        events: list[Event] = []
        block = self._reasoning_block
        if block is None and self._blocks == 0:
            block, events = self._open_block({"type": "thinking", "thinking": "", "signature": ""})
            self._reasoning_block = block
        into = self._reasoning if block is not None and self._open == block else self._late
        if isinstance(text, str) and text:
            into.text += text
            if into is self._reasoning and self._show and block is not None:
                thinking = {"type": "thinking_delta", "thinking": text}
                events.append(self._delta(block, thinking))
        if isinstance(details, list):
            merge_details(into.details, details)
        return events

    def _text(self, text: str) -> list[Event]:
        index = self._open
        events: list[Event] = []
        if index is None or self._open_call is not None or index == self._reasoning_block:
            index, events = self._open_block({"type": "text", "text": ""})
        return [*events, self._delta(index, {"type": "text_delta", "text": text})]

    def _tool_call(self, call: Any) -> list[Event]:
        if not isinstance(call, dict):
            return []
        call_index = call.get("index", 0)
        function = call.get("function") or {}
        events: list[Event] = []
        block = self._call_blocks.get(call_index)
        if block is None:
            call_id = call.get("id") or "toolu_" + uuid.uuid4().hex
            self._call_ids[call_index] = call_id
            block, events = self._open_block(
                {
                    "type": "tool_use",
                    "id": call_id,
                    "name": function.get("name") or "",
                    "input": {},
                }
            )
            self._call_blocks[call_index] = block
            self._open_call = call_index
        if self._thinking and call.get("extra_content") is not None:
            self._late.take_call({**call, "id": self._call_ids.get(call_index)})
        # A call resumed after another began (no provider does this) still lands in its own
        # block: the Anthropic SDKs accumulate deltas by index.
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            events.append(
                self._delta(block, {"type": "input_json_delta", "partial_json": arguments})
            )
        return events

    def _end(self) -> list[Event]:
        events = self._close()
        if self._late:
            # What came after the first thinking block: one more, holding it for next turn.
            index, opened = self._open_block({"type": "thinking", "thinking": "", "signature": ""})
            signature = {"type": "signature_delta", "signature": pack(self._late)}
            events += [*opened, self._delta(index, signature)]
            self._open = None
            events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        usage = anthropic_usage_from_chat(self._usage) if self._usage else {"output_tokens": 0}
        # output_tokens first, as Anthropic writes it; the input counts are only known now.
        delta_usage = {"output_tokens": usage["output_tokens"]}
        delta_usage.update({k: v for k, v in usage.items() if k != "output_tokens"})
        events.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {
                        "stop_reason": self._stop_reason or "end_turn",
                        "stop_sequence": None,
                    },
                    "usage": delta_usage,
                },
            )
        )
        events.append(("message_stop", {"type": "message_stop"}))
        self._done = True
        return events
