"""What every stream relay does, whatever the client's protocol.

`prime` reads ahead until the first upstream event that carries content, so a route that
fails before that can still be swapped for the next one without the client seeing anything.
After that the stream is committed: a break or stall ends it with the protocol's error
event, never with its normal end. Subclasses say how one upstream chunk is taken (`_take`),
when the stream is complete, and how its end and its errors are written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

import orjson
import structlog

from llmrelay.deadlines import Deadline, Deadlines
from llmrelay.gateway.call import CLIENT_CLOSED_REQUEST, CallRecord
from llmrelay.gateway.errors import GatewayError, UpstreamFailed, UpstreamTimeout
from llmrelay.protocols.sse import SSEParser
from llmrelay.providers.base import UpstreamResponse
from llmrelay.providers.errors import (
    UpstreamError,
    UpstreamErrorEvent,
    UpstreamProtocolError,
    UpstreamTimeoutError,
)
from llmrelay.snapshot.model import RouteSnap

log = structlog.get_logger(__name__)


class StreamRelay:
    def __init__(
        self,
        route: RouteSnap,
        response: UpstreamResponse,
        *,
        request_id: str,
        record: CallRecord,
        on_end: Callable[[CallRecord], None],
    ) -> None:
        self._route = route
        self._response = response
        self._request_id = request_id
        self._record = record
        self._on_end = on_end
        self._primed: list[bytes] = []
        self._deadline: Deadline | None = None
        #: Upstream events taken so far (`_take` counts them); the record learns how many
        #: reached the client, for an estimate when the usage never comes.
        self._taken = 0
        #: Set just before the last piece of a normal end is given: the writer can send it
        #: with the end of the body (one write, not two).
        self.ended = False
        self._state = _STREAMING
        #: Mid-stream rescue (gateway/rescue.py): given a committed stream's failure, whether
        #: another route now continues it. None (the usual case): the failure ends it.
        self._rescue: Callable[[UpstreamError], Awaitable[bool]] | None = None

    @property
    def captured(self) -> bool:
        """Whether the request's key captures its bodies (see asgi.send_sse)."""
        return self._record.capture is not None

    # -- what a protocol decides ---------------------------------------------------------

    @property
    def _complete(self) -> bool:
        raise NotImplementedError

    def _take(self, chunk: bytes, out: list[bytes], *, priming: bool) -> bool:
        """Take one upstream chunk's events into `out` (as client bytes); return whether
        any carried content (looked at while priming)."""
        raise NotImplementedError

    def _ended_early_is_complete(self) -> bool:
        """The upstream stream ended before `_complete`: whether what came is enough."""
        return False

    def _closing(self) -> bytes:
        """The protocol's normal end, after the last event (`[DONE]` for chat)."""
        return b""

    def _error_event(self, error: GatewayError) -> bytes:
        raise NotImplementedError

    # -- the shared machinery ------------------------------------------------------------

    async def _next_chunk(self) -> bytes:
        """The next upstream bytes (b"" at the end); the deadline's expiry is a timeout."""
        deadline = self._deadline
        assert deadline is not None
        deadline.resume()
        try:
            chunk = await self._response.next_chunk()
        except asyncio.CancelledError:
            if deadline.claim():
                raise UpstreamTimeoutError(deadline.phase, deadline.limit_s) from None
            raise
        deadline.pause()
        return chunk

    async def prime(self, deadlines: Deadlines) -> None:
        """Read until the first content event, within the provider's first-token limit."""
        provider = self._route.provider
        self._deadline = deadlines.watch(provider.first_token_timeout_s, "first_token")
        try:
            while True:
                chunk = await self._next_chunk()
                if not chunk:
                    if self._primed and self._complete:
                        return
                    raise UpstreamProtocolError("stream ended before any content")
                # Every event of this chunk is taken (it has arrived; dropping the rest would
                # lose it); no further chunk is read once one of them carried content.
                if self._take(chunk, self._primed, priming=True) or self._complete:
                    self._deadline.change(provider.stream_idle_timeout_s, "stream_event")
                    return
        except BaseException:
            self._deadline.stop()
            raise

    def whole(self) -> bytes | None:
        """The client's whole stream when priming read all of it (a short answer from a fast
        provider arrives in one read), with the record ended; None when more is to come.
        Then the answer needs no event loop, client watch or further deadline."""
        if not self._complete:
            return None
        out = self._primed
        self._primed = []
        out.append(self._closing())
        self.ended = True
        self._state = _OVER
        self._record.delivered_events = self._taken
        self._close()
        return b"".join(out)

    def _close(self) -> None:
        """However the stream ended: no more deadline, the upstream released, the record
        ended (once)."""
        if self._deadline is not None:
            self._deadline.stop()
        self._response.release()
        self._on_end(self._record)

    async def next_part(self) -> bytes | None:
        """The next piece of the client's stream (one per upstream chunk, the protocol's end
        joined to the last one); None once it is over, the call record then ended.

        A plain coroutine rather than an async generator, so the module compiles (mypyc has
        no async generators): the relay keeps where it is in `_state`. The record is ended
        by the call after the last piece, as a generator's `finally` would: a captured
        answer (gateway/capture.py) has sent its last piece by then."""
        state = self._state
        if state:
            if state != _OVER:
                self._state = _OVER
                self._close()
            return None
        record = self._record
        while True:  # again only after a rescue (the continuation's events are primed)
            try:
                out = self._primed
                self._primed = []
                while not self._complete:
                    if out:
                        record.delivered_events = self._taken
                        return b"".join(out)
                    chunk = await self._next_chunk()
                    if not chunk:
                        if self._ended_early_is_complete():
                            break
                        raise UpstreamProtocolError("stream ended before its finish")
                    self._take(chunk, out, priming=False)
                closing = self._closing()
                if closing:
                    out.append(closing)
                self._state = _LAST
                if not out:
                    return await self.next_part()
                self.ended = True
                record.delivered_events = self._taken
                return b"".join(out)
            except UpstreamError as exc:
                if self._rescue is not None and await self._rescued(exc):
                    continue
                error: GatewayError = (
                    UpstreamTimeout(f"stream stalled: {exc}")
                    if isinstance(exc, UpstreamTimeoutError)
                    else UpstreamFailed(f"stream broke off: {exc}", code="stream_interrupted")
                )
                record.fail(error.status, error.code)
                log.warning("stream_failed", request_id=self._request_id, error=_log_reason(exc))
                self._state = _FAILED
                return self._error_event(error)
            except asyncio.CancelledError:
                record.fail(CLIENT_CLOSED_REQUEST, "client_disconnected")
                self._state = _OVER
                self._close()
                raise
            except BaseException:
                self._state = _OVER
                self._close()
                raise

    async def _rescued(self, failure: UpstreamError) -> bool:
        """Whether `_rescue` continued the stream; a client that leaves meanwhile (or any
        other exception) ends the call as it would while streaming."""
        assert self._rescue is not None
        try:
            return await self._rescue(failure)
        except asyncio.CancelledError:
            self._record.fail(CLIENT_CLOSED_REQUEST, "client_disconnected")
            self._state = _OVER
            self._close()
            raise
        except BaseException:
            self._state = _OVER
            self._close()
            raise

    def abandon(self, code: str = "client_disconnected") -> None:
        """The client will take no more (it left, a write to it failed, or it read too
        slowly: `code` says which): the call ends as a client disconnect, unless the stream
        had already failed, and is closed. Does nothing once the stream is over."""
        state = self._state
        if state == _OVER:
            return
        if state != _FAILED:
            self._record.fail(CLIENT_CLOSED_REQUEST, code)
        self._state = _OVER
        self._close()

    async def read_rest(self) -> bytes:
        """The rest of the client's stream as one body (after `prime`)."""
        parts = []
        while (part := await self.next_part()) is not None:
            parts.append(part)
        return b"".join(parts)


#: StreamRelay._state: streaming, the last piece given, the error event given, over.
_STREAMING: Final = 0
_LAST: Final = 1
_FAILED: Final = 2
_OVER: Final = 3


class ParsedEventRelay(StreamRelay):
    """A relay for protocols whose every event is parsed (Messages, Responses, Gemini: not the
    hot path; chat's relay is the tuned one). A malformed event is dropped and counted, an
    `error` event fails the route before the first byte and reaches the client after it, and
    nothing after the protocol's end is passed on. Subclasses say what one event does
    (`_event`, or the whole of `_pass` for a protocol without named events)."""

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
        self._ended = False
        #: Mid-stream rescue (gateway/rescue_events.py): what reads the events the client
        #: gets. None (the usual case): nothing does.
        self._tap: Tap | None = None

    @property
    def _complete(self) -> bool:
        return self._ended

    def _event(self, kind: str, event: dict[str, Any], data: bytes) -> tuple[bytes, bool]:
        """The data to pass on for one event (`data`, or the event written anew when it was
        changed) and whether it carried content; sets `_ended` at the protocol's end."""
        raise NotImplementedError

    def _take(self, chunk: bytes, out: list[bytes], *, priming: bool) -> bool:
        content = False
        tap = self._tap
        for name, data in self._parser.feed(chunk):
            if self._ended:
                break  # anything after the end is not part of the answer
            try:
                event = orjson.loads(data) if data else None
            except orjson.JSONDecodeError:
                event = None
            if not isinstance(event, dict):
                if data:
                    self._on_malformed()
                    log.warning("upstream_malformed_event", request_id=self._request_id)
                continue
            content = self._pass(name, event, data, out) or content
            if tap is not None:
                tap.see(name, event)
        if tap is not None:
            tap.commit()  # (not when taking raised: then none of it reached the client)
        return content

    def tap(self, tap: Tap, rescue: Callable[[UpstreamError], Awaitable[bool]]) -> None:
        """Mid-stream rescue: `tap` reads every event the client gets, `rescue` is asked
        when the stream fails after its first byte (gateway/rescue_events.py)."""
        self._tap = tap
        self._rescue = rescue

    def let_go(self) -> None:
        """The route broke off, and a rescue takes over: its deadline and response dropped."""
        if self._deadline is not None:
            self._deadline.stop()
        self._response.release()

    def resume(self, route: RouteSnap, response: UpstreamResponse) -> None:
        """Go on reading from `response` (a rescue's continuation, written as this
        protocol's events) as this stream's source; `prime` follows."""
        self._route = route
        self._response = response
        self._parser = SSEParser()
        self._primed = []
        self._ended = False

    def _pass(self, name: str | None, event: dict[str, Any], data: bytes, out: list[bytes]) -> bool:
        """Append one parsed event, as the client gets it, to `out`; whether it carried
        content. Raises UpstreamErrorEvent for an error event."""
        kind = str(event.get("type") or name)
        if kind == "error":
            raise UpstreamErrorEvent(_error_text(event))
        data, carried = self._event(kind, event, data)
        self._taken += 1
        out.append(b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n")
        return carried


class Tap(Protocol):
    """Reads the events a parsed-event relay passes on (see ParsedEventRelay.tap)."""

    def see(self, name: str | None, event: dict[str, Any]) -> None: ...

    def commit(self) -> None: ...


def _log_reason(exc: UpstreamError) -> str:
    """Why a stream failed, for the log: our own words (timeouts, connection errors name no
    URL, see providers.http), never the provider's, which can quote the prompt."""
    return exc.reason if isinstance(exc, UpstreamErrorEvent) else str(exc)


def _error_text(event: dict[str, Any]) -> str:
    """An error event's message: Anthropic nests it in `error`, OpenAI's Responses does not."""
    error = event.get("error")
    if isinstance(error, dict):
        return str(error.get("message", ""))[:200]
    return str(event.get("message") or error)[:200]
