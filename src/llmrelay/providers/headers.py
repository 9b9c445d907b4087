"""Which client headers may travel upstream.

The client's credentials, cookies, hop-by-hop headers, forwarding headers, and anything
the gateway sets itself stay behind; other headers (for example `user-agent` or an SDK's
`x-stainless-*` telemetry) pass, so a provider sees what the application sent.
"""

from __future__ import annotations

from collections.abc import Iterable

#: Lower-case names never forwarded.
DROPPED = frozenset(
    {
        # credentials of the gateway's own client, never the provider's
        "authorization",
        "x-api-key",
        "api-key",
        "cookie",
        "proxy-authorization",
        "openai-organization",
        "openai-project",
        # hop-by-hop (RFC 9110 section 7.6.1) and framing, set by the HTTP client
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "content-type",
        "content-encoding",
        "accept-encoding",
        "expect",
        # the client's network identity stays with the gateway
        "forwarded",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-real-ip",
        # set by the gateway
        "x-request-id",
    }
)
_DROPPED_RAW = frozenset(name.encode() for name in DROPPED)
_GATEWAY_PREFIX = b"x-llmrelay-"


def forwardable(headers: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """Filter raw ASGI headers (names arrive lower-cased); names listed in `Connection` are
    dropped too. Only kept headers are decoded."""
    out: dict[str, str] = {}
    connection: bytes | None = None
    for name, value in headers:
        if name in _DROPPED_RAW:
            if name == b"connection":
                connection = value
            continue
        if name.startswith(_GATEWAY_PREFIX):
            continue
        out[name.decode("latin-1")] = value.decode("latin-1")
    if connection is not None:
        for token in connection.decode("latin-1").split(","):
            out.pop(token.strip().lower(), None)
    return out
