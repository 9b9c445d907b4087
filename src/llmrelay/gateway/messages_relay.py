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

from collections.abc import Callable
from typing import Any

import orjson
import structlog

from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.errors import GatewayError
from llmrelay.gateway.stream_relay import StreamRelay
from llmrelay.protocols import anthropic
from llmrelay.protocols.sse import SSEParser
from llmrelay.providers.base import UpstreamResponse
from llmrelay.providers.errors import UpstreamProtocolError
from llmrelay.snapshot.model import RouteSnap

log = structlog.get_logger(__name__)

_CONTENT_BLOCKS = frozenset({"tool_use", "server_tool_use"})
_CONTENT_DELTAS = ("text", "partial_json", "thinking")


class MessagesStreamRelay(StreamRelay):
    def __init__(
        self,
        route: RouteSnap,
        response: UpstreamResponse,
        *,
        request_id: str,
        virtual_model: str,
        record: CallRecord,
        on_malformed: Callable[[], None],
        on_end: Callable[[CallRecord], None],
    ) -> None:
        super().__init__(route, response, request_id=request_id, record=record, on_end=on_end)
        self._parser = SSEParser()
        self._virtual_model = virtual_model
        self._on_malformed = on_malformed
        self._stopped = False

    @property
    def _complete(self) -> bool:
        return self._stopped

    def _error_event(self, error: GatewayError) -> bytes:
        return anthropic.error_event(anthropic.error_type_for_status(error.status), error.message)

    def _take(self, chunk: bytes, out: list[bytes], *, priming: bool) -> bool:
        content = False
        for name, data in self._parser.feed(chunk):
            if self._stopped:
                break  # anything after message_stop is not part of the message
            try:
                event = orjson.loads(data) if data else None
            except orjson.JSONDecodeError:
                event = None
            if not isinstance(event, dict):
                if data:
                    self._on_malformed()
                    log.warning("upstream_malformed_event", request_id=self._request_id)
                continue
            kind = event.get("type") or name
            if kind == "error":
                raise UpstreamProtocolError(f"provider sent an error event: {_message(event)}")
            content = self._look(kind, event) or content
            if kind == "message_start":
                data = orjson.dumps(event)  # its model renamed by _look
            out.append(b"event: " + str(kind).encode() + b"\ndata: " + data + b"\n\n")
        return content

    def _look(self, kind: Any, event: dict[str, Any]) -> bool:
        """Take usage and the end from one event; whether it carried content."""
        record = self._record
        if kind == "message_start":
            message = event.get("message")
            if isinstance(message, dict):
                message["model"] = self._virtual_model
                usage = message.get("usage")
                if isinstance(usage, dict):
                    record.prompt_tokens = prompt_tokens(usage)
            return False
        if kind == "content_block_delta":
            delta = event.get("delta")
            return isinstance(delta, dict) and any(delta.get(f) for f in _CONTENT_DELTAS)
        if kind == "content_block_start":
            block = event.get("content_block")
            return isinstance(block, dict) and block.get("type") in _CONTENT_BLOCKS
        if kind == "message_delta":
            usage = event.get("usage")
            if isinstance(usage, dict) and isinstance(usage.get("output_tokens"), int):
                record.completion_tokens = usage["output_tokens"]
            return True
        if kind == "message_stop":
            self._stopped = True
            return True
        return False


def prompt_tokens(usage: dict[str, Any]) -> int | None:
    """All input tokens, cached or not, as chat's `prompt_tokens` counts them."""
    total = 0
    seen = False
    for name in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
        value = usage.get(name)
        if isinstance(value, int):
            total += value
            seen = True
    return total if seen else None


def _message(event: dict[str, Any]) -> str:
    error = event.get("error")
    if isinstance(error, dict):
        return str(error.get("message", ""))[:200]
    return str(error)[:200]
