"""OpenAI Responses clients served through chat, for providers without the Responses API.

The Responses request becomes a chat request (protocols.responses_chat), and the answer a
Response object or the Responses stream events. Error bodies stay in the chat shape (the
gateway reads only their message).
"""

from __future__ import annotations

from typing import Any

import orjson

from llmrelay.protocols.responses_chat import chat_response_to_responses, responses_request_to_chat
from llmrelay.protocols.responses_chat_stream import ChatStreamToResponses
from llmrelay.protocols.sse import SSEParser
from llmrelay.providers.base import UpstreamRequest, UpstreamResponse
from llmrelay.providers.errors import UpstreamProtocolError
from llmrelay.providers.messages_bridge import BuildChat, over_chat
from llmrelay.snapshot.model import RouteSnap


def responses_over_chat(
    build_chat: BuildChat, route: RouteSnap, payload: dict[str, Any]
) -> UpstreamRequest:
    chat, dropped = responses_request_to_chat(payload, upstream_model=route.upstream_model)

    def wrap(response: UpstreamResponse, *, model: str, stream: bool) -> UpstreamResponse:
        return ResponsesFromChat(response, model=model, stream=stream, request=payload)

    return over_chat(build_chat, route, chat, dropped, wrap)


class ResponsesFromChat:
    """A chat response (JSON or SSE) read as the Responses API."""

    def __init__(
        self, inner: UpstreamResponse, *, model: str, stream: bool, request: dict[str, Any]
    ) -> None:
        self._inner = inner
        self._model = model
        self._request = request
        self._parser = SSEParser() if stream else None
        self._events = ChatStreamToResponses(model=model, request=request)
        self._ended = False
        self.status = inner.status

    def header(self, name: str) -> str | None:
        return self._inner.header(name)

    async def read(self) -> bytes:
        raw = await self._inner.read()
        if self.status >= 300:
            return raw
        try:
            body = orjson.loads(raw)
            answer = chat_response_to_responses(body, model=self._model, request=self._request)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UpstreamProtocolError(f"the answer is not a chat completion: {exc}") from None
        return orjson.dumps(answer)

    async def next_chunk(self) -> bytes:
        assert self._parser is not None
        while not self._ended:
            chunk = await self._inner.next_chunk()
            out: list[tuple[str, dict[str, Any]]] = []
            if not chunk:
                self._ended = True
                out.extend(self._events.finish())
            else:
                for data in self._parser.feed_data(chunk):
                    out.extend(self._take(data))
            if out:
                return b"".join(_event(name, data) for name, data in out)
        return b""

    def _take(self, data: bytes) -> list[tuple[str, dict[str, Any]]]:
        if data == b"[DONE]":
            self._ended = True
            return self._events.finish()
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return [("malformed", {})]
        if not isinstance(chunk, dict):
            return []
        error = chunk.get("error")
        if error is not None:
            message = error.get("message") if isinstance(error, dict) else str(error)
            return [("error", {"type": "error", "code": "upstream_error", "message": message})]
        return self._events.feed(chunk)

    def release(self) -> None:
        self._inner.release()


def _event(name: str, data: dict[str, Any]) -> bytes:
    if name == "malformed":
        return b"event: malformed\ndata: !\n\n"  # dropped and counted by the relay
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
