"""The policy where connections are made: the providers' transport (providers/http.py) over
the checking connector, against a real server on loopback that counts its connections. A
refusal makes no connection at all; a DNS answer that changed since the provider was saved
(rebinding) is judged as it is now; an operator's provider reaches loopback."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from types import MappingProxyType

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from llmrelay.deadlines import Deadlines
from llmrelay.outbound.policy import OutboundPolicy, RefusedAddress, check_url
from llmrelay.providers.base import UpstreamRequest
from llmrelay.providers.errors import UpstreamAddressRefused
from llmrelay.providers.http import HttpTransport
from llmrelay.snapshot.model import ProviderSnap
from tests.support.counting_server import CountingServer, counting_server

PUBLIC = "93.184.216.34"


class Resolver(AbstractResolver):
    """DNS the test controls: name -> the addresses it resolves to now."""

    def __init__(self) -> None:
        self.answers: dict[str, list[str]] = {}

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for address in self.answers[host]
        ]

    async def close(self) -> None:
        return None

    async def as_check(self, host: str, port: int) -> list[str]:
        """The same answers, for check_url (what the admin API asks when a URL is saved)."""
        return list(self.answers[host])


def provider(base_url: str, *, tenant: bool) -> ProviderSnap:
    return ProviderSnap(
        id="p-1",
        slug="p",
        type="openai_compatible",
        base_url=base_url,
        api_key=None,
        headers=MappingProxyType({}),
        timeout_s=30,
        connect_timeout_s=10,
        first_token_timeout_s=30,
        stream_idle_timeout_s=30,
        api_version=None,
        tenant_declared=tenant,
    )


async def send(transport: HttpTransport, base_url: str, *, tenant: bool) -> int:
    request = UpstreamRequest(f"{base_url}/models", {}, b"", method="GET")
    response = await transport.send(request, provider(base_url, tenant=tenant))
    try:
        await response.read()
        return response.status
    finally:
        response.release()


@pytest.fixture
async def server() -> AsyncIterator[CountingServer]:
    async with counting_server() as found:
        yield found


@pytest.fixture
def resolver() -> Resolver:
    return Resolver()


@pytest.fixture
async def transport(resolver: Resolver) -> AsyncIterator[HttpTransport]:
    made = HttpTransport(Deadlines(asyncio.get_running_loop()), resolver=resolver)
    try:
        yield made
    finally:
        await made.close()


async def test_a_tenants_provider_on_loopback_makes_no_connection_the_operators_does(
    server: CountingServer, transport: HttpTransport, resolver: Resolver
) -> None:
    resolver.answers["vllm.test"] = ["127.0.0.1"]
    for base_url in (server.url(), f"http://vllm.test:{server.port}/v1"):
        with pytest.raises(UpstreamAddressRefused, match="is a loopback address"):
            await send(transport, base_url, tenant=True)
    assert server.connections == 0
    assert await send(transport, server.url(), tenant=False) == 200
    assert await send(transport, f"http://vllm.test:{server.port}/v1", tenant=False) == 200
    assert server.connections == 2


async def test_dns_rebinding_is_judged_when_the_connection_is_made(
    server: CountingServer, transport: HttpTransport, resolver: Resolver
) -> None:
    base_url = f"http://rebind.test:{server.port}/v1"
    resolver.answers["rebind.test"] = [PUBLIC]
    # When it is saved the name resolves to a public address: accepted.
    target = await check_url(base_url, OutboundPolicy(), resolver.as_check, what="provider")
    assert target.addresses == (PUBLIC,)
    # Then it answers loopback: the connection is refused before it is made.
    resolver.answers["rebind.test"] = ["127.0.0.1"]
    with pytest.raises(UpstreamAddressRefused, match=r"'rebind\.test' \(127\.0\.0\.1\)"):
        await send(transport, base_url, tenant=True)
    assert server.connections == 0
    with pytest.raises(RefusedAddress):
        await check_url(base_url, OutboundPolicy(), resolver.as_check, what="provider")


async def test_metadata_is_refused_to_the_operator_unless_named(
    server: CountingServer, resolver: Resolver
) -> None:
    # metadata.google.internal, pointed at the test's server: refused by its name.
    resolver.answers["metadata.google.internal"] = ["127.0.0.1"]
    base_url = f"http://metadata.google.internal:{server.port}/v1"
    loop = asyncio.get_running_loop()
    plain = HttpTransport(Deadlines(loop), resolver=resolver)
    named = OutboundPolicy.from_entries(["metadata.google.internal"], operator=True)
    allowed = HttpTransport(Deadlines(loop), operator=named, resolver=resolver)
    try:
        with pytest.raises(UpstreamAddressRefused, match="cloud metadata"):
            await send(plain, base_url, tenant=False)
        assert server.connections == 0
        assert await send(allowed, base_url, tenant=False) == 200
        assert server.connections == 1
    finally:
        await plain.close()
        await allowed.close()


async def test_the_setting_opens_a_network_for_tenants(
    server: CountingServer, resolver: Resolver
) -> None:
    opened = OutboundPolicy.from_entries(["127.0.0.1/32"])
    transport = HttpTransport(
        Deadlines(asyncio.get_running_loop()), tenant=opened, resolver=resolver
    )
    try:
        assert await send(transport, server.url(), tenant=True) == 200
        assert server.connections == 1
    finally:
        await transport.close()


@pytest.mark.parametrize("host", ["[::1]", "[::ffff:127.0.0.1]", "0x7f000001", "[fd00:ec2::254]"])
async def test_an_inward_literal_in_any_spelling_makes_no_connection(host: str) -> None:
    # The system resolver (0x7f000001 is resolved); aiohttp itself refuses the one-number
    # and short forms, 2130706433 and 127.1.
    transport = HttpTransport(Deadlines(asyncio.get_running_loop()))
    try:
        with pytest.raises(UpstreamAddressRefused, match=r"loopback|metadata"):
            await send(transport, f"http://{host}:9/v1", tenant=True)
    finally:
        await transport.close()
