"""Who is calling: the API key from `Authorization: Bearer` or `x-api-key` (Gemini clients:
also `x-goog-api-key` or `?key=`), looked up by digest in the snapshot (no database call),
then the key's IP allowlist and its scopes (the APIs it may call: apikeys.SCOPES)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Final

from llmrelay import apikeys
from llmrelay.gateway.errors import AuthenticationFailed, PermissionDenied
from llmrelay.snapshot.model import KeySnap, Snapshot

_BEARER: Final = b"bearer "
#: Presented key -> its SHA-256 digest. Hashing is the largest part of authentication and a
#: handful of keys make most requests; bounded (emptied when full) so garbage keys cannot
#: grow it. It holds keys in memory that the process saw anyway, never writes them out.
_DIGESTS: Final[dict[str, str]] = {}
_DIGESTS_MAX: Final = 4096


def key_digest(key: str) -> str:
    found = _DIGESTS.get(key)
    if found is None:
        if len(_DIGESTS) >= _DIGESTS_MAX:
            _DIGESTS.clear()
        found = _DIGESTS[key] = apikeys.digest(key)
    return found


def presented_key(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    bearer = None
    api_key = None
    for name, value in headers:
        if name == b"authorization":
            if value[:7].lower() == _BEARER:
                bearer = value[7:].strip().decode("latin-1")
        elif name == b"x-api-key":
            api_key = value.strip().decode("latin-1")
    return bearer or api_key or None


def gemini_key(headers: Iterable[tuple[bytes, bytes]], query: dict[str, str]) -> str | None:
    """The key a Gemini client presents: `x-goog-api-key` (Google's SDKs), else the usual
    headers, else `?key=` (Google's API takes it there too; a header keeps it out of logs)."""
    for name, value in headers:
        if name == b"x-goog-api-key":
            found = value.strip().decode("latin-1")
            if found:
                return found
    return presented_key(headers) or query.get("key") or None


def authenticate(
    headers: Iterable[tuple[bytes, bytes]],
    snapshot: Snapshot,
    client_ip: str | None,
    now: float,
    api: str,
) -> KeySnap:
    """The key's principal, allowed to call `api` (an apikeys.SCOPES name); `now` is a Unix
    timestamp."""
    key = presented_key(headers)
    if key is None:
        raise AuthenticationFailed(
            "no API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'"
        )
    return principal_of(key, snapshot, client_ip, now, api)


def principal_of(
    key: str, snapshot: Snapshot, client_ip: str | None, now: float, api: str
) -> KeySnap:
    """The principal of a presented key (the checks of `authenticate`). The scope check is
    one attribute test for a key without scopes and a frozenset lookup for a scoped one,
    on the object the digest lookup already found."""
    principal = snapshot.keys_by_digest.get(key_digest(key))
    if principal is None:
        raise AuthenticationFailed("invalid API key")
    if principal.status != "active":
        raise AuthenticationFailed(f"API key is {principal.status}")
    if principal.expires_at is not None and principal.expires_at <= now:
        raise AuthenticationFailed("API key has expired", code="expired_api_key")
    if principal.ip_allowlist and not _ip_allowed(client_ip, principal):
        raise PermissionDenied(
            f"client address {client_ip} is not in this key's IP allowlist", code="ip_not_allowed"
        )
    if principal.scopes is not None and api not in principal.scopes:
        raise scope_refused(principal.scopes, api)
    return principal


def scope_refused(scopes: frozenset[str], api: str) -> PermissionDenied:
    """403 `scope_not_allowed`, naming the API refused and the ones the key may call (the
    message carries the code too: Anthropic's error shape has no code field)."""
    allowed = ", ".join(s for s in apikeys.SCOPES if s in scopes)
    return PermissionDenied(
        f"this API key may not call the {api!r} API "
        f"(scope_not_allowed; the key's scopes: {allowed})",
        code="scope_not_allowed",
    )


def _ip_allowed(client_ip: str | None, principal: KeySnap) -> bool:
    if client_ip is None:
        return False
    try:
        address = ipaddress.ip_address(client_ip)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in principal.ip_allowlist)
