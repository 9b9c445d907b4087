"""What the outbound address policy costs the providers' transport (issue 30).

    python -m bench.outbound [--rounds 5]

One process: an aiohttp server on loopback and providers/http.py's HttpTransport, with the
checking connector (outbound/connector.py) against aiohttp's plain TCPConnector, the arms
alternating per round. CPU time (both sides of the connection, the same in both arms) per
request on a pooled connection, where the policy costs nothing by design, and per request on
a new connection (`Connection: close`), where it judges the resolved address (a cached
verdict); and, isolated, the connector's resolve step that the check adds to. A
micro-measure: the data plane's own figures come from `python -m bench.run`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from types import MappingProxyType

import aiohttp
from aiohttp import web
from aiohttp.abc import AbstractResolver

from llmrelay.deadlines import Deadlines
from llmrelay.outbound.connector import CheckedConnector
from llmrelay.outbound.policy import OutboundPolicy
from llmrelay.providers.base import UpstreamRequest
from llmrelay.providers.http import HttpTransport
from llmrelay.snapshot.model import ProviderSnap


class _PlainTransport(HttpTransport):
    """The transport as it was before the policy: aiohttp's own connector."""

    @staticmethod
    def _pool(
        policy: OutboundPolicy, limit: int, resolver: AbstractResolver | None
    ) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=limit, ttl_dns_cache=300),
            timeout=aiohttp.ClientTimeout(total=None),
            trust_env=False,
            skip_auto_headers=("User-Agent",),
            auto_decompress=True,
        )


async def _per_request_us(
    transport: HttpTransport, provider: ProviderSnap, n: int, *, fresh: bool
) -> float:
    headers = {"connection": "close"} if fresh else {}
    request = UpstreamRequest(f"{provider.base_url}/x", headers, b"{}")
    started = time.process_time()
    for _ in range(n):
        response = await transport.send(request, provider)
        await response.read()
        response.release()
    return (time.process_time() - started) / n * 1e6


async def _resolve_us(connector: aiohttp.TCPConnector, n: int = 100_000) -> float:
    """CPU per `_resolve_host` of a name in the DNS cache: what a new connection pays for
    the names it resolves (the checked connector judges each address, a cached verdict)."""
    await connector._resolve_host("localhost", 80)
    started = time.process_time()
    for _ in range(n):
        await connector._resolve_host("localhost", 80)
    return (time.process_time() - started) / n * 1e6


async def main(rounds: int) -> None:
    for name, connector in (
        ("checked", CheckedConnector(OutboundPolicy(operator=True), ttl_dns_cache=300)),
        ("plain", aiohttp.TCPConnector(ttl_dns_cache=300)),
    ):
        try:
            print(name, f"{await _resolve_us(connector):.2f} us CPU per resolve (DNS cache hit)")
        finally:
            await connector.close()

    async def ok(_request: web.Request) -> web.Response:
        return web.Response(body=b"{}", content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", ok)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    provider = ProviderSnap(
        "p", "p", "openai_compatible", f"http://localhost:{port}/v1", None,
        MappingProxyType({}), 30, 10, 30, 30, None,
    )  # fmt: skip
    loop = asyncio.get_running_loop()
    found: dict[str, dict[str, list[float]]] = {}
    for _ in range(rounds):
        for arm, kind in (("checked", HttpTransport), ("plain", _PlainTransport)):
            transport = kind(Deadlines(loop))
            try:
                await _per_request_us(transport, provider, 200, fresh=False)  # warm-up
                arms = found.setdefault(arm, {"pooled": [], "new connection": []})
                arms["pooled"].append(await _per_request_us(transport, provider, 3000, fresh=False))
                arms["new connection"].append(
                    await _per_request_us(transport, provider, 500, fresh=True)
                )
            finally:
                await transport.close()
    await runner.cleanup()
    for arm, cells in found.items():
        medians = {cell: round(statistics.median(values), 1) for cell, values in cells.items()}
        print(arm, "us CPU per request (median):", medians)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    asyncio.run(main(parser.parse_args().rounds))
