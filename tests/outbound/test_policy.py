"""The outbound address policy's rules: a tenant reaches public addresses only, the operator
private and loopback ones too, and a cloud metadata address nobody reaches unless the setting
names it (its host name or the one address; a broad range is not enough)."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import pytest

from llmrelay.outbound.policy import (
    OutboundPolicies,
    OutboundPolicy,
    RefusedAddress,
    check_url,
)
from llmrelay.settings import Settings

PUBLIC = "93.184.216.34"
TENANT = OutboundPolicy()
OPERATOR = OutboundPolicy(operator=True)


def resolving_to(*addresses: str):  # type: ignore[no-untyped-def]
    async def resolve(host: str, port: int) -> Sequence[str]:
        return list(addresses)

    return resolve


def judge(policy: OutboundPolicy, host: str, address: str) -> str | None:
    return policy.refusal(host, ipaddress.ip_address(address))


@pytest.mark.parametrize(
    ("address", "rule"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.5", "private"),
        ("192.168.0.1", "private"),
        ("fd12:3456::1", "private"),
        ("100.64.0.1", "CGNAT"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
    ],
)
def test_a_tenant_reaches_no_internal_address_and_the_operator_all_but_link_local(
    address: str, rule: str
) -> None:
    assert rule in (judge(TENANT, "h.example", address) or "")
    operator = judge(OPERATOR, "h.example", address)
    if rule == "link-local":
        assert operator is not None and "link-local" in operator
    else:
        assert operator is None  # a local vLLM stays easy
    assert judge(TENANT, "h.example", PUBLIC) is None


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("h.example", "169.254.169.254"),
        ("h.example", "fd00:ec2::254"),
        ("h.example", "169.254.170.2"),
        ("h.example", "100.100.100.200"),
        ("metadata.google.internal", "169.254.169.254"),
        ("metadata.google.internal", PUBLIC),  # by its name, whatever it resolves to
    ],
)
def test_metadata_is_refused_to_everyone_unless_named(host: str, address: str) -> None:
    for policy in (TENANT, OPERATOR):
        assert "cloud metadata" in (judge(policy, host, address) or "")
    # A broad range opens private addresses, never metadata.
    broad = OutboundPolicy.from_entries(["0.0.0.0/0", "::/0", "169.254.0.0/16"], operator=True)
    assert "cloud metadata" in (judge(broad, host, address) or "")
    by_name = OutboundPolicy.from_entries([host])
    by_address = OutboundPolicy.from_entries([f"{address}/{32 if '.' in address else 128}"])
    assert judge(by_name, host, address) is None
    assert judge(by_address, host, address) is None


def test_the_setting_opens_hosts_and_networks_for_tenants() -> None:
    policy = OutboundPolicies.from_settings(
        Settings(tenant_outbound_allow="10.20.0.0/16, vllm.internal, 127.0.0.1/32")
    ).tenant
    assert judge(policy, "any.example", "10.20.3.4") is None
    assert judge(policy, "any.example", "10.21.3.4") is not None
    assert judge(policy, "vllm.internal", "192.168.7.7") is None
    assert judge(policy, "any.example", "127.0.0.1") is None
    assert judge(policy, "any.example", "127.0.0.2") is not None


async def test_check_url_names_the_rule_and_the_way_out() -> None:
    with pytest.raises(RefusedAddress) as refused:
        await check_url("http://10.0.0.7:8000/v1", TENANT, what="provider")
    message = str(refused.value)
    assert "10.0.0.7 is a private address" in message
    assert "a tenant's providers may not reach it" in message
    assert "LLMRELAY_TENANT_OUTBOUND_ALLOW" in message
    # A name is judged by every address it resolves to.
    with pytest.raises(RefusedAddress, match=r"'api\.example' \(127\.0\.0\.1\) is a loopback"):
        await check_url(
            "https://api.example/v1", TENANT, resolving_to(PUBLIC, "127.0.0.1"), what="provider"
        )
    target = await check_url("https://api.example/v1", TENANT, resolving_to(PUBLIC))
    assert target.addresses == (PUBLIC,)


async def test_a_name_that_does_not_resolve_passes_when_allowed_but_not_a_metadata_name() -> None:
    async def fails(host: str, port: int) -> Sequence[str]:
        raise OSError("Name or service not known")

    target = await check_url("http://later.example/v1", TENANT, fails, unresolved_ok=True)
    assert target.addresses == ()
    with pytest.raises(RefusedAddress, match="does not resolve"):
        await check_url("http://later.example/v1", TENANT, fails)
    with pytest.raises(RefusedAddress, match="cloud metadata"):
        await check_url("http://metadata.google.internal/", OPERATOR, fails, unresolved_ok=True)


@pytest.mark.parametrize(
    "url",
    [
        "http://2130706433:8000/v1",  # 127.0.0.1 as one number
        "http://0x7f000001:8000/v1",
        "http://127.1:8000/v1",
        "http://[::ffff:127.0.0.1]:8000/v1",
        "http://[::1]:8000/v1",
        "http://localhost:8000/v1",
    ],
)
async def test_loopback_in_any_spelling_is_refused_to_a_tenant(url: str) -> None:
    """The system resolver reads the legacy numeric forms as the address they are."""
    with pytest.raises(RefusedAddress, match="loopback"):
        await check_url(url, TENANT, what="provider", unresolved_ok=True)
    assert (await check_url(url, OPERATOR, what="provider", unresolved_ok=True)).addresses
