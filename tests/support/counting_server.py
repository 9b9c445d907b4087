"""A real HTTP server on loopback that counts the connections it accepts and answers every
request 200 with `{}`: the test of a refusal asserts that no connection was made at all."""

from __future__ import annotations

import asyncio
import contextlib
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
