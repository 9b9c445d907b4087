"""The shared aiohttp transport: one connection pool per process (per audience of the outbound
address policy), no redirects, and every aiohttp failure mapped to providers.errors here.

Time limits: aiohttp's `sock_connect` is the provider's connect limit (it costs nothing on a
pooled connection). The wait for the response head, and for a non-streamed body, is bounded
by `timeout_s` through the process-wide deadline sweeper (gateway.watch.Deadlines) rather
than aiohttp's `sock_read`, which re-arms a timer on every packet, or `asyncio.timeout`,
which costs several microseconds per use. Streams add their own limits (see gateway.relay).
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp.abc import AbstractResolver

from llmrelay.deadlines import Deadline, Deadlines
from llmrelay.outbound.connector import CheckedConnector, refused
from llmrelay.outbound.policy import OutboundPolicy
from llmrelay.providers.base import UpstreamRequest
from llmrelay.providers.errors import (
    UpstreamAddressRefused,
    UpstreamConnectError,
    UpstreamTimeoutError,
)
from llmrelay.snapshot.model import ProviderSnap


class HttpUpstreamResponse:
    __slots__ = ("_deadline", "_provider", "_response", "status")

    def __init__(
        self, response: aiohttp.ClientResponse, provider: ProviderSnap, deadline: Deadline
    ) -> None:
        self._response = response
        self._provider = provider
        self._deadline = deadline  # the head's, paused; reused for the body, stopped on release
        self.status = response.status

    def header(self, name: str) -> str | None:
        return self._response.headers.get(name)

    async def read(self) -> bytes:
        deadline = self._deadline
        deadline.change(self._provider.timeout_s, "response_body")
        deadline.resume()
        try:
            return await self._response.read()
        except asyncio.CancelledError:
            if deadline.claim():
                raise UpstreamTimeoutError("response_body", deadline.limit_s) from None
            raise
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise UpstreamConnectError(f"connection lost while reading: {_lost(exc)}") from None
        finally:
            deadline.pause()

    async def next_chunk(self) -> bytes:
        try:
            return await self._response.content.readany()
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise UpstreamConnectError(f"connection lost while reading: {_lost(exc)}") from None

    def release(self) -> None:
        """Keep the connection for reuse when the body was read to its end, else drop it."""
        self._deadline.stop()
        response = self._response
        if response.content.at_eof():
            response.release()
        else:
            response.close()


class HttpTransport:
    """Two pools, one per audience of the outbound address policy (outbound/): providers the
    operator declared, and providers a tenant's admin did (`ProviderSnap.tenant_declared`).
    Each pool's connector judges the addresses it connects to by its audience's rules."""

    def __init__(
        self,
        deadlines: Deadlines,
        *,
        limit: int = 1000,
        operator: OutboundPolicy | None = None,
        tenant: OutboundPolicy | None = None,
        resolver: AbstractResolver | None = None,
    ) -> None:
        self._deadlines = deadlines
        self._session = self._pool(operator or OutboundPolicy(operator=True), limit, resolver)
        self._tenant_session = self._pool(tenant or OutboundPolicy(), limit, resolver)
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}

    @staticmethod
    def _pool(
        policy: OutboundPolicy, limit: int, resolver: AbstractResolver | None
    ) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=CheckedConnector(policy, limit=limit, ttl_dns_cache=300, resolver=resolver),
            timeout=aiohttp.ClientTimeout(total=None),
            trust_env=False,
            skip_auto_headers=("User-Agent",),
            auto_decompress=True,
        )

    def _timeout(self, provider: ProviderSnap) -> aiohttp.ClientTimeout:
        connect_s = provider.connect_timeout_s
        timeout = self._timeouts.get(connect_s)
        if timeout is None:
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_s)
            self._timeouts[connect_s] = timeout
        return timeout

    async def send(self, request: UpstreamRequest, provider: ProviderSnap) -> HttpUpstreamResponse:
        deadline = self._deadlines.watch(provider.timeout_s, "first_byte")
        session = self._tenant_session if provider.tenant_declared else self._session
        try:
            response = await session.request(
                request.method,
                request.url,
                data=request.body,
                headers=request.headers,
                allow_redirects=False,
                timeout=self._timeout(provider),
            )
        except asyncio.CancelledError:
            deadline.stop()
            if deadline.claim():
                raise UpstreamTimeoutError("first_byte", provider.timeout_s) from None
            raise
        except aiohttp.ConnectionTimeoutError:
            deadline.stop()
            raise UpstreamTimeoutError("connect", provider.connect_timeout_s) from None
        except (aiohttp.ClientError, ConnectionError) as exc:
            deadline.stop()
            refusal = refused(exc)
            if refusal is not None:
                raise UpstreamAddressRefused(str(refusal)) from None
            raise UpstreamConnectError(_lost(exc)) from None
        deadline.pause()
        return HttpUpstreamResponse(response, provider, deadline)

    async def close(self) -> None:
        await self._session.close()
        await self._tenant_session.close()


def _lost(exc: BaseException) -> str:
    """`_describe`, with the tracebacks of the error and its causes dropped: aiohttp keeps a
    failed read's error on the response's stream reader, and a traceback's frames hold that
    reader (and its protocol), so each failed call would otherwise stay in a reference cycle
    until the garbage collector ran."""
    seen: BaseException | None = exc
    for _ in range(8):  # the chain is short; a bound in case of a loop in it
        if seen is None:
            break
        seen.__traceback__ = None
        seen = seen.__cause__ or seen.__context__
    return _describe(exc)


def _describe(exc: BaseException) -> str:
    """A one-line reason without URLs (they may carry credentials in query strings)."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect ({exc.os_error.strerror or type(exc.os_error).__name__})"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "server disconnected"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "response body cut off"
    return type(exc).__name__
