"""Routing policies decide route by route: every allowlist that is set must hold the route's
value, and a missing tag or region fails a list of them."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from llmrelay.snapshot.model import PolicySnap, ProviderSnap, RouteSnap


def _route(slug: str, region: str | None, tag: str | None) -> RouteSnap:
    provider = ProviderSnap(
        id=slug,
        slug=slug,
        type="openai_compatible",
        base_url="http://x/v1",
        api_key=None,
        headers=MappingProxyType({}),
        timeout_s=5,
        connect_timeout_s=5,
        first_token_timeout_s=5,
        stream_idle_timeout_s=5,
        api_version=None,
        region=region,
    )
    return RouteSnap(f"{slug}-{tag}", provider, "up", 0, 1.0, tag, False, 0)


def _policy(
    providers: set[str] | None = None,
    tags: set[str] | None = None,
    regions: set[str] | None = None,
) -> PolicySnap:
    def frozen(values: set[str] | None) -> frozenset[str] | None:
        return None if values is None else frozenset(values)

    return PolicySnap("id", "p", frozen(providers), frozen(tags), frozen(regions), None)


@pytest.mark.parametrize(
    ("policy", "route", "allowed"),
    [
        (_policy(), _route("a", None, None), True),
        (_policy(providers={"a"}), _route("a", None, None), True),
        (_policy(providers={"a"}), _route("b", None, None), False),
        (_policy(providers=set()), _route("a", "eu", "t"), False),
        (_policy(tags={"t"}), _route("a", None, "t"), True),
        (_policy(tags={"t"}), _route("a", None, "u"), False),
        (_policy(tags={"t"}), _route("a", None, None), False),
        (_policy(regions={"eu"}), _route("a", "eu", None), True),
        (_policy(regions={"eu"}), _route("a", "us", None), False),
        (_policy(regions={"eu"}), _route("a", None, None), False),
        (_policy({"a"}, {"t"}, {"eu"}), _route("a", "eu", "t"), True),
        (_policy({"a"}, {"t"}, {"eu"}), _route("a", "eu", "u"), False),
        (_policy({"a"}, {"t"}, {"eu"}), _route("b", "eu", "t"), False),
    ],
)
def test_a_route_passes_when_every_list_set_holds_its_value(
    policy: PolicySnap, route: RouteSnap, allowed: bool
) -> None:
    assert policy.allows(route) is allowed
