"""A TCP server that accepts and reads but never answers: how a hung Redis looks."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[tuple[str, list[asyncio.StreamWriter]]]:
    """(a redis:// URL to it, the connections it accepted so far)."""
    accepted: list[asyncio.StreamWriter] = []

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        while await reader.read(65536):
            pass

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"redis://127.0.0.1:{port}/0", accepted
    finally:
        server.close()
        for writer in accepted:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        await server.wait_closed()
