"""The shared aiohttp transport: one connection pool per process, no redirects, and every
aiohttp failure mapped to providers.errors here."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp

from llmrelay.providers.base import UpstreamRequest
from llmrelay.providers.errors import UpstreamConnectError, UpstreamTimeoutError
from llmrelay.snapshot.model import ProviderSnap

_READ_SIZE = 64 * 1024


class HttpUpstreamResponse:
    __slots__ = ("_response", "status")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status

    def header(self, name: str) -> str | None:
        return self._response.headers.get(name)

    async def read(self, idle_timeout_s: float) -> bytes:
        parts = []
        async for chunk in self.chunks_within(idle_timeout_s):
            parts.append(chunk)
        return b"".join(parts)

    async def chunks_within(self, idle_timeout_s: float) -> AsyncIterator[bytes]:
        iterator = self.chunks().__aiter__()
        while True:
            try:
                async with asyncio.timeout(idle_timeout_s):
                    chunk = await anext(iterator)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise UpstreamTimeoutError("response_body", idle_timeout_s) from None
            yield chunk

    async def chunks(self) -> AsyncIterator[bytes]:
        content = self._response.content
        try:
            while True:
                chunk = await content.readany()
                if not chunk:
                    return
                yield chunk
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise UpstreamConnectError(f"connection lost while reading: {_describe(exc)}") from None

    def release(self) -> None:
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()


class HttpTransport:
    def __init__(self, *, limit: int = 1000) -> None:
        self._connector = aiohttp.TCPConnector(limit=limit, ttl_dns_cache=300)
        self._session = aiohttp.ClientSession(
            connector=self._connector,
            timeout=aiohttp.ClientTimeout(total=None),
            trust_env=False,
            skip_auto_headers=("User-Agent",),
            auto_decompress=True,
        )
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}

    def _timeout(self, connect_s: float) -> aiohttp.ClientTimeout:
        timeout = self._timeouts.get(connect_s)
        if timeout is None:
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_s)
            self._timeouts[connect_s] = timeout
        return timeout

    async def send(self, request: UpstreamRequest, provider: ProviderSnap) -> HttpUpstreamResponse:
        try:
            async with asyncio.timeout(provider.timeout_s):
                response = await self._session.post(
                    request.url,
                    data=request.body,
                    headers=request.headers,
                    allow_redirects=False,
                    timeout=self._timeout(provider.connect_timeout_s),
                )
        except aiohttp.ConnectionTimeoutError:  # before TimeoutError: it is one
            raise UpstreamTimeoutError("connect", provider.connect_timeout_s) from None
        except TimeoutError:
            raise UpstreamTimeoutError("first_byte", provider.timeout_s) from None
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise UpstreamConnectError(_describe(exc)) from None
        return HttpUpstreamResponse(response)

    async def close(self) -> None:
        await self._session.close()


def _describe(exc: BaseException) -> str:
    """A one-line reason without URLs (they may carry credentials in query strings)."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect ({exc.os_error.strerror or type(exc.os_error).__name__})"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "server disconnected"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "response body cut off"
    return type(exc).__name__
