"""Small ASGI helpers for the data plane: body reading under the size cap, JSON and SSE
answers. Plain functions over (receive, send), so the hot path builds no request or response
objects and no middleware wrappers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from types import MappingProxyType
from typing import Final

from starlette.types import Receive, Scope, Send

from llmrelay.deadlines import Deadlines
from llmrelay.gateway.errors import ClientDisconnected, PayloadTooLarge, RequestTimeout
from llmrelay.gateway.stream_relay import StreamRelay
from llmrelay.gateway.watch import ClientWatches

JSON_TYPE: Final = (b"content-type", b"application/json")
SSE_HEADERS: Final = (
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
)


def too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"request body is larger than the limit of {limit} bytes")


_CLOSE: Final = MappingProxyType({"Connection": "close"})
#: The scope key the server sets (True) on a request whose answer it cut because the client
#: stopped reading (server_protocol.py).
SLOW_READER_CUT: Final = "llmrelay.slow_reader_cut"


async def read_body(receive: Receive, limit: int, timeout_s: float, deadlines: Deadlines) -> bytes:
    """The whole request body; 413 as soon as it passes `limit` (the rest is never read),
    408 when it is not all here within `timeout_s` (a client trickling its body would
    otherwise hold the request, and its admission, for as long as it likes). Either way the
    connection is closed after the answer, the rest of the body unread.

    The limit is kept by the process's deadline sweep (deadlines.py): a timer of its own, or
    `asyncio.timeout`, costs some 2 to 5 us a request (measured), the sweep a dict entry."""
    deadline = deadlines.watch(timeout_s, "body")
    try:
        return await _read_body(receive, limit)
    except asyncio.CancelledError:
        if deadline.claim():
            raise RequestTimeout(
                f"the request body did not arrive within {timeout_s:g} seconds",
                headers=_CLOSE,
            ) from None
        raise
    finally:
        deadline.stop()


async def _read_body(receive: Receive, limit: int) -> bytes:
    message = await receive()
    if message["type"] == "http.disconnect":
        raise ClientDisconnected
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        if len(body) > limit:
            raise too_large(limit)
        return body
    chunks = [body]
    size = len(body)
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def send_json(
    send: Send, status: int, body: bytes, headers: Iterable[tuple[bytes, bytes]]
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [JSON_TYPE, (b"content-length", str(len(body)).encode()), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_sse(
    receive: Receive,
    send: Send,
    relay: StreamRelay,
    headers: Iterable[tuple[bytes, bytes]],
    watches: ClientWatches,
    head: tuple[tuple[bytes, bytes], ...] | None = None,
    scope: Scope | None = None,
) -> None:
    """Stream the relay's events to the client as they come; stop the moment the client
    disconnects. The relay is always closed here, so its cleanup runs at once. `head`: the
    content headers, when not SSE's (Gemini's JSON-array stream).

    The last chunk of a normal end goes out with the end of the body, after the relay has
    finished its record: one write instead of two (uvicorn writes the chunk and the chunked
    terminator together), and no disconnect watch left open once the answer is complete.
    Not when the answer is captured (gateway/capture.py): its last chunk goes out before the
    record is finished, so the capture queued with the record is whole.

    A stream that priming already read to its end (`StreamRelay.whole`) goes out as one body,
    with no event loop over it and no watch.

    A client that stops reading holds the stream back (the server's write buffer is bounded:
    `send` waits, and the provider is not read meanwhile); one that stays stopped is cut by
    the server (server_protocol.py), which marks the request's `scope`: the call is then
    recorded as `client_too_slow` rather than `client_disconnected`."""
    start = {
        "type": "http.response.start",
        "status": 200,
        "headers": [*(SSE_HEADERS if head is None else head), *headers],
    }
    whole = None if relay.captured else relay.whole()
    if whole is not None:
        try:
            await send(start)
            await send({"type": "http.response.body", "body": whole, "more_body": False})
        except (ClientDisconnected, OSError):
            pass  # nothing more can reach the client
        return
    try:
        await send(start)
        join_last = not relay.captured
        last = b""
        with watches.watch(receive):
            while (part := await relay.next_part()) is not None:
                if relay.ended and join_last:
                    last = part  # the relay's next call ends it
                else:
                    await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": last, "more_body": False})
    except (ClientDisconnected, OSError):
        # Nothing more can reach the client.
        if scope is not None and scope.get(SLOW_READER_CUT):
            relay.abandon("client_too_slow")
    finally:
        relay.abandon()  # nothing, once the stream is over
