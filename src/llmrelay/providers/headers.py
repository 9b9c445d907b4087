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
_GATEWAY_PREFIX = "x-llmrelay-"


def forwardable(headers: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """Filter raw ASGI headers; names listed in `Connection` are dropped too."""
    pairs = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in headers]
    connection_named = {
        token.strip().lower()
        for name, value in pairs
        if name == "connection"
        for token in value.split(",")
    }
    out: dict[str, str] = {}
    for name, value in pairs:
        if name in DROPPED or name in connection_named or name.startswith(_GATEWAY_PREFIX):
            continue
        out[name] = value
    return out
