"""Adapter for `anthropic` providers (the Messages API) serving chat-completions clients.

The chat request is translated to a Messages request (protocols.chat_anthropic) and the
answer back to a chat completion or chunk stream (providers.translated): `x-api-key` and
`anthropic-version` authenticate; the base URL is the host root (`/v1/messages` is added).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
import structlog

from llmrelay.protocols.anthropic import upstream_error
from llmrelay.protocols.chat_anthropic import anthropic_response_to_chat, chat_request_to_anthropic
from llmrelay.protocols.chat_anthropic_stream import AnthropicStreamToChat, StreamError
from llmrelay.protocols.sse import SSEParser, parse_block
from llmrelay.providers.base import Operation, UnsupportedOperation, UpstreamRequest
from llmrelay.providers.translated import TranslatedResponse, context_code, error_event
from llmrelay.snapshot.model import ProviderSnap, RouteSnap

log = structlog.get_logger(__name__)

ANTHROPIC_VERSION = "2023-06-01"
_NO_HEADERS: Mapping[str, str] = {}
#: How a text delta of the first content block starts (its JSON string follows).
_TEXT_HEAD = (
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"'
)
_TEXT_HEAD_LEN = len(_TEXT_HEAD) - 1  # the string's opening quote belongs to it
#: Events with nothing to say in chat (named as Anthropic names every event).
_SILENT = (b"event: ping\n", b"event: content_block_stop\n")


class AnthropicAdapter:
    protocol = "anthropic"

    def build_request(
        self,
        operation: Operation,
        route: RouteSnap,
        payload: dict[str, Any],
        forwarded_headers: Mapping[str, str],
    ) -> UpstreamRequest:
        if operation in _NATIVE:
            # Same protocol: the body passes through with only `model` rewritten.
            payload["model"] = route.upstream_model
            return UpstreamRequest(
                url=f"{route.provider.base_url}{_NATIVE[operation]}",
                headers=headers_for(route.provider, forwarded_headers),
                body=orjson.dumps(payload),
            )
        if operation is not Operation.CHAT:
            raise UnsupportedOperation(f"anthropic providers have no {operation.value} API")
        body, dropped = chat_request_to_anthropic(payload, upstream_model=route.upstream_model)
        if dropped:
            log.debug("translation_dropped_fields", provider=route.provider.slug, fields=dropped)
        # A stream always ends with the usage chunk (the record, the cost and the limits
        # need it); the chat relay keeps it from a client that did not ask.
        include_usage = True
        model = route.upstream_model
        stream = payload.get("stream") is True

        def translate(response: Any) -> TranslatedResponse:
            return TranslatedResponse(response, _Decoder(model, include_usage, stream))

        return UpstreamRequest(
            url=f"{route.provider.base_url}/v1/messages",
            headers=headers_for(route.provider, _NO_HEADERS),  # a chat client's are OpenAI's
            body=orjson.dumps(body),
            translate=translate,
        )


_NATIVE = {Operation.MESSAGES: "/v1/messages", Operation.COUNT_TOKENS: "/v1/messages/count_tokens"}


def headers_for(provider: ProviderSnap, forwarded: Mapping[str, str]) -> dict[str, str]:
    """The provider's headers; a Messages client's `anthropic-version` and `anthropic-beta`
    win over the default version (they choose the API behaviour the client was written
    for)."""
    headers = {
        **provider.headers,
        "content-type": "application/json",
        "anthropic-version": ANTHROPIC_VERSION,
        **forwarded,
    }
    if provider.api_key:
        headers["x-api-key"] = provider.api_key
    return headers


class _Decoder:
    def __init__(self, model: str, include_usage: bool, stream: bool) -> None:
        self._model = model
        self._stream = AnthropicStreamToChat(model=model, include_usage=include_usage)
        self._parser = SSEParser() if stream else None

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        return anthropic_response_to_chat(body, model=self._model)

    def error(self, status: int, raw: bytes) -> tuple[str, str | None]:
        found = upstream_error(raw)
        message = found[1] if found else f"anthropic answered {status}"
        return message, context_code(message) if status == 400 else None

    def retry_after(self, raw: bytes) -> str | None:
        return None  # Anthropic sends a retry-after header

    def chunks(self, chunk: bytes) -> list[dict[str, Any] | bytes | None]:
        """Text deltas, nearly every event of a stream, are recognised by how Anthropic writes
        them (`event: content_block_delta`, then its data in a fixed key order, a text with no
        quote, backslash or newline): the text's JSON string goes into the chat chunk as it
        came, unparsed. Other blocks of the usual two lines are split without the line parse;
        anything else is parsed as the SSE spec says. Measured under load, this loop is most
        of what a translated stream costs."""
        assert self._parser is not None
        text = self._parser.complete_text(chunk)
        if not text:
            return []
        out: list[dict[str, Any] | bytes | None] = []
        template: tuple[bytes, bytes] | None = None
        for block in text[:-2].split(b"\n\n"):
            if block.startswith(_TEXT_HEAD) and block.endswith(b'"}}'):
                token = block[_TEXT_HEAD_LEN:-2]
                if token.count(b'"') == 2 and b"\\" not in token and b"\n" not in token:
                    if len(token) > 2:
                        if template is None:
                            template = self._stream.text_template()
                        out.append(template[0] + token + template[1])
                    continue
            elif block.startswith(_SILENT):
                continue  # ping, content_block_stop: nothing to say in chat
            head, found, data = block.partition(b"\ndata: ")
            if found and head.startswith(b"event: ") and b"\n" not in head and b"\n" not in data:
                self._take(head[7:].decode(), data, out)
                continue
            event = parse_block(block)
            if event is not None:
                self._take(event[0], event[1], out)
        return out

    def _take(
        self, name: str | None, data: bytes, out: list[dict[str, Any] | bytes | None]
    ) -> None:
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            out.append(None)  # malformed: dropped and counted by the relay
            return
        if not isinstance(event, dict):
            return
        if name == "content_block_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and delta.get("type") == "text_delta":
                text = delta.get("text")
                if isinstance(text, str):
                    if text:
                        out.append(self._stream.text_event(text))
                    return
        try:
            out.extend(self._stream.feed(name, event))
        except StreamError as exc:
            out.append(error_event(exc.message, exc.error_type))

    def end(self) -> list[dict[str, Any] | bytes | None]:
        return []
