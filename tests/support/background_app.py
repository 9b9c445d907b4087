"""An aiohttp application served from an event loop on a thread of its own.

The tests' stand-in servers (the mock upstreams, the fake Stripe, the OIDC provider, the
webhook receiver) must answer while the test's own thread is busy: blocked in a synchronous SDK
call, or running its own event loop. Each one serves from a loop on a daemon thread, and this
class owns that thread's life, so that every server starts and stops it the same way: serving
before `start` returns, every connection closed and the loop closed before `stop` returns (a
loop left open leaks its sockets into a later test's garbage collection).
"""

from __future__ import annotations

import asyncio
import threading

from aiohttp import web

#: How long starting or stopping may take on a loaded machine before it is a failure.
_CEILING_S = 30.0


class BackgroundApp:
    """One served application; `name` names the thread (it shows in a hung test's traceback)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    def start(self, app: web.Application, host: str, port: int) -> None:
        """Serving when it returns; raises what kept the server from starting (a port taken)."""
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name=self.name, daemon=True)
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._serve(app, host, port), loop).result(_CEILING_S)
        except BaseException:
            self.stop()
            raise

    async def _serve(self, app: web.Application, host: str, port: int) -> None:
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()

    def stop(self) -> None:
        """Idempotent: a fixture's teardown may stop a server its test already stopped."""
        loop = self._loop
        if loop is None:
            return
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop).result(_CEILING_S)
            self._runner = None
        loop.call_soon_threadsafe(loop.stop)
        assert self._thread is not None
        self._thread.join(_CEILING_S)
        loop.close()
        self._loop = None
