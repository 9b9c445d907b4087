"""Which client headers may travel upstream.

An allowlist: only headers that change what a provider's protocol does are forwarded
(`openai-beta`, `anthropic-version`, `anthropic-beta`). The client's credentials, cookies,
hop-by-hop and forwarding headers, SDK telemetry (`x-stainless-*`), and everything else stay
with the gateway: a provider sees the gateway as its client, and headers it should receive
on every request are configured on the provider (`headers:` in the config). Being short, the
list is also cheap: upstream request headers cost CPU per header in the HTTP client.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

#: The header that carries the gateway's request id to a provider, for correlation. Not
#: `x-request-id`: a provider that is itself an llmrelay (a gateway in front of a gateway, or
#: one pointing back at itself) keeps a client's `x-request-id` as its own, and its record
#: would then share the outer request's id (records are idempotent by request id, so one of
#: the two was lost). Under this name each hop chooses an id of its own and still learns the
#: outer one (docs/api.md, Request ids).
CLIENT_REQUEST_ID: Final = "x-llmrelay-client-request-id"

#: Lower-case names forwarded to the provider.
FORWARDED: Final = frozenset({"openai-beta", "anthropic-version", "anthropic-beta"})
_FORWARDED_RAW: Final = frozenset(name.encode() for name in FORWARDED)


def forwardable(headers: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """The allowed headers among raw ASGI headers (names arrive lower-cased)."""
    return {
        name.decode("latin-1"): value.decode("latin-1")
        for name, value in headers
        if name in _FORWARDED_RAW
    }


#: The forwarded headers each provider protocol reads (a bridged call sends only its own).
_OWN_KIND: Final = {
    "openai": frozenset({"openai-beta"}),
    "anthropic": frozenset({"anthropic-version", "anthropic-beta"}),
}


def of_kind(forwarded: dict[str, str], protocol: str) -> dict[str, str]:
    """`forwarded` without the protocol headers of another protocol than the provider's (a
    Messages client's `anthropic-beta` means nothing to an OpenAI provider); the gateway's
    own (`x-llmrelay-client-request-id`) stay."""
    own = _OWN_KIND.get(protocol, frozenset())
    return {
        name: value for name, value in forwarded.items() if name in own or name not in FORWARDED
    }
