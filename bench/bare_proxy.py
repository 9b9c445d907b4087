"""A bare pass-through ASGI proxy: the baseline llmrelay is measured against.

No logic at all: read the request body, POST it to the upstream at the same path with the
same HTTP client llmrelay uses, and stream the answer back chunk by chunk. Status and the
upstream's content-type (and content-length, when it sent one) are passed on; nothing is
parsed.

The app reads its settings from the environment, so any ASGI server can load it:

    BARE_UPSTREAM=http://127.0.0.1:8081   upstream origin; the request path is appended
    BARE_CLIENT=aiohttp|httpx|httpx2      upstream HTTP client (default aiohttp)

Or let this file start a server for you:

    python bench/bare_proxy.py --server uvicorn|granian --client aiohttp|httpx|httpx2 \\
        --upstream http://127.0.0.1:8081 --port 8090

`uvicorn` runs with the options llmrelay's own server uses (src/llmrelay/server.py);
`granian` runs with one worker, one runtime thread, uvloop and HTTP/1.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import aiohttp
import httpx

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

CLIENTS = ("aiohttp", "httpx", "httpx2")
SERVERS = ("uvicorn", "granian")
_POOL_LIMIT = 1000  # the same as llmrelay's HttpTransport
_PASSED_HEADERS = ("content-type", "content-length")


def _passed(get: Callable[[str], str | None]) -> list[tuple[bytes, bytes]]:
    """The upstream headers a pass-through proxy must keep (framing is the server's job)."""
    out = []
    for name in _PASSED_HEADERS:
        value = get(name)
        if value is not None:
            out.append((name.encode(), value.encode("latin-1")))
    return out


class UpstreamAnswer(Protocol):
    status: int
    headers: list[tuple[bytes, bytes]]

    def chunks(self) -> AsyncIterator[bytes]: ...

    async def close(self) -> None: ...


class Client(Protocol):
    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> UpstreamAnswer: ...

    async def close(self) -> None: ...


# -- aiohttp, configured as src/llmrelay/providers/http.py configures it ------------------


class _AiohttpAnswer:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.headers = _passed(response.headers.get)

    async def chunks(self) -> AsyncIterator[bytes]:
        content = self._response.content
        while True:
            chunk = await content.readany()
            if not chunk:
                return
            yield chunk

    async def close(self) -> None:
        self._response.release()


class AiohttpClient:
    def __init__(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=_POOL_LIMIT, ttl_dns_cache=300),
            timeout=aiohttp.ClientTimeout(total=None),
            trust_env=False,
            skip_auto_headers=("User-Agent",),
            auto_decompress=True,
        )

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> UpstreamAnswer:
        response = await self._session.post(url, data=body, headers=headers, allow_redirects=False)
        return _AiohttpAnswer(response)

    async def close(self) -> None:
        await self._session.close()


# -- httpx, and httpx2 (the pydantic fork the openai and anthropic SDKs now use) -----------


class _HttpxAnswer:
    def __init__(self, response: Any) -> None:  # httpx.Response or httpx2.Response
        self._response = response
        self.status: int = response.status_code
        self.headers = _passed(response.headers.get)

    async def chunks(self) -> AsyncIterator[bytes]:
        async for chunk in self._response.aiter_raw():
            yield chunk

    async def close(self) -> None:
        await self._response.aclose()


class HttpxClient:
    def __init__(self, module: ModuleType = httpx) -> None:
        self._client = module.AsyncClient(
            limits=module.Limits(
                max_connections=_POOL_LIMIT, max_keepalive_connections=_POOL_LIMIT
            ),
            timeout=module.Timeout(None, connect=5.0),
            trust_env=False,
            follow_redirects=False,
        )

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> UpstreamAnswer:
        request = self._client.build_request("POST", url, content=body, headers=headers)
        response = await self._client.send(request, stream=True)
        return _HttpxAnswer(response)

    async def close(self) -> None:
        await self._client.aclose()


def make_client(name: str) -> Client:
    if name == "aiohttp":
        return AiohttpClient()
    if name == "httpx":
        return HttpxClient()
    if name == "httpx2":
        return HttpxClient(importlib.import_module("httpx2"))
    raise ValueError(f"unknown client {name!r}; choose one of {', '.join(CLIENTS)}")


# -- the ASGI app -----------------------------------------------------------------------


class BareProxy:
    def __init__(self, upstream: str, client_name: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.client_name = client_name
        self._client: Client | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._proxy(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._client = make_client(self.client_name)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._client is not None:
                    await self._client.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _proxy(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = self._client
        if client is None:  # a server without lifespan support
            client = self._client = make_client(self.client_name)
        parts = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            parts.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        url = self.upstream + scope["path"]
        answer = await client.post(url, b"".join(parts), {"content-type": "application/json"})
        try:
            await send(
                {"type": "http.response.start", "status": answer.status, "headers": answer.headers}
            )
            async for chunk in answer.chunks():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await answer.close()


app = BareProxy(
    os.environ.get("BARE_UPSTREAM", "http://127.0.0.1:8081"),
    os.environ.get("BARE_CLIENT", "aiohttp"),
)
# The same server as llmrelay's: uvicorn with its response heads written by llmrelay's
# compiled code (src/llmrelay/server_head.py), so the comparison leaves the server out.
if os.environ.get("BARE_STOCK_UVICORN") != "1":
    from llmrelay.server_head import install

    install()


# -- starting a server ------------------------------------------------------------------


def server_command(server: str, host: str, port: int) -> list[str]:
    """The command that serves `bare_proxy:app` (settings come from the environment)."""
    here = str(Path(__file__).resolve().parent)
    if server == "uvicorn":
        return [
            sys.executable,
            "-m",
            "uvicorn",
            "bare_proxy:app",
            "--app-dir",
            here,
            "--host",
            host,
            "--port",
            str(port),
            "--loop",
            "uvloop",
            "--http",
            "httptools",
            "--lifespan",
            "on",
            "--no-proxy-headers",
            "--no-access-log",
            "--log-level",
            "warning",
            "--timeout-keep-alive",
            "75",
            "--no-server-header",
            "--no-date-header",
        ]
    if server == "granian":
        granian = shutil.which("granian", path=str(Path(sys.executable).parent)) or "granian"
        return [
            granian,
            "--interface",
            "asgi",
            "--loop",
            "uvloop",
            "--http",
            "1",
            "--no-ws",
            "--workers",
            "1",
            "--runtime-threads",
            "1",
            "--log-level",
            "warning",
            "--working-dir",
            here,
            "--host",
            host,
            "--port",
            str(port),
            "bare_proxy:app",
        ]
    raise ValueError(f"unknown server {server!r}; choose one of {', '.join(SERVERS)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=SERVERS, default="uvicorn")
    parser.add_argument("--client", choices=CLIENTS, default="aiohttp")
    parser.add_argument("--upstream", required=True, help="upstream origin, e.g. http://h:p")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    args = parser.parse_args()
    os.environ["BARE_UPSTREAM"] = args.upstream
    os.environ["BARE_CLIENT"] = args.client
    command = server_command(args.server, args.host, args.port)
    os.execv(command[0], command)  # same PID: CPU and memory are the server's own


if __name__ == "__main__":
    main()
