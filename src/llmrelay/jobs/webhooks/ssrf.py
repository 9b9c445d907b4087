"""The SSRF guard: whether the gateway may call a webhook URL a client gave it, checked when
the URL is submitted and again before every delivery attempt.

Only `http` and `https`, no user name or password in the URL. The host is resolved and every
address it resolves to must be a public one: loopback, private (RFC 1918, IPv6 unique local),
link-local (the cloud metadata address 169.254.169.254 among them), multicast, reserved,
unspecified, shared (CGNAT, 100.64.0.0/10) and documentation addresses are refused, IPv4
mapped into IPv6 judged as the IPv4 address it is. An operator lets some through with
LLMRELAY_WEBHOOK_ALLOWED_HOSTS (a hostname as written in the URL, or a CIDR its addresses fall
in); loopback needs LLMRELAY_WEBHOOK_ALLOW_LOOPBACK=true as well.

The check returns the addresses it judged, and a delivery connects to those (delivery.py), so
a DNS answer that changes between the check and the connection (DNS rebinding) cannot take the
request elsewhere.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from llmrelay.settings import Settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
#: host, port -> the addresses it resolves to (tests pass their own).
Resolve = Callable[[str, int], Awaitable[Sequence[str]]]

_SHARED: Final = ipaddress.ip_network("100.64.0.0/10")


class RefusedUrl(Exception):
    """The URL may not be called; the message says why (and is shown to the client)."""


@dataclass(frozen=True, slots=True)
class WebhookPolicy:
    allowed_hosts: frozenset[str] = frozenset()
    allowed_networks: tuple[IPNetwork, ...] = ()
    allow_loopback: bool = False

    @classmethod
    def from_settings(cls, settings: Settings) -> WebhookPolicy:
        hosts, networks = set(), []
        for entry in settings.webhook_allowed_hosts:
            if "/" in entry:
                networks.append(ipaddress.ip_network(entry, strict=False))
            else:
                hosts.add(entry)
        return cls(frozenset(hosts), tuple(networks), settings.webhook_allow_loopback)


@dataclass(frozen=True, slots=True)
class Target:
    """A URL that passed the check, and the addresses to connect to for it."""

    url: str
    scheme: str
    host: str
    port: int
    addresses: tuple[str, ...]


async def system_resolve(host: str, port: int) -> Sequence[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def check(url: str, policy: WebhookPolicy, resolve: Resolve = system_resolve) -> Target:
    """The URL's target, or RefusedUrl saying why it may not be called."""
    scheme, host, port = _parts(url)
    literal = _literal(host)
    if literal is not None:
        addresses: Sequence[str] = [str(literal)]
    else:
        try:
            addresses = await resolve(host, port)
        except (OSError, UnicodeError) as exc:
            raise RefusedUrl(f"the webhook host {host!r} does not resolve ({exc})") from None
        if not addresses:
            raise RefusedUrl(f"the webhook host {host!r} does not resolve")
    for address in addresses:
        refusal = _refusal(host, _address(address), policy)
        if refusal is not None:
            raise RefusedUrl(
                f"the webhook host {host!r} resolves to {address}, {refusal}: the gateway "
                "does not call internal addresses (an operator can allow a host with "
                "LLMRELAY_WEBHOOK_ALLOWED_HOSTS)"
            )
    return Target(url, scheme, host, port, tuple(addresses))


def _parts(url: str) -> tuple[str, str, int]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise RefusedUrl(f"the webhook URL is malformed: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise RefusedUrl("a webhook URL must start with http:// or https://")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise RefusedUrl("a webhook URL may not carry a user name or password")
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise RefusedUrl("a webhook URL must name a host")
    if any(c.isspace() for c in url):
        raise RefusedUrl("a webhook URL may not contain whitespace")
    return scheme, host, port if port is not None else (443 if scheme == "https" else 80)


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _address(text: str) -> IPAddress:
    address = ipaddress.ip_address(text.split("%", 1)[0])  # an IPv6 zone names no other host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _kind(address: IPAddress) -> str | None:
    """Why an address is internal, or None for a public one."""
    if address.is_loopback:
        return "a loopback address"
    if address.is_unspecified:
        return "an unspecified address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if isinstance(address, ipaddress.IPv4Address) and address in _SHARED:
        return "a shared (CGNAT) address"
    if address.is_private:
        return "a private address"
    if address.is_reserved:
        return "a reserved address"
    if not address.is_global:
        return "not a public address"
    return None


def _refusal(host: str, address: IPAddress, policy: WebhookPolicy) -> str | None:
    kind = _kind(address)
    if kind is None:
        return None
    allowed = host in policy.allowed_hosts or any(
        address in network for network in policy.allowed_networks if _same_family(network, address)
    )
    if not allowed:
        return kind
    if address.is_loopback and not policy.allow_loopback:
        return kind + " (loopback also needs LLMRELAY_WEBHOOK_ALLOW_LOOPBACK=true)"
    return None


def _same_family(network: IPNetwork, address: IPAddress) -> bool:
    return network.version == address.version
