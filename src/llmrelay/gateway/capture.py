"""Payload capture: the bodies of one request of a key configured `capture: full`.

What is kept is what crossed the wire, never a re-serialisation: the request body as read,
and the response body as the client was sent it (a JSON answer's bytes, a stream's chunks
as written, the gateway's own error answers and error events included). Headers are never
kept, so neither the client's API key nor a provider credential can end up in a payload.
Each body is capped (LLMRELAY_CAPTURE_MAX_BYTES): the first `limit` bytes are kept, with a
truncation flag and the body's full size.

A key that does not capture costs one attribute check per request (`KeySnap.capture`): no
Capture is made, `send` is not wrapped and no chunk is copied. The row goes to the recorder
with the request's record (see Dispatcher.finish), into `request_payloads`, a table of its
own so that nothing reading records for usage or analytics ever reads a body.
"""

from __future__ import annotations

from typing import Any, Final

from starlette.types import Message, Receive, Send

#: The order of `Capture.row()`; the recorder inserts payload rows as tuples in this order.
PAYLOAD_COLUMNS: Final = (
    "request_id",
    "created_at",
    "request_body",
    "response_body",
    "request_truncated",
    "response_truncated",
    "request_bytes",
    "response_bytes",
)

DEFAULT_MAX_BYTES: Final = 1024 * 1024


class _Capped:
    """One body as it passes in chunks: the first `limit` bytes kept, every byte counted."""

    __slots__ = ("kept", "parts", "size")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.kept = 0
        self.size = 0

    def add(self, chunk: bytes, limit: int) -> None:
        size = len(chunk)
        self.size += size
        room = limit - self.kept
        if size and room > 0:
            kept = chunk if size <= room else chunk[:room]
            self.parts.append(kept)
            self.kept += len(kept)

    def body(self) -> bytes:
        parts = self.parts
        return parts[0] if len(parts) == 1 else b"".join(parts)


class Capture:
    """One request's bodies, filled in while it runs (mutable on purpose, like CallRecord):
    the request's from `receive`, the response's from `send`, as the server passes them."""

    __slots__ = ("_answered", "_request", "_request_done", "_response", "limit")

    def __init__(self, limit: int = DEFAULT_MAX_BYTES) -> None:
        self.limit = limit
        self._request = _Capped()
        #: Whether the request body was read to its end (not when refused as too large, or
        #: when the client left first: no body is then kept).
        self._request_done = False
        #: None until the response started.
        self._response: _Capped | None = None
        #: The whole answer was handed over before it was sent (`answered`).
        self._answered = False

    def wrap(self, send: Send, receive: Receive) -> tuple[Send, Receive]:
        """`send` and `receive`, keeping a copy of the body chunks that pass through them
        (a chunk sent is kept once the server took it)."""

        async def sending(message: Message) -> None:
            await send(message)
            if self._answered:
                return
            kind = message["type"]
            if kind == "http.response.body":
                if self._response is None:
                    self._response = _Capped()
                self._response.add(message.get("body", b""), self.limit)
            elif kind == "http.response.start":
                self._response = _Capped()

        async def receiving() -> Message:
            message = await receive()
            if message["type"] == "http.request" and not self._request_done:
                self._request.add(message.get("body", b""), self.limit)
                self._request_done = not message.get("more_body", False)
            return message

        return sending, receiving

    def answered(self, body: bytes) -> None:
        """The whole answer, before it is sent: its record is finished first (so the
        payload row goes with it), and what `send` then passes is not kept twice."""
        response = self._response = _Capped()
        response.add(body, self.limit)
        self._answered = True

    def keep(self, request: bytes, response: bytes) -> None:
        """Both bodies at once, for a call no client is connected to (a durable job's: the
        request as it was submitted, the answer as its client reads it)."""
        self._request.add(request, self.limit)
        self._request_done = True
        self._response = _Capped()
        self._response.add(response, self.limit)

    def replace_request(self, body: bytes) -> None:
        """Keep `body` instead of the request as read: the body as guardrails masked it, so
        no text a mask or block rule matched is stored (gateway/guard.py). Its size is the
        masked body's."""
        if not self._request_done:
            return
        request = self._request = _Capped()
        request.add(body, self.limit)

    def row(self, request_id: str, created: float) -> tuple[Any, ...]:
        """The payload row in PAYLOAD_COLUMNS order; `created_at` is the record's (a Unix
        timestamp), so a payload is never pruned later than its record."""
        limit = self.limit
        request = self._request if self._request_done else None
        response = self._response
        return (
            request_id,
            created,
            None if request is None else request.body(),
            None if response is None else response.body(),
            request is not None and request.size > limit,
            response is not None and response.size > limit,
            None if request is None else request.size,
            None if response is None else response.size,
        )
