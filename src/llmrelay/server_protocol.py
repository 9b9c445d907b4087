"""uvicorn's httptools protocol with the limits it lacks against slow and oversized clients.

uvicorn bounds an idle kept-alive connection (`timeout_keep_alive`) but nothing else: a
connection that never finishes its request head, or one that sends its head a byte at a time,
or a body that trickles in, holds a socket, a parser and (for a body) a request task for as
long as the client likes; and httptools buffers a request head of any size. This subclass:

- **header timeout** (LLMRELAY_HEADER_TIMEOUT_S): a request head must be complete within
  this long of the connection opening or of its first byte on a kept-alive connection;
  else the connection is closed (with a 408 when part of a request had arrived and no
  answer is being written on it).
- **head size** (LLMRELAY_MAX_HEADER_BYTES): a request line and headers larger than this are
  answered 431 and the connection is closed; a head still growing past it is cut as soon as
  it does, so no more than about one read of the socket past the limit is ever buffered.
- **body timeout backstop** (LLMRELAY_BODY_TIMEOUT_S): a request body not complete one
  second after its limit closes the connection. The data plane enforces the same limit
  itself a second earlier with an answer in the route's protocol (gateway/asgi.py); this
  is for every other route and for bodies nobody reads (a request already answered 401).
- **slow reader** (LLMRELAY_CLIENT_WRITE_BUFFER_BYTES, LLMRELAY_SLOW_READER_TIMEOUT_S): what
  waits to be written to the client is buffered up to the first setting (the transport's
  high-water mark; a quarter of it is the low-water mark). Past it the transport pauses the
  writer: uvicorn's `send` waits, so the relay stops reading the provider and the provider's
  connection fills up in turn (back-pressure, with a bounded buffer at every hop). A
  connection whose writes stay paused for the second setting (the client has not read the
  buffer down to its low-water mark) is aborted; an answer still being written is marked in
  its scope (`SLOW_READER_CUT`) so the data plane records it as `client_too_slow`.

Timers are armed only while a head or a body is incomplete after a read, or while writes are
paused, so a request that arrives in one read and a client that keeps up cost no timer. The
limits are class attributes set once per serving process from its settings (`configure`,
called where the app is built): uvicorn's workers are separate processes that import this
class by name.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import structlog
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from llmrelay.gateway.asgi import SLOW_READER_CUT

log = structlog.get_logger(__name__)

#: How much later than the data plane's own body deadline the connection is closed.
BODY_BACKSTOP_GRACE_S = 1.0


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    header_timeout_s: ClassVar[float] = 10.0
    body_timeout_s: ClassVar[float] = 60.0
    max_header_bytes: ClassVar[int] = 64 * 1024
    slow_reader_timeout_s: ClassVar[float] = 60.0
    write_buffer_bytes: ClassVar[int] = 64 * 1024

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        #: Bytes read while no request body was being read (a bound on the head's size).
        self._head_bytes = 0
        self._head_started = False
        self._body_pending = False
        self._refused = False

    # -- connection --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        transport.set_write_buffer_limits(high=self.write_buffer_bytes)
        self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if not self._body_pending:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._refused or self.transport.is_closing():
            return
        if self._body_pending:
            if self._body_timer is None:
                delay = self.body_timeout_s + BODY_BACKSTOP_GRACE_S
                self._body_timer = self.loop.call_later(delay, self._body_timed_out)
        elif self._head_started or not self._answering():
            # Part of a head (or bytes that began none, such as stray line ends) is here.
            if self._head_bytes > self.max_header_bytes:
                self._refuse(431, "Request header fields too large.")
            elif self._head_timer is None:
                self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(
                self.slow_reader_timeout_s, self._reader_too_slow
            )

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    # -- parser callbacks ----------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._head_started = True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if self._head_bytes > self.max_header_bytes and self._head_size() > self.max_header_bytes:
            # (The bytes read since the head began bound its size: the exact count is made
            # only when they pass the cap, as a body read with the head can make them.)
            self._refuse(431, "Request header fields too large.")
            return
        self._head_started = False
        self._head_bytes = 0
        self._body_pending = True
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._body_pending = False
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().on_message_complete()

    # -- limits --------------------------------------------------------------------------

    def _head_size(self) -> int:
        return len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)

    def _answering(self) -> bool:
        """Whether an answer on this connection is still being made or written."""
        return self.cycle is not None and not self.cycle.response_complete

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._answering():
            # A pipelined head while an answer is written: closing would cut the answer;
            # judge again once it could be over.
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)
            return
        if self._head_started:
            self._refuse(408, "Request header timeout.")
        else:
            self.transport.close()

    def _body_timed_out(self) -> None:
        self._body_timer = None
        if not self._body_pending or self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is None or self.transport.get_protocol() is not self:
            return  # upgraded to another protocol, which has its own limits
        if not cycle.response_started:
            # The app gets a disconnect and whatever it sends now goes nowhere, as when the
            # client itself has gone.
            cycle.disconnected = True
            cycle.message_event.set()
            self._write_error(408, "Request body timeout.")
        self._refused = True
        self.transport.close()

    def _reader_too_slow(self) -> None:
        """Writes stayed paused for the limit: the client is not reading. Abort (a close
        would wait for the buffer to drain, which it will not)."""
        self._write_timer = None
        cycle = self.cycle
        answering = self._answering()
        if answering and cycle is not None:
            scope: dict[str, object] = cycle.scope  # type: ignore[assignment]
            scope[SLOW_READER_CUT] = True  # an extension key: the data plane reads it
        log.warning(
            "slow_reader_cut",
            client=f"{self.client[0]}:{self.client[1]}" if self.client else None,
            buffered=self.transport.get_write_buffer_size(),
            limit_s=self.slow_reader_timeout_s,
            answering=answering,
        )
        self._refused = True
        self.transport.abort()

    def _refuse(self, status: int, message: str) -> None:
        """Answer a plain-text error and close: nothing more is read on this connection."""
        self._refused = True
        self._cancel_timers()
        if not self._answering():
            self._write_error(status, message)
        self.transport.close()

    def _write_error(self, status: int, message: str) -> None:
        body = message.encode("ascii")
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [
            b"content-type: text/plain; charset=utf-8\r\n",
            b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
            b"connection: close\r\n\r\n",
            body,
        ]
        self.transport.write(b"".join(head))

    def _cancel_timers(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None


def configure(
    header_timeout_s: float,
    body_timeout_s: float,
    max_header_bytes: int,
    *,
    slow_reader_timeout_s: float = 60.0,
    write_buffer_bytes: int = 64 * 1024,
) -> None:
    """Set this process's limits (before it accepts a connection)."""
    GuardedHttpToolsProtocol.header_timeout_s = header_timeout_s
    GuardedHttpToolsProtocol.body_timeout_s = body_timeout_s
    GuardedHttpToolsProtocol.max_header_bytes = max_header_bytes
    GuardedHttpToolsProtocol.slow_reader_timeout_s = slow_reader_timeout_s
    GuardedHttpToolsProtocol.write_buffer_bytes = write_buffer_bytes
