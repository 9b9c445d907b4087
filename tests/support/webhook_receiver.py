"""A real HTTP server that receives webhook events, on loopback in a background thread (like
mock_upstream.py), keeping each request's exact bytes and headers for the test to check.

The path chooses the answer:

    /ok...            200
    /fail-first-N...  500 to the first N requests on that path, then 200
    /status-CODE...   always CODE
    /redirect...      307 to /moved (which a sender must not follow)
    /redirect-to-HOST:PORT
                      307 to http://HOST:PORT/moved (another, internal, address)
    /slow-MS...       wait MS milliseconds, then 200
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field

from aiohttp import web

from tests.support.background_app import BackgroundApp
from tests.support.ports import free_port


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def header(self, name: str) -> str:
        return {k.lower(): v for k, v in self.headers.items()}[name.lower()]


@dataclass
class WebhookReceiver:
    host: str = "127.0.0.1"
    port: int = field(default_factory=free_port)
    received: list[Received] = field(default_factory=list)
    _seen: dict[str, int] = field(default_factory=dict)
    _served: BackgroundApp = field(default_factory=lambda: BackgroundApp("webhook-receiver"))

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    def on(self, path: str) -> list[Received]:
        return [r for r in self.received if r.path == path]

    def start(self) -> WebhookReceiver:
        self._served.start(self._app(), self.host, self.port)
        return self

    def stop(self) -> None:
        self._served.stop()

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._receive)
        return app

    async def _receive(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        path = request.path
        self.received.append(Received(path, dict(request.headers), body))
        self._seen[path] = self._seen.get(path, 0) + 1
        if path.startswith("/redirect-to-"):
            raise web.HTTPTemporaryRedirect(f"http://{path.removeprefix('/redirect-to-')}/moved")
        if path.startswith("/redirect"):
            raise web.HTTPTemporaryRedirect("/moved")
        number = re.search(r"\d+", path)
        n = int(number.group()) if number else 0
        if path.startswith("/fail-first-") and self._seen[path] <= n:
            return web.Response(status=500, text="not yet")
        if path.startswith("/status-"):
            return web.Response(status=n, text="as asked")
        if path.startswith("/slow-"):
            await asyncio.sleep(n / 1000)
        return web.Response(status=200, text="ok")
