"""The SSRF guard: schemes, credentials in URLs, every kind of internal address (resolved or
written as a literal, IPv4 mapped into IPv6 included), refused unless an operator allowed the
host, loopback only with its own flag as well; the addresses it judged are the ones returned."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import pytest

from llmrelay.jobs.webhooks.ssrf import RefusedUrl, WebhookPolicy, check
from llmrelay.settings import Settings

PUBLIC = "93.184.216.34"


def resolving_to(*addresses: str):  # type: ignore[no-untyped-def]
    async def resolve(host: str, port: int) -> Sequence[str]:
        return list(addresses)

    return resolve


async def test_a_public_address_passes_with_the_addresses_judged() -> None:
    target = await check(
        "https://hooks.example.com/path?x=1", WebhookPolicy(), resolving_to(PUBLIC, "2606:4700::1")
    )
    assert (target.scheme, target.host, target.port) == ("https", "hooks.example.com", 443)
    assert target.addresses == (PUBLIC, "2606:4700::1")
    literal = await check(f"http://{PUBLIC}:8080/", WebhookPolicy())
    assert (literal.port, literal.addresses) == (8080, (PUBLIC,))


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.8.9.10",
        "::1",
        "10.1.2.3",
        "172.16.0.5",
        "192.168.0.1",
        "fd12:3456::1",
        "169.254.169.254",
        "fe80::1",
        "224.0.0.251",
        "ff02::1",
        "0.0.0.0",
        "::",
        "100.64.0.1",
        "240.0.0.1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "192.0.2.10",
    ],
)
async def test_internal_addresses_are_refused(address: str) -> None:
    with pytest.raises(RefusedUrl, match="outbound address policy"):
        await check("https://hooks.example.com/", WebhookPolicy(), resolving_to(address))
    literal = f"[{address}]" if ":" in address else address
    with pytest.raises(RefusedUrl):
        await check(f"http://{literal}/", WebhookPolicy())


async def test_one_internal_address_among_public_ones_refuses_the_host() -> None:
    with pytest.raises(RefusedUrl, match=r"10\.0\.0\.7"):
        await check("https://x.example.com/", WebhookPolicy(), resolving_to(PUBLIC, "10.0.0.7"))


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://hooks.example.com/", "http:// or https://"),
        ("file:///etc/passwd", "http:// or https://"),
        ("gopher://hooks.example.com/", "http:// or https://"),
        ("https://user:pw@hooks.example.com/", "user name or password"),
        ("https://user@hooks.example.com/", "user name or password"),
        ("https:///path", "must name a host"),
        ("https://hooks.example.com:99999/", "malformed"),
    ],
)
async def test_malformed_urls_are_refused(url: str, says: str) -> None:
    with pytest.raises(RefusedUrl, match=says):
        await check(url, WebhookPolicy(), resolving_to(PUBLIC))


async def test_a_host_that_does_not_resolve_is_refused() -> None:
    async def fails(host: str, port: int) -> Sequence[str]:
        raise OSError("Name or service not known")

    with pytest.raises(RefusedUrl, match="does not resolve"):
        await check("https://nowhere.invalid/", WebhookPolicy(), fails)


async def test_the_system_resolver_sees_localhost_as_loopback() -> None:
    with pytest.raises(RefusedUrl, match="loopback"):
        await check("http://localhost:8080/", WebhookPolicy())


async def test_allowed_hosts_and_networks_and_the_loopback_flag() -> None:
    policy = WebhookPolicy.from_settings(
        Settings(webhook_allowed_hosts="hooks.internal, 10.20.0.0/16,127.0.0.1")
    )
    assert policy.allowed_hosts == frozenset({"hooks.internal", "127.0.0.1"})
    assert policy.allowed_networks == (ipaddress.ip_network("10.20.0.0/16"),)
    # allowed by name, whatever it resolves to (but loopback)
    await check("http://hooks.internal/", policy, resolving_to("192.168.5.5"))
    # allowed by network
    await check("http://svc.example.com/", policy, resolving_to("10.20.3.4"))
    with pytest.raises(RefusedUrl):
        await check("http://svc.example.com/", policy, resolving_to("10.21.3.4"))
    # loopback: allowlisted, still refused without the flag
    with pytest.raises(RefusedUrl, match="ALLOW_LOOPBACK"):
        await check("http://127.0.0.1:9000/", policy)
    with pytest.raises(RefusedUrl, match="ALLOW_LOOPBACK"):
        await check("http://hooks.internal/", policy, resolving_to("127.0.0.1"))
    flagged = WebhookPolicy(policy.allowed_hosts, policy.allowed_networks, allow_loopback=True)
    await check("http://127.0.0.1:9000/", flagged)
    # the flag alone allows nothing: localhost is not on the list
    with pytest.raises(RefusedUrl):
        await check("http://localhost:9000/", flagged, resolving_to("127.0.0.1"))


def test_a_bad_allowlist_entry_stops_the_process_at_start() -> None:
    with pytest.raises(ValueError, match="LLMRELAY_WEBHOOK_ALLOWED_HOSTS"):
        Settings(webhook_allowed_hosts="10.0.0.0/33")
    with pytest.raises(ValueError, match="neither a hostname nor a CIDR"):
        Settings(webhook_allowed_hosts="bad host!")
