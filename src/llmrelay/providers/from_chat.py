"""A chat response (JSON or SSE) read as another client protocol: what the Messages and
Responses bridges share. A subclass says how a completion, a chunk, the end and an upstream
error read in its protocol; error bodies stay in the chat shape (the gateway reads only
`error.message`, which every shape keeps)."""

from __future__ import annotations

from typing import Any

import orjson

from llmrelay.protocols.sse import SSEParser
from llmrelay.providers.base import UpstreamResponse
from llmrelay.providers.errors import UpstreamProtocolError

Event = tuple[str, dict[str, Any]]
_MALFORMED = b"event: malformed\ndata: !\n\n"  # not JSON: dropped and counted by the relay


class FromChat:
    def __init__(self, inner: UpstreamResponse, *, stream: bool) -> None:
        self._inner = inner
        self._parser = SSEParser() if stream else None
        self._ended = False
        self.status = inner.status

    # -- what a protocol decides -----------------------------------------------------------

    def _answer(self, completion: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def _feed(self, chunk: dict[str, Any]) -> list[Event]:
        raise NotImplementedError

    def _finish(self) -> list[Event]:
        raise NotImplementedError

    def _error(self, message: str) -> Event:
        raise NotImplementedError

    # -- the shared reading ----------------------------------------------------------------

    def header(self, name: str) -> str | None:
        return self._inner.header(name)

    async def read(self) -> bytes:
        raw = await self._inner.read()
        if self.status >= 300:
            return raw
        try:
            return orjson.dumps(self._answer(orjson.loads(raw)))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UpstreamProtocolError(f"the answer is not a chat completion: {exc}") from None

    async def next_chunk(self) -> bytes:
        assert self._parser is not None
        while not self._ended:
            chunk = await self._inner.next_chunk()
            out: list[bytes] = []
            if not chunk:
                self._ended = True
                out.extend(_event(e) for e in self._finish())
            else:
                for data in self._parser.feed_data(chunk):
                    out.extend(self._take(data))
            if out:
                return b"".join(out)
        return b""

    def _take(self, data: bytes) -> list[bytes]:
        if data == b"[DONE]":
            self._ended = True
            return [_event(e) for e in self._finish()]
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return [_MALFORMED]
        if not isinstance(chunk, dict):
            return []
        error = chunk.get("error")
        if error is not None:
            message = error.get("message") if isinstance(error, dict) else str(error)
            return [_event(self._error(str(message)))]
        return [_event(e) for e in self._feed(chunk)]

    def release(self) -> None:
        self._inner.release()


def _event(event: Event) -> bytes:
    name, data = event
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
