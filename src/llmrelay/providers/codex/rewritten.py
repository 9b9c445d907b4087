"""An upstream answer read whole and rewritten before the gateway reads it: the Codex
backend only streams, so a client that asked for one JSON answer gets the stream read to its
end and turned into that answer (a Response, or the Images API's answer of an image call)."""

from __future__ import annotations

from collections.abc import Callable

from llmrelay.providers.base import UpstreamResponse


class RewrittenAnswer:
    """`inner`'s body, whole, through `rewrite` (JSON out). Error answers pass through as
    they are: their body is the backend's error, which the gateway maps itself."""

    __slots__ = ("_inner", "_rewrite", "status")

    def __init__(self, inner: UpstreamResponse, rewrite: Callable[[bytes], bytes]) -> None:
        self._inner = inner
        self._rewrite = rewrite
        self.status = inner.status

    def header(self, name: str) -> str | None:
        if name.lower() == "content-type" and self.status < 300:
            return "application/json"
        return self._inner.header(name)

    async def read(self) -> bytes:
        raw = await self._inner.read()
        if self.status >= 300:
            return raw
        return self._rewrite(raw)

    async def next_chunk(self) -> bytes:
        return await self.read()  # not a stream to its reader: all at once

    def release(self) -> None:
        self._inner.release()
