"""Relaying an Anthropic Messages stream to an Anthropic client, event by event.

The upstream stream is Anthropic's own (an anthropic provider) or one translated from chat
(providers.messages_bridge). Content is a text, thinking or tool-input delta, or a tool-use
block starting; the stream is complete at `message_stop`. Every event is parsed (Messages
streams are not this gateway's hot path; chat's relay is the tuned one), `message_start` has
its model renamed to the virtual model, usage is taken from `message_start` (input) and
`message_delta` (output), a malformed event is dropped and counted, and an `error` event
fails the route before the first byte or reaches the client as the error after it.
"""

from __future__ import annotations

from typing import Any, Final

import orjson
import structlog

from llmrelay.gateway.errors import GatewayError
from llmrelay.gateway.stream_relay import ParsedEventRelay
from llmrelay.protocols import anthropic

log = structlog.get_logger(__name__)

_CONTENT_BLOCKS: Final = frozenset({"tool_use", "server_tool_use"})
_CONTENT_DELTAS: Final = ("text", "partial_json", "thinking")


class MessagesStreamRelay(ParsedEventRelay):
    def _error_event(self, error: GatewayError) -> bytes:
        return anthropic.error_event(anthropic.error_type_for_status(error.status), error.message)

    def _event(self, kind: str, event: dict[str, Any], data: bytes) -> tuple[bytes, bool]:
        carried = self._look(kind, event)
        if kind == "message_start":
            data = orjson.dumps(event)  # its model renamed by _look
        return data, carried

    def _look(self, kind: Any, event: dict[str, Any]) -> bool:
        """Take usage and the end from one event; whether it carried content."""
        record = self._record
        if kind == "message_start":
            message = event.get("message")
            if isinstance(message, dict):
                message["model"] = self._virtual_model
                record.take_messages_usage(message.get("usage"))
            return False
        if kind == "content_block_delta":
            delta = event.get("delta")
            return isinstance(delta, dict) and any(delta.get(f) for f in _CONTENT_DELTAS)
        if kind == "content_block_start":
            block = event.get("content_block")
            return isinstance(block, dict) and block.get("type") in _CONTENT_BLOCKS
        if kind == "message_delta":
            record.take_messages_usage(event.get("usage"))
            return True
        if kind == "message_stop":
            self._ended = True
            return True
        return False
