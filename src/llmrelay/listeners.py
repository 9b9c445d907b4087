"""The separate admin listener (LLMRELAY_ADMIN_LISTEN): one process, one uvicorn server, two
listening sockets. A request is served by the app of the socket it came in on, told by the
port of its local address (`scope["server"]`): the control plane (admin API, console,
/metrics) on the admin port, the model API on the data-plane port, health on both.

One server rather than two on one loop: one lifespan (the stack is opened once), one
graceful shutdown that stops both sockets accepting and drains both listeners' requests
before the records are flushed, and `serve --workers N` shares both sockets with its
workers as uvicorn shares one. Without an admin listener none of this is built.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send


class ListenerSplit:
    """The control plane's app for requests on `admin_port`; the data plane's for the rest
    and for the lifespan (the data plane's app runs the start-up and shutdown sequence)."""

    __slots__ = ("_admin", "_admin_port", "_data")

    def __init__(self, data: ASGIApp, admin: ASGIApp, admin_port: int) -> None:
        self._data = data
        self._admin = admin
        self._admin_port = admin_port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        server = scope.get("server")
        if server is not None and server[1] == self._admin_port and scope["type"] == "http":
            await self._admin(scope, receive, send)
        else:
            await self._data(scope, receive, send)
