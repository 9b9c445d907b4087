"""Relaying an OpenAI chat stream from a provider to the client, event by event.

`prime` reads ahead until the first event that carries content, so a route that fails
before that can still be swapped for the next one without the client seeing anything.
After that the stream is committed: a break or stall ends it with an error event, never
with `[DONE]`. The stream is complete once every choice has its finish reason (and the
usage chunk has come, when the client asked for one); `[DONE]` then goes out at once.

Every upstream event is parsed (a malformed one is dropped and counted) and passed on with
only `model` renamed (see protocols.openai.ModelRename).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import orjson
import structlog

from llmrelay.gateway.call import CLIENT_CLOSED_REQUEST, CallRecord
from llmrelay.gateway.errors import GatewayError, UpstreamFailed, UpstreamTimeout
from llmrelay.gateway.watch import SilenceWatchdog
from llmrelay.protocols.openai import DONE, ModelRename, error_event
from llmrelay.protocols.sse import SSEParser
from llmrelay.providers.base import UpstreamResponse
from llmrelay.providers.errors import UpstreamError, UpstreamProtocolError, UpstreamTimeoutError
from llmrelay.snapshot.model import RouteSnap

log = structlog.get_logger(__name__)

_CONTENT_FIELDS = ("content", "tool_calls", "function_call", "refusal", "reasoning_content")


class ChatStreamRelay:
    def __init__(
        self,
        route: RouteSnap,
        response: UpstreamResponse,
        *,
        virtual_model: str,
        request_id: str,
        choices: int,
        usage_requested: bool,
        record: CallRecord,
        on_malformed: Callable[[], None],
        on_end: Callable[[CallRecord], None],
    ) -> None:
        self._route = route
        self._response = response
        self._chunks: AsyncIterator[bytes] = response.chunks().__aiter__()
        self._parser = SSEParser()
        self._rename = ModelRename(route.upstream_model, virtual_model)
        self._request_id = request_id
        self._choices = choices
        self._usage_requested = usage_requested
        self._record = record
        self._on_malformed = on_malformed
        self._on_end = on_end
        self._finished: set[int] = set()
        self._usage_seen = False
        self._done = False
        self._primed: list[bytes] = []
        self._watchdog: SilenceWatchdog | None = None

    @property
    def _complete(self) -> bool:
        return self._done or (
            len(self._finished) >= self._choices and (self._usage_seen or not self._usage_requested)
        )

    async def _next_chunk(self) -> bytes | None:
        """The next upstream bytes, or None at the end; the watchdog's expiry is a timeout."""
        watchdog = self._watchdog
        assert watchdog is not None
        try:
            chunk = await anext(self._chunks, None)
        except asyncio.CancelledError:
            if watchdog.claim():
                raise UpstreamTimeoutError(watchdog.phase, watchdog.limit_s) from None
            raise
        watchdog.feed()
        return chunk

    async def prime(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read until the first content event, within the provider's first-token limit."""
        provider = self._route.provider
        self._watchdog = SilenceWatchdog(loop, provider.first_token_timeout_s, "first_token")
        try:
            while True:
                chunk = await self._next_chunk()
                if chunk is None:
                    if self._primed and self._complete:
                        return
                    raise UpstreamProtocolError("stream ended before any content")
                # Every event of this chunk is taken (it has arrived; dropping the rest would
                # lose it); no further chunk is read once one of them carried content.
                seen_content = False
                for event in self._parser.feed(chunk):
                    out, content = self._translate(event[1])
                    if out is not None:
                        self._primed.append(out)
                    seen_content = seen_content or content
                    if self._complete:
                        break
                if seen_content or self._complete:
                    self._watchdog.change(provider.stream_idle_timeout_s, "stream_event")
                    return
        except BaseException:
            self._watchdog.stop()
            raise

    async def events(self) -> AsyncGenerator[bytes, None]:
        """The client's stream; always ends the call record, however the stream ends.

        One yield per upstream chunk (so one write to the client), with `[DONE]` joined to
        the last one."""
        record = self._record
        try:
            out = self._primed
            self._primed = []
            while not self._complete:
                if out:
                    yield b"".join(out)
                    out = []
                chunk = await self._next_chunk()
                if chunk is None:
                    if self._finished and len(self._finished) >= self._choices:
                        break  # finished; only the usage chunk never came
                    raise UpstreamProtocolError("stream ended before its finish reason")
                for event in self._parser.feed(chunk):
                    data, _ = self._translate(event[1])
                    if data is not None:
                        out.append(data)
                    if self._complete:
                        break
            out.append(DONE)
            yield b"".join(out)
        except UpstreamError as exc:
            error: GatewayError = (
                UpstreamTimeout(f"stream stalled: {exc}")
                if isinstance(exc, UpstreamTimeoutError)
                else UpstreamFailed(f"stream broke off: {exc}", code="stream_interrupted")
            )
            record.fail(error.status, error.code)
            log.warning("stream_failed", request_id=self._request_id, error=str(exc))
            yield error_event(error, self._request_id)
        except (asyncio.CancelledError, GeneratorExit):
            record.fail(CLIENT_CLOSED_REQUEST, "client_disconnected")
            raise
        finally:
            if self._watchdog is not None:
                self._watchdog.stop()
            self._response.release()
            self._on_end(record)

    def _translate(self, data: bytes) -> tuple[bytes | None, bool]:
        """One upstream event -> (bytes for the client or None, whether it carries content)."""
        if data == b"[DONE]":
            self._done = True
            return None, True
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            chunk = None
        if not isinstance(chunk, dict):
            self._on_malformed()
            log.warning("upstream_malformed_event", request_id=self._request_id)
            return None, False
        if "error" in chunk:
            raise UpstreamProtocolError(f"provider sent an error event: {_error_text(chunk)}")
        content = False
        choices = chunk.get("choices")
        if choices:
            for choice in choices:
                if not isinstance(choice, dict):
                    continue
                if choice.get("finish_reason") is not None:
                    index = choice.get("index")
                    self._finished.add(index if isinstance(index, int) else 0)
                    content = True
                delta = choice.get("delta")
                if delta and not content:
                    content = any(delta.get(f) for f in _CONTENT_FIELDS)
        usage = chunk.get("usage")
        if usage:
            self._usage_seen = True
            self._record.take_usage(usage)
            content = True
        return b"data: " + self._rename.apply(data, chunk) + b"\n\n", content


def _error_text(chunk: dict[str, Any]) -> str:
    error = chunk.get("error")
    if isinstance(error, dict):
        return str(error.get("message", ""))[:200]
    return str(error)[:200]
