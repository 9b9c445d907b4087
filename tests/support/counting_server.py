"""A real HTTP server on loopback that counts the connections it accepts and answers every
request 200 with `{}`: the test of a refusal asserts that no connection was made at all."""

from __future__ import annotations

import asyncio
import contextlib
import socketserver
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

_ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
    b"Connection: close\r\n\r\n{}"
)


@dataclass
class CountingServer:
    host: str
    port: int = 0
    connections: int = 0
    _writers: list[asyncio.StreamWriter] = field(default_factory=list)

    def url(self, path: str = "/v1") -> str:
        return f"http://{self.host}:{self.port}{path}"


@contextlib.asynccontextmanager
async def counting_server(host: str = "127.0.0.1") -> AsyncIterator[CountingServer]:
    """In this test's event loop; it binds its own socket (no port handed over)."""
    found = CountingServer(host)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        found.connections += 1
        found._writers.append(writer)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(_ANSWER)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, host, 0)
    found.port = server.sockets[0].getsockname()[1]
    try:
        yield found
    finally:
        server.close()
        for writer in found._writers:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        await server.wait_closed()


class ThreadedCountingServer:
    """The same, in a thread of its own, for tests that are not asynchronous (a gateway
    process calls it)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        counter = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                with counter._lock:
                    counter.connections += 1
                with contextlib.suppress(OSError):
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    self.wfile.write(_ANSWER)

        self.host = host
        self.connections = 0
        self._lock = threading.Lock()
        self._server = socketserver.ThreadingTCPServer((host, 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, path: str = "/v1") -> str:
        return f"http://{self.host}:{self.port}{path}"

    def start(self) -> ThreadedCountingServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
