"""uvicorn's httptools protocol with the response head written by compiled code
(gateway/response_head.py): the same bytes, for about a quarter of the instructions
(some 1.3k a header against uvicorn's 5k, by callgrind).

A head that announces a Content-Length of at most `JOIN_MAX` bytes waits for the body's
first message and goes out with it in one write: the gateway's JSON answers (two ASGI sends,
back to back) then cost one system call instead of two, and the client gets one segment (on
loopback the sender's write runs the receiver's TCP path too: the bare proxy's CPU per plain
answer at c=8 fell by about a third, llmrelay's by about a fifth; docs/performance.md).
Streams and longer bodies get their head at once, as before.

uvicorn makes a `RequestResponseCycle` per request by its module's name for the class, so
`install` replaces that name with a subclass whose `send` writes the head of a response and
leaves everything else (bodies, flow control, errors, a head it cannot vouch for) to
uvicorn. The subclass sets the cycle's own fields as uvicorn's `send` does, so it is tied to
uvicorn's internals: it is installed only for the uvicorn versions it was checked against
(tests/test_server_head.py fails when the installed uvicorn is not one of them)."""

from __future__ import annotations

from typing import Any, Final

import uvicorn
from uvicorn.protocols.http import httptools_impl

from llmrelay.gateway.response_head import response_head

#: The uvicorn releases (major.minor) whose RequestResponseCycle this was checked against.
CHECKED_VERSIONS = ("0.55",)

_Base = httptools_impl.RequestResponseCycle
_STATUS_LINES: dict[int, bytes] = httptools_impl.STATUS_LINE
#: The longest announced body whose head waits to be written with it (a longer one would be
#: copied to join them).
JOIN_MAX: Final = 64 * 1024


class FastHeadCycle(_Base):
    #: A head the fast path made that waits for the body's first message.
    held: bytes | None = None

    async def send(self, message: Any) -> None:
        held = self.held
        if held is not None:
            self.held = None
            if message["type"] == "http.response.body":
                # uvicorn counts what it writes against the Content-Length: the head too now.
                self.expected_content_length += len(held)
                body = held + message.get("body", b"")
                message = {**message, "body": body}
            elif not self.disconnected:
                self.transport.write(held)  # uvicorn then refuses the message, as before
            await super().send(message)
            return
        if (
            not self.response_started
            and message["type"] == "http.response.start"
            and not self.disconnected
            and not self.flow.write_paused
            and not self.access_log
        ):
            headers = message.get("headers", [])
            if self.default_headers:
                headers = self.default_headers + list(headers)
            elif type(headers) is not list:
                headers = list(headers)
            head = response_head(
                _STATUS_LINES,
                message["status"],
                headers,
                self.keep_alive,
                self.scope["method"] == "HEAD",
            )
            if head is not None:
                self.response_started = True
                self.waiting_for_100_continue = False
                self.keep_alive = head.keep_alive
                if head.chunked is not None:
                    self.chunked_encoding = head.chunked
                    self.expected_content_length = head.length
                joined = head.chunked is False and 0 < head.length <= JOIN_MAX
                if joined and self.scope["method"] != "HEAD":
                    self.held = head.data
                else:
                    self.transport.write(head.data)
                return
        await super().send(message)


def supported(version: str = uvicorn.__version__) -> bool:
    return ".".join(version.split(".")[:2]) in CHECKED_VERSIONS


def install() -> bool:
    """Use FastHeadCycle for the requests this process serves (True), where uvicorn is a
    version it was checked against."""
    if not supported():
        return False
    httptools_impl.RequestResponseCycle = FastHeadCycle  # type: ignore[misc]
    return True
