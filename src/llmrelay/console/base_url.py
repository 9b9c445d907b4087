"""The base URL the browser reached the gateway at (for Quickstart snippets): the request's
own scheme and Host, or X-Forwarded-Proto / X-Forwarded-Host when the peer is a trusted
proxy (LLMRELAY_TRUSTED_PROXIES), as the ingress believes X-Forwarded-For only from them."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence

from starlette.requests import Request

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_HOST = re.compile(r"[A-Za-z0-9.\-:\[\]]{1,255}")


def _trusted(peer: str | None, trusted: Sequence[Network]) -> bool:
    if peer is None or not trusted:
        return False
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return False
    return any(address in network for network in trusted)


def public_base_url(request: Request, trusted: Sequence[Network]) -> str:
    scheme = request.url.scheme
    host = request.headers.get("host", "")
    peer = request.client.host if request.client else None
    if _trusted(peer, trusted):
        proto = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
        if proto in ("http", "https"):
            scheme = proto
        forwarded_host = request.headers.get("x-forwarded-host", "").split(",")[0].strip()
        if forwarded_host:
            host = forwarded_host
    if not _HOST.fullmatch(host):  # never echo a header that is not a host into a snippet
        host = f"{request.url.hostname or 'localhost'}"
    return f"{scheme}://{host}"
