"""The SSRF guard for webhooks: whether the gateway may call a webhook URL a client gave it,
checked when the URL is submitted and again before every delivery attempt.

A webhook URL is configured by a tenant, so it is judged by the outbound address policy for
tenants (outbound/policy.py: public addresses only, unless LLMRELAY_TENANT_OUTBOUND_ALLOW
opens a host or network). The webhooks' own older settings still open exceptions too:
LLMRELAY_WEBHOOK_ALLOWED_HOSTS (a hostname as written in the URL, or a CIDR its addresses
fall in), where loopback needs LLMRELAY_WEBHOOK_ALLOW_LOOPBACK=true as well.

The check returns the addresses it judged, and a delivery connects to those (delivery.py), so
a DNS answer that changes between the check and the connection (DNS rebinding) cannot take the
request elsewhere. Redirects are never followed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmrelay.outbound.policy import (
    IPAddress,
    IPNetwork,
    OutboundPolicy,
    RefusedAddress,
    Resolve,
    Target,
    check_url,
    system_resolve,
)
from llmrelay.settings import Settings

__all__ = ["RefusedUrl", "Resolve", "Target", "WebhookPolicy", "check", "system_resolve"]

#: The guard's refusal (the outbound policy's, under the name delivery and submission use).
RefusedUrl = RefusedAddress


@dataclass(frozen=True, slots=True)
class WebhookPolicy:
    allowed_hosts: frozenset[str] = frozenset()
    allowed_networks: tuple[IPNetwork, ...] = ()
    allow_loopback: bool = False
    #: The tenants' outbound policy (LLMRELAY_TENANT_OUTBOUND_ALLOW), judged first.
    tenant: OutboundPolicy = field(default_factory=OutboundPolicy)

    @classmethod
    def from_settings(cls, settings: Settings) -> WebhookPolicy:
        own = OutboundPolicy.from_entries(settings.webhook_allowed_hosts)
        return cls(
            own.allowed_hosts,
            own.allowed_networks,
            settings.webhook_allow_loopback,
            OutboundPolicy.tenant(settings),
        )

    def refusal(self, host: str, address: IPAddress) -> str | None:
        rule = self.tenant.refusal(host, address)
        if rule is None:
            return None
        own = OutboundPolicy(
            allowed_hosts=self.allowed_hosts, allowed_networks=self.allowed_networks
        ).refusal(host, address)
        if own is not None:
            return rule
        if address.is_loopback and not self.allow_loopback:
            return rule + " (loopback also needs LLMRELAY_WEBHOOK_ALLOW_LOOPBACK=true)"
        return None

    def explain(self, what: str, host: str, address: str, rule: str) -> str:
        return self.tenant.explain(what, host, address, rule)


async def check(url: str, policy: WebhookPolicy, resolve: Resolve = system_resolve) -> Target:
    """The URL's target, or RefusedUrl saying why it may not be called."""
    return await check_url(url, policy, resolve, what="webhook")
