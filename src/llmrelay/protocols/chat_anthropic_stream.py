"""Anthropic Messages events as Chat Completions chunks (a Chat client, an Anthropic provider).

A small state machine fed one parsed event at a time, so the gateway can relay each piece as
it arrives. Anthropic streams content as numbered blocks (text, tool_use) with explicit start
and stop events and sends usage at both ends; Chat streams flat deltas, tool calls numbered
among themselves, and usage (when asked for) in a last chunk without choices. The other
direction is anthropic_chat_stream.py.
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Final

import orjson

from llmrelay.protocols.anthropic import finish_reason_for
from llmrelay.protocols.chat_anthropic import chat_usage_from_anthropic
from llmrelay.protocols.chat_anthropic_thinking import stream_details

__all__ = ["AnthropicStreamToChat", "StreamError"]

Event = tuple[str, dict[str, Any]]
_USAGE_KEYS: Final = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)

_PLACEHOLDER_IDS: Final = itertools.count(1)


#: Finish reasons as JSON (a handful of names: serialised once each).
_REASON_JSON: Final[dict[str, bytes]] = {}


def _reason_json(reason: str) -> bytes:
    found = _REASON_JSON.get(reason)
    if found is None:
        found = orjson.dumps(reason)
        if len(_REASON_JSON) < 64:
            _REASON_JSON[reason] = found
    return found


class StreamError(Exception):
    """Anthropic sent an `error` event after the 200 (typically overloaded_error): the
    stream cannot go on, and the gateway renders it in the client's protocol."""

    def __init__(self, message: str, error_type: str) -> None:
        super().__init__(message)
        self.message = message
        self.error_type = error_type


class AnthropicStreamToChat:
    """Anthropic Messages events -> chat.completion.chunk dicts."""

    def __init__(self, *, model: str, include_usage: bool) -> None:
        self.model = model
        self.include_usage = include_usage
        self.finished = False
        # Replaced by the message's own id at message_start (a counter costs far less than a
        # random id nobody sees).
        self._id = f"chatcmpl-llmrelay{next(_PLACEHOLDER_IDS)}"
        self._created = int(time.time())
        self._raw_usage: dict[str, int] = {}
        self._usage_seen = False
        #: Anthropic block index -> Chat tool call index (tool blocks counted alone)
        self._tool_calls: dict[int, int] = {}
        self._finish_sent = False
        self._text_template: tuple[str, str, bytes, bytes, bytes, bytes] | None = None

    def feed(self, event: str | None, data: dict[str, Any]) -> list[dict[str, Any]]:
        kind = data.get("type") or event
        if kind == "message_start":
            return self._message_start(data.get("message") or {})
        if kind == "content_block_start":
            return self._block_start(data.get("index"), data.get("content_block") or {})
        if kind == "content_block_delta":
            return self._block_delta(data.get("index"), data.get("delta") or {})
        if kind == "message_delta":
            return self._message_delta(data)
        if kind == "message_stop":
            return self._message_stop()
        if kind == "error":
            error = data.get("error") or {}
            raise StreamError(
                str(error.get("message") or "upstream stream error"),
                str(error.get("type") or "api_error"),
            )
        # ping, content_block_stop and event types added after this was written.
        return []

    @property
    def usage(self) -> dict[str, Any] | None:
        """Chat-shaped usage once Anthropic reported any (worked out when asked: the counts
        come twice a stream, and only the last matter)."""
        return chat_usage_from_anthropic(self._raw_usage) if self._usage_seen else None

    def text_event(self, text: str) -> bytes:
        """The `data: ` event of a text delta's chunk, byte for byte what serialising
        `_chunk({"content": text})` gives, from a template made once per message (text
        deltas are nearly every event of a stream)."""
        return self.text_event_json(orjson.dumps(text))

    def text_event_json(self, text: bytes) -> bytes:
        """`text_event` for text already a JSON string token (as the provider wrote it)."""
        prefix, suffix = self.text_template()
        return prefix + text + suffix

    def text_template(self) -> tuple[bytes, bytes]:
        """The bytes before and after a text delta's JSON string in its `data: ` event, for
        the message as it stands (its id comes with message_start)."""
        template = self._text_template
        if template is None or template[0] is not self._id or template[1] is not self.model:
            template = self._build_template()
        return template[4], template[5]

    def event(self, delta: bytes, finish_reason: str | None = None) -> bytes:
        """The `data: ` event of a chunk with this delta (compact JSON), byte for byte what
        serialising `_chunk` gives, from the message's template (no dict, no serialiser)."""
        template = self._text_template
        if template is None or template[0] is not self._id or template[1] is not self.model:
            template = self._build_template()
        reason = b"null" if finish_reason is None else _reason_json(finish_reason)
        return template[2] + delta + b',"logprobs":null,"finish_reason":' + reason + template[3]

    def _build_template(self) -> tuple[str, str, bytes, bytes, bytes, bytes]:
        """A chunk's `data: ` event before its delta and after its finish reason, and the
        same around a text delta's string; kept while the id and the model stay."""
        head = (
            b'data: {"id":'
            + orjson.dumps(self._id)
            + b',"object":"chat.completion.chunk","created":'
            + str(self._created).encode()
            + b',"model":'
            + orjson.dumps(self.model)
            + b',"choices":[{"index":0,"delta":'
        )
        tail = b'}],"usage":null}\n\n' if self.include_usage else b"}]}\n\n"
        template = self._text_template = (
            *(self._id, self.model, head, tail),
            *(head + b'{"content":', b'},"logprobs":null,"finish_reason":null' + tail),
        )
        return template

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self.model,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
        if self.include_usage:
            chunk["usage"] = None  # as OpenAI does on every chunk but the last
        return chunk

    def _record_usage(self, usage: Any) -> None:
        """Anthropic's counts are cumulative, so the latest value of each wins."""
        if type(usage) is not dict:
            return
        raw = self._raw_usage
        for key in _USAGE_KEYS:
            value = usage.get(key)
            if type(value) is int:
                raw[key] = value
        self._usage_seen = True

    def start(self, message: dict[str, Any]) -> None:
        """message_start's effect on the state (the role chunk follows)."""
        if message.get("id"):
            self._id = "chatcmpl-" + str(message["id"])
        self._record_usage(message.get("usage"))

    def _message_start(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        self.start(message)
        return [self._chunk({"role": "assistant", "content": ""})]

    def _block_start(self, index: Any, block: dict[str, Any]) -> list[dict[str, Any]]:
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            return [self._chunk({"content": block["text"]})]
        if kind == "thinking" or kind == "redacted_thinking":
            reasoning = stream_details(index, block)
            return [] if reasoning is None else [self._chunk(reasoning)]
        if kind != "tool_use" or not isinstance(index, int):
            return []  # empty text and server-tool blocks
        call_index = self._tool_calls[index] = len(self._tool_calls)
        tool_input = block.get("input")
        arguments = orjson.dumps(tool_input).decode() if tool_input else ""
        call = {
            "index": call_index,
            "id": block.get("id"),
            "type": "function",
            "function": {"name": block.get("name"), "arguments": arguments},
        }
        return [self._chunk({"tool_calls": [call]})]

    def _block_delta(self, index: Any, delta: dict[str, Any]) -> list[dict[str, Any]]:
        kind = delta.get("type")
        if kind == "text_delta" and delta.get("text"):
            return [self._chunk({"content": delta["text"]})]
        if kind == "input_json_delta" and delta.get("partial_json") and index in self._tool_calls:
            call = {
                "index": self._tool_calls[index],
                "function": {"arguments": delta["partial_json"]},
            }
            return [self._chunk({"tool_calls": [call]})]
        if kind == "thinking_delta" or kind == "signature_delta":
            reasoning = stream_details(index, delta)
            return [] if reasoning is None else [self._chunk(reasoning)]
        return []  # citation deltas have no Chat form

    def delta(self, data: dict[str, Any]) -> str | None:
        """message_delta's effect on the state: the finish reason, if its chunk is due."""
        self._record_usage(data.get("usage"))
        stop_reason = (data.get("delta") or {}).get("stop_reason")
        if stop_reason is None or self._finish_sent:
            return None
        self.finished = True
        self._finish_sent = True
        return finish_reason_for(stop_reason)

    def stop(self) -> tuple[str | None, dict[str, Any] | None]:
        """message_stop's effect on the state: the finish reason, if its chunk is still due,
        and the usage chunk, if one is written."""
        self.finished = True
        reason = None
        if not self._finish_sent:
            self._finish_sent = True
            reason = "stop"
        # No usage reported is left unknown rather than billed as zero tokens.
        usage = self.usage if self.include_usage else None
        if usage is None:
            return reason, None
        return reason, {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self.model,
            "choices": [],
            "usage": usage,
        }

    def _message_delta(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        reason = self.delta(data)
        return [] if reason is None else [self._chunk({}, reason)]

    def _message_stop(self) -> list[dict[str, Any]]:
        reason, usage_chunk = self.stop()
        chunks = [] if reason is None else [self._chunk({}, reason)]
        if usage_chunk is not None:
            chunks.append(usage_chunk)
        return chunks
