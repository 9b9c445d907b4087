"""The outbound policy where a connection is made: an aiohttp connector that judges every
address a host resolves to (an IP literal in the URL too) before it connects.

aiohttp resolves a host only to open a new connection (a pooled one is reused without), and
keeps its answers in its DNS cache; the check runs on what `_resolve_host` returns, cached
or not, so what is connected to is always what was judged: a name that resolved to a public
address when the provider was saved and to loopback now (DNS rebinding) is refused now. A
verdict is cached per (host, address), so a new connection costs a dictionary look-up, and
a request on a pooled connection costs nothing. A refusal raises AddressRefused, which aiohttp
wraps in ClientConnectorError (its `os_error`); providers/http.py maps it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import aiohttp
from aiohttp.abc import ResolveResult

from llmrelay.outbound.policy import OutboundPolicy, parse_address

if TYPE_CHECKING:
    from aiohttp.tracing import Trace

#: Verdicts kept per connector before the cache starts again (hosts x addresses in use).
_MAX_VERDICTS: Final = 4096


class AddressRefused(OSError):
    """A connection the outbound address policy refused; the message names the rule."""


class CheckedConnector(aiohttp.TCPConnector):
    def __init__(self, policy: OutboundPolicy, *, what: str = "provider", **options: Any) -> None:
        super().__init__(**options)
        self.policy = policy
        self._what = what
        #: (host, address) -> the rule that refuses it, "" when allowed.
        self._verdicts: dict[tuple[str, str], str] = {}

    async def _resolve_host(
        self, host: str, port: int, traces: Sequence[Trace] | None = None
    ) -> list[ResolveResult]:
        found = await super()._resolve_host(host, port, traces=traces)
        name = host.rstrip(".").lower()
        verdicts = self._verdicts
        for item in found:
            address = item["host"]
            rule = verdicts.get((name, address))
            if rule is None:
                rule = self.policy.refusal(name, parse_address(address)) or ""
                if len(verdicts) >= _MAX_VERDICTS:
                    verdicts.clear()
                verdicts[(name, address)] = rule
            if rule:
                raise AddressRefused(self.policy.explain(self._what, name, address, rule))
        return found


def refused(exc: BaseException) -> AddressRefused | None:
    """The policy's refusal behind an aiohttp connection error, if that is what it was."""
    if isinstance(exc, aiohttp.ClientConnectorError) and isinstance(exc.os_error, AddressRefused):
        return exc.os_error
    return None
