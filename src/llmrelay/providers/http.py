"""The shared aiohttp transport: one connection pool per process, no redirects, and every
aiohttp failure mapped to providers.errors here.

Time limits use aiohttp's own socket timers (armed on every read anyway when set), not
`asyncio.timeout`, which costs several microseconds per use on the hot path: `sock_connect`
is the provider's connect limit, `sock_read` its `timeout_s`, which bounds the wait for the
response head and every later gap between reads.
"""

from __future__ import annotations

import aiohttp

from llmrelay.providers.base import UpstreamRequest
from llmrelay.providers.errors import UpstreamConnectError, UpstreamTimeoutError
from llmrelay.snapshot.model import ProviderSnap


class HttpUpstreamResponse:
    __slots__ = ("_provider", "_response", "status")

    def __init__(self, response: aiohttp.ClientResponse, provider: ProviderSnap) -> None:
        self._response = response
        self._provider = provider
        self.status = response.status

    def header(self, name: str) -> str | None:
        return self._response.headers.get(name)

    async def read(self) -> bytes:
        try:
            return await self._response.read()
        except aiohttp.SocketTimeoutError:
            raise UpstreamTimeoutError("response_body", self._provider.timeout_s) from None
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise UpstreamConnectError(f"connection lost while reading: {_describe(exc)}") from None

    async def next_chunk(self) -> bytes:
        try:
            return await self._response.content.readany()
        except aiohttp.SocketTimeoutError:
            raise UpstreamTimeoutError("stream_event", self._provider.timeout_s) from None
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise UpstreamConnectError(f"connection lost while reading: {_describe(exc)}") from None

    def release(self) -> None:
        """Keep the connection for reuse when the body was read to its end, else drop it."""
        response = self._response
        if response.content.at_eof():
            response.release()
        else:
            response.close()


class HttpTransport:
    def __init__(self, *, limit: int = 1000) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=limit, ttl_dns_cache=300),
            timeout=aiohttp.ClientTimeout(total=None),
            trust_env=False,
            skip_auto_headers=("User-Agent",),
            auto_decompress=True,
        )
        self._timeouts: dict[tuple[float, float], aiohttp.ClientTimeout] = {}

    def _timeout(self, provider: ProviderSnap) -> aiohttp.ClientTimeout:
        key = (provider.connect_timeout_s, provider.timeout_s)
        timeout = self._timeouts.get(key)
        if timeout is None:
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=key[0], sock_read=key[1])
            self._timeouts[key] = timeout
        return timeout

    async def send(self, request: UpstreamRequest, provider: ProviderSnap) -> HttpUpstreamResponse:
        try:
            response = await self._session.post(
                request.url,
                data=request.body,
                headers=request.headers,
                allow_redirects=False,
                timeout=self._timeout(provider),
            )
        except aiohttp.ConnectionTimeoutError:
            raise UpstreamTimeoutError("connect", provider.connect_timeout_s) from None
        except aiohttp.SocketTimeoutError:
            raise UpstreamTimeoutError("first_byte", provider.timeout_s) from None
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise UpstreamConnectError(_describe(exc)) from None
        return HttpUpstreamResponse(response, provider)

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
