"""What a mid-stream rescue (gateway/rescue_events.py) reads and writes of an Anthropic
Messages stream: the client's one text block, then the continuation's text as more
`text_delta`s of that block, and the stream's end (the block's stop, a `message_delta`
with the stop reason and the summed usage, `message_stop`).

Exact only while the message is one text block of plain text deltas: a thinking block, a
tool use, citations or a second block refuse the rescue, and so does a text block already
stopped (the message was about to go on with something else)."""

from __future__ import annotations

from typing import Any

import orjson

from llmrelay.gateway.rescue_events import EventTranscript
from llmrelay.protocols.anthropic import stop_reason_for
from llmrelay.protocols.anthropic_request import anthropic_request_to_chat
from llmrelay.protocols.chat_anthropic import anthropic_usage_from_chat, chat_usage_from_anthropic
from llmrelay.protocols.translation import TranslationError


class MessagesTranscript(EventTranscript):
    def __init__(self) -> None:
        super().__init__()
        #: The index of the text block (None: none began yet).
        self.block: Any = None

    def _read(self, name: str | None, event: dict[str, Any]) -> None:
        kind = event.get("type") or name
        if kind == "content_block_delta":
            delta = event.get("delta")
            if type(delta) is not dict or delta.get("type") != "text_delta":
                self.exact = False
                return
            if event.get("index") != self.block:
                self.exact = False
                return
            text = delta.get("text")
            if type(text) is str:
                self.add(text)
        elif kind == "content_block_start":
            block = event.get("content_block")
            if self.block is not None or type(block) is not dict or block.get("type") != "text":
                self.exact = False
                return
            self.block = event.get("index")
            text = block.get("text")
            if type(text) is str:
                self.add(text)
        elif kind == "content_block_stop" or kind == "message_delta" or kind == "message_stop":
            self.finished = True
        elif kind == "message_start":
            message = event.get("message")
            usage = message.get("usage") if type(message) is dict else None
            if type(usage) is dict:
                self.reported = {"prompt_tokens": chat_usage_from_anthropic(usage)["prompt_tokens"]}

    def chat_form(self, payload: dict[str, Any]) -> dict[str, Any]:
        if payload.get("thinking") is not None and payload.get("thinking") != {"type": "disabled"}:
            raise TranslationError("a thinking request cannot be continued from a prefill")
        chat, _dropped = anthropic_request_to_chat(payload, upstream_model="")
        return chat

    def text_event(self, text: str) -> bytes:
        event = {
            "type": "content_block_delta",
            "index": self.block,
            "delta": {"type": "text_delta", "text": text},
        }
        return b"event: content_block_delta\ndata: " + orjson.dumps(event) + b"\n\n"

    def closing(self, text: str, finish: str, usage: dict[str, Any]) -> bytes:
        stop = {"type": "content_block_stop", "index": self.block}
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason_for(finish), "stop_sequence": None},
            "usage": anthropic_usage_from_chat(usage),
        }
        return (
            b"event: content_block_stop\ndata: "
            + orjson.dumps(stop)
            + b"\n\nevent: message_delta\ndata: "
            + orjson.dumps(delta)
            + b'\n\nevent: message_stop\ndata: {"type":"message_stop"}\n\n'
        )
