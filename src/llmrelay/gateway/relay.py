"""Relaying an OpenAI chat stream from a provider to the client, event by event.

`prime` reads ahead until the first event that carries content, so a route that fails
before that can still be swapped for the next one without the client seeing anything.
After that the stream is committed: a break or stall ends it with an error event, never
with `[DONE]`. The stream is complete once every choice has its finish reason (and the
usage chunk has come, when the client asked for one); `[DONE]` then goes out at once.

Every upstream event is parsed (a malformed one is dropped and counted) and passed on with
only `model` renamed: the rename is one byte replacement per chunk (see
protocols.openai.ModelRename); an event it missed is re-serialised.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from typing import Any

import orjson
import structlog

from llmrelay.deadlines import Deadline, Deadlines
from llmrelay.gateway.call import CLIENT_CLOSED_REQUEST, CallRecord
from llmrelay.gateway.errors import GatewayError, UpstreamFailed, UpstreamTimeout
from llmrelay.protocols.openai import DONE, ModelRename, error_event
from llmrelay.protocols.sse import SSEParser, event_data
from llmrelay.providers.base import UpstreamResponse
from llmrelay.providers.errors import UpstreamError, UpstreamProtocolError, UpstreamTimeoutError
from llmrelay.snapshot.model import RouteSnap

log = structlog.get_logger(__name__)

_CONTENT_FIELDS = ("content", "tool_calls", "function_call", "refusal", "reasoning_content")
_DATA = b"data: "
_END = b"\n\n"
_DONE_EVENT = b"data: [DONE]\n\n"


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
        rename: ModelRename,
        on_malformed: Callable[[], None],
        on_end: Callable[[CallRecord], None],
    ) -> None:
        self._route = route
        self._response = response
        self._parser = SSEParser()
        self._rename = rename
        self._upstream_model = route.upstream_model
        self._virtual_model = virtual_model
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
        self._deadline: Deadline | None = None

    @property
    def _complete(self) -> bool:
        return self._done or (
            len(self._finished) >= self._choices and (self._usage_seen or not self._usage_requested)
        )

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
                if not chunk:
                    if self._finished and len(self._finished) >= self._choices:
                        break  # finished; only the usage chunk never came
                    raise UpstreamProtocolError("stream ended before its finish reason")
                self._take(chunk, out, priming=False)
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
            if self._deadline is not None:
                self._deadline.stop()
            self._response.release()
            self._on_end(record)

    def _take(self, chunk: bytes, out: list[bytes], *, priming: bool) -> bool:
        """Parse one upstream chunk's events into `out` (as client bytes); stop at completion.
        Returns whether any event carried content (only looked at while priming; a finish
        reason or usage counts as content).

        This runs for every chunk of every stream, so it is tight: one parse per event, a
        few dict lookups, and when the chunk is plain `data:` events that all pass unchanged
        (the usual case) the output is the chunk's own text, not a rebuilt copy. Measured:
        byte searches over the chunk cost about as much per byte as parsing it, so the
        checks are made on the parsed events, not on the bytes."""
        text = self._parser.complete_text(self._rename.in_bytes(chunk))
        if not text:
            return False
        blocks = text[:-2].split(b"\n\n")
        plain = text.count(b"\n") == 2 * len(blocks)
        if plain:
            for block in blocks:
                if block[:6] != _DATA:
                    plain = False
                    break
        datas = [block[6:] for block in blocks] if plain else event_data(text)
        kept: list[bytes] | None = None if plain else []  # None: the text passes as it is
        loads = orjson.loads
        upstream = self._upstream_model
        content = False
        for position, data in enumerate(datas):
            if data == b"[DONE]":
                self._done = True
                content = True
                if kept is None and position < len(datas) - 1:
                    kept = datas[:position]
                break
            try:
                event = loads(data)
            except orjson.JSONDecodeError:
                event = None
            if type(event) is not dict:
                if data:  # an event with no data (a named ping) is not malformed
                    self._on_malformed()
                    log.warning("upstream_malformed_event", request_id=self._request_id)
                if kept is None:
                    kept = datas[:position]
                continue
            if "error" in event:
                raise UpstreamProtocolError(f"provider sent an error event: {_error_text(event)}")
            choices = event.get("choices")
            if choices:
                choice = choices[0] if type(choices) is list and len(choices) == 1 else None
                if type(choice) is dict:  # the usual single choice, inline
                    if choice.get("finish_reason") is not None:
                        index = choice.get("index")
                        self._finished.add(index if type(index) is int else 0)
                        content = True
                    elif priming and not content:
                        delta = choice.get("delta")
                        if type(delta) is dict:
                            content = any(delta.get(f) for f in _CONTENT_FIELDS)
                else:
                    if priming and not content and self._has_content(choices):
                        content = True
                    if self._look_at_choices(choices):
                        content = True
            usage = event.get("usage")
            if usage:
                self._usage_seen = True
                self._record.take_usage(usage)
                content = True
            if event.get("model") == upstream:  # the byte rename missed it (odd spacing)
                event["model"] = self._virtual_model
                if kept is None:
                    kept = datas[:position]
                kept.append(orjson.dumps(event))
            elif kept is not None:
                kept.append(data)
            if self._finished and self._complete:
                rest = len(datas) - 1 - position
                if rest and kept is None:
                    if rest == 1 and datas[-1] == b"[DONE]":
                        self._done = True  # the provider's own end: ours replaces it
                    else:
                        kept = datas[: position + 1]  # events after completion are dropped
                break
        if kept is None:
            if self._done and text.endswith(_DONE_EVENT):
                text = text[: -len(_DONE_EVENT)]
            if text:
                out.append(text)
        elif kept:
            out.append(_DATA + b"\n\ndata: ".join(kept) + _END)
        return content

    def _look_at_choices(self, choices: Any) -> bool:
        """Record finished choices; True if any choice finished."""
        finished = False
        if type(choices) is not list:
            return False
        for choice in choices:
            if type(choice) is dict and choice.get("finish_reason") is not None:
                index = choice.get("index")
                self._finished.add(index if type(index) is int else 0)
                finished = True
        return finished

    @staticmethod
    def _has_content(choices: Any) -> bool:
        if type(choices) is not list:
            return False
        for choice in choices:
            if type(choice) is dict:
                if choice.get("finish_reason") is not None:
                    return True
                delta = choice.get("delta")
                if type(delta) is dict and any(delta.get(f) for f in _CONTENT_FIELDS):
                    return True
        return False


def _error_text(chunk: dict[str, Any]) -> str:
    error = chunk.get("error")
    if isinstance(error, dict):
        return str(error.get("message", ""))[:200]
    return str(error)[:200]
