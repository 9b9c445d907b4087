"""Small ASGI helpers for the data plane: body reading, JSON and SSE answers, and
watching for a client that goes away. Plain functions over (receive, send), so the hot
path builds no request or response objects."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from types import TracebackType

from starlette.types import Receive, Send

from llmrelay.gateway.errors import ClientDisconnected

JSON_HEADERS = ((b"content-type", b"application/json"),)
SSE_HEADERS = (
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
)


async def read_body(receive: Receive) -> bytes:
    """The whole request body (the ingress middleware enforces the size cap)."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def send_json(
    send: Send, status: int, body: bytes, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*JSON_HEADERS, (b"content-length", str(len(body)).encode()), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})


class DisconnectWatch:
    """Cancel the current task when the client disconnects; re-raise as ClientDisconnected.

    Used around upstream calls so a client that leaves stops the provider call at once,
    not when the answer is finally written.
    """

    __slots__ = ("_receive", "_task", "_watcher", "disconnected")

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self.disconnected = False

    async def __aenter__(self) -> DisconnectWatch:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._watcher = asyncio.create_task(self._watch())
        return self

    async def _watch(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self.disconnected = True
                self._task.cancel()
                return

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._watcher.cancel()
        if self.disconnected and exc_type is asyncio.CancelledError:
            self._task.uncancel()
            raise ClientDisconnected


async def send_sse(
    receive: Receive,
    send: Send,
    events: AsyncIterator[bytes],
    headers: Iterable[tuple[bytes, bytes]],
) -> None:
    """Stream `events` to the client, each flushed as it comes; stop the moment the client
    disconnects. The iterator is always closed here, so its cleanup runs at once."""
    await send({"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *headers]})
    try:
        async with DisconnectWatch(receive):
            async for chunk in events:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    except (ClientDisconnected, OSError):
        pass  # nothing more can reach the client
    finally:
        await events.aclose()  # type: ignore[attr-defined]
