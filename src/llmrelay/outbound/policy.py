"""Which addresses a configured URL may reach, by who configured it.

Two audiences:

- **Tenants** (a tenant admin's provider, a client's webhook URL): public addresses only.
  Loopback, private (RFC 1918, IPv6 unique local), link-local, shared (CGNAT,
  100.64.0.0/10), multicast, reserved, unspecified and documentation addresses are refused,
  IPv4 mapped into IPv6 judged as the IPv4 address it is, unless a platform admin allows the
  host name or a network containing the address in LLMRELAY_TENANT_OUTBOUND_ALLOW.
- **The operator** (providers from the YAML config, the admin token or a platform admin): any
  address but link-local ones, so a local vLLM on loopback or a private network stays one
  line of config; link-local only as allowed for tenants.

For both, a cloud **metadata** address (169.254.169.254, fd00:ec2::254, the ECS and EKS
credential endpoints, Alibaba's 100.100.100.200) or host name (metadata.google.internal, ...)
is refused unless the setting names it: its host name, or that one address as a /32 or /128
entry (a broad range such as 169.254.0.0/16 does not open it).

`check_url` judges a URL at the time it is configured (it resolves the host);
outbound/connector.py judges every address again when a connection is made, so a DNS answer
that changed since cannot take a request inward (DNS rebinding).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol
from urllib.parse import urlsplit

from llmrelay.settings import Settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
#: host, port -> the addresses it resolves to (tests pass their own).
Resolve = Callable[[str, int], Awaitable[Sequence[str]]]

SETTING: Final = "LLMRELAY_TENANT_OUTBOUND_ALLOW"
#: The longest a check waits for a DNS answer (a host that does not answer in time does not
#: resolve).
RESOLVE_TIMEOUT_S: Final = 5.0
#: The address a host that does not resolve is judged at: a public one, so only rules on
#: the name (metadata host names) apply.
_NAME_ONLY: Final = ipaddress.ip_address("192.0.43.10")
_SHARED: Final = ipaddress.ip_network("100.64.0.0/10")
#: Cloud instance metadata and credential endpoints (AWS IMDS and its IPv6 twin, ECS task
#: credentials, EKS pod identity, GCP, Azure and Oracle use 169.254.169.254 too, Alibaba).
METADATA_ADDRESSES: Final = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",
        "169.254.170.2",
        "169.254.170.23",
        "fd00:ec2::254",
        "fd00:ec2::23",
        "100.100.100.200",
    )
)
METADATA_HOSTS: Final = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
    }
)


class RefusedAddress(Exception):
    """The URL may not be called; the message names the rule (it is shown to the caller)."""


@dataclass(frozen=True, slots=True)
class OutboundPolicy:
    """What one audience may reach. `operator`: private and loopback allowed."""

    operator: bool = False
    allowed_hosts: frozenset[str] = frozenset()
    allowed_networks: tuple[IPNetwork, ...] = ()
    #: The setting that opens exceptions, named in refusals.
    setting: str = SETTING

    @classmethod
    def from_entries(cls, entries: Sequence[str], *, operator: bool = False) -> OutboundPolicy:
        hosts, networks = set(), []
        for entry in entries:
            if "/" in entry:
                networks.append(ipaddress.ip_network(entry, strict=False))
            else:
                hosts.add(entry.rstrip(".").lower())
        return cls(operator, frozenset(hosts), tuple(networks))

    @classmethod
    def tenant(cls, settings: Settings) -> OutboundPolicy:
        return cls.from_entries(settings.tenant_outbound_allow)

    @classmethod
    def for_operator(cls, settings: Settings) -> OutboundPolicy:
        return cls.from_entries(settings.tenant_outbound_allow, operator=True)

    def refusal(self, host: str, address: IPAddress) -> str | None:
        """Why `host` may not be reached at `address` (a rule, in words), or None."""
        if address in METADATA_ADDRESSES or host in METADATA_HOSTS:
            if host in self.allowed_hosts or any(
                network.num_addresses == 1 and address in network
                for network in self.allowed_networks
                if network.version == address.version
            ):
                return None
            kind = internal_kind(address)
            also = f" ({kind})" if kind is not None else ""
            return f"a cloud metadata address{also}, never reached unless named"
        kind = internal_kind(address)
        if kind is None or host in self.allowed_hosts:
            return None
        if self.operator and kind != LINK_LOCAL:
            return None
        if any(
            address in network
            for network in self.allowed_networks
            if network.version == address.version
        ):
            return None
        return kind

    def explain(self, what: str, host: str, address: str, rule: str) -> str:
        """A refusal as the caller reads it: the host, the address, the rule, the way out."""
        shown = host if host == address else f"{host!r} ({address})"
        audience = "the operator's" if self.operator else "a tenant's"
        return (
            f"the {what} host {shown} is {rule}: {audience} {what}s may not reach it under "
            f"the outbound address policy (a platform admin can allow hosts or networks with "
            f"{self.setting})"
        )


class Judge(Protocol):
    """What check_url asks of a policy (OutboundPolicy; the webhooks' adds their own
    settings: jobs/webhooks/ssrf.py)."""

    def refusal(self, host: str, address: IPAddress) -> str | None: ...

    def explain(self, what: str, host: str, address: str, rule: str) -> str: ...


LINK_LOCAL: Final = "a link-local address"


def internal_kind(address: IPAddress) -> str | None:
    """Why an address is internal, or None for a public one."""
    if address.is_loopback:
        return "a loopback address"
    if address.is_unspecified:
        return "an unspecified address"
    if address.is_link_local:
        return LINK_LOCAL
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


def parse_address(text: str) -> IPAddress:
    """An address as a resolver gives it; IPv4 mapped into IPv6 as the IPv4 it is."""
    address = ipaddress.ip_address(text.split("%", 1)[0])  # an IPv6 zone names no other host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@dataclass(frozen=True, slots=True)
class Target:
    """A URL that passed the check, and the addresses it was judged at."""

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


@dataclass(frozen=True, slots=True)
class OutboundPolicies:
    """Both audiences' policies and the resolver the checks at configuration time use (the
    admin API's; tests pass their own)."""

    operator: OutboundPolicy = OutboundPolicy(operator=True)
    tenant: OutboundPolicy = OutboundPolicy()
    resolve: Resolve = system_resolve

    @classmethod
    def from_settings(cls, settings: Settings) -> OutboundPolicies:
        return cls(OutboundPolicy.for_operator(settings), OutboundPolicy.tenant(settings))

    def of(self, tenant: bool) -> OutboundPolicy:
        return self.tenant if tenant else self.operator


async def check_url(
    url: str,
    policy: Judge,
    resolve: Resolve = system_resolve,
    *,
    what: str = "webhook",
    unresolved_ok: bool = False,
) -> Target:
    """The URL's target, or RefusedAddress naming the rule it breaks. Every address the host
    resolves to must pass (one internal address among public ones refuses the host).
    `unresolved_ok`: a host that does not resolve (yet) passes with no addresses, judged by
    its name alone; its connections are judged when they are made (outbound/connector.py)."""
    scheme, host, port = url_parts(url, what)
    literal = _literal(host)
    if literal is not None:
        addresses: Sequence[str] = [str(literal)]
    else:
        try:
            async with asyncio.timeout(RESOLVE_TIMEOUT_S):
                addresses = await resolve(host, port)
        except (OSError, UnicodeError) as exc:  # TimeoutError is an OSError
            if not unresolved_ok:
                raise RefusedAddress(f"the {what} host {host!r} does not resolve ({exc})") from None
            addresses = []
        if not addresses:
            if not unresolved_ok:
                raise RefusedAddress(f"the {what} host {host!r} does not resolve")
            rule = policy.refusal(host, _NAME_ONLY)
            if rule is not None:
                raise RefusedAddress(policy.explain(what, host, host, rule))
    for address in addresses:
        rule = policy.refusal(host, parse_address(address))
        if rule is not None:
            raise RefusedAddress(policy.explain(what, host, address, rule))
    return Target(url, scheme, host, port, tuple(addresses))


def url_parts(url: str, what: str = "webhook") -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL without credentials, or RefusedAddress."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise RefusedAddress(f"the {what} URL is malformed: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise RefusedAddress(f"a {what} URL must start with http:// or https://")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise RefusedAddress(f"a {what} URL may not carry a user name or password")
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise RefusedAddress(f"a {what} URL must name a host")
    if any(c.isspace() for c in url):
        raise RefusedAddress(f"a {what} URL may not contain whitespace")
    return scheme, host, port if port is not None else (443 if scheme == "https" else 80)


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
