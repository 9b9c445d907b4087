"""An ASGI app served by a real uvicorn in a thread of the test's process, on a socket the
test bound itself (port 0: no other process can take the port between choosing and
listening), and raw HTTP exchanges with it that end on an event, never on a quiet moment."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import uvicorn

#: Pipelined after a request, this one makes the server close the connection once it has
#: answered both, so reading to the end of the connection reads every answer whole.
CLOSER = b"GET /__closer HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"


class ServedApp:
    """`with ServedApp(app) as served:` a uvicorn (uvloop, httptools) serving `app`."""

    def __init__(self, app: Any, **config: Any) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.port: int = self.socket.getsockname()[1]
        settings: dict[str, Any] = {
            "loop": "uvloop",
            "http": "httptools",
            "lifespan": "off",
            "access_log": False,
            "log_level": "critical",
            "server_header": False,
            "date_header": False,
            **config,
        }
        self.server = uvicorn.Server(uvicorn.Config(app, **settings))
        self.thread = threading.Thread(
            target=lambda: asyncio.run(self.server.serve(sockets=[self.socket])),
            name="served-app",
        )

    def __enter__(self) -> ServedApp:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            assert self.thread.is_alive(), "uvicorn stopped before it started"
            assert time.monotonic() < deadline, "uvicorn did not start within 60 s"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(60)
        self.socket.close()

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=60)

    def raw(self, request: bytes) -> bytes:
        """Everything the server writes back to `request` followed by CLOSER, up to the
        close (a server that closes after `request` answers only that)."""
        with self.connect() as conn:
            conn.sendall(request + CLOSER)
            return read_to_close(conn)


def read_to_close(conn: socket.socket) -> bytes:
    """Every byte until the peer closes (a reset counts as the close)."""
    out = b""
    while True:
        try:
            data = conn.recv(65536)
        except ConnectionResetError:
            return out
        if not data:
            return out
        out += data
