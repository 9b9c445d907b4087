"""Sticky routing's bindings: the bound route first only while usable, bounded, expiring."""

from __future__ import annotations

import asyncio

from llmrelay.routing.affinity import AffinityStore, SessionAffinity, prefer


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _same(route: str) -> str:
    return route


def test_the_bound_route_goes_first_only_while_usable() -> None:
    ordered = ["a", "b", "c"]
    assert prefer("c", ordered, _same, lambda r: True) == ["c", "a", "b"]
    assert prefer("c", ordered, _same, lambda r: r != "c") == ["a", "b", "c"]
    assert prefer("c", ["a", "b"], _same, lambda r: True) == ["a", "b"]  # not a candidate
    assert prefer("a", ordered, _same, lambda r: False) == ordered  # first already
    assert prefer("a", [], _same, lambda r: True) == []


def test_a_binding_expires_after_its_own_ttl_and_use_starts_it_over() -> None:
    clock = Clock()
    affinity = SessionAffinity(clock=clock)
    affinity.remember("short", "a", 10)
    affinity.remember("long", "b", 100)
    clock.now = 9
    affinity.remember("short", "a", 10)  # used again: idle from now
    clock.now = 18
    assert affinity.route_for("short") == "a"
    clock.now = 20
    assert affinity.route_for("short") is None and affinity.route_for("long") == "b"
    clock.now = 101
    assert asyncio.run(affinity.bound("long")) is None


def test_the_map_is_bounded_least_recently_used_first() -> None:
    affinity = SessionAffinity(max_sessions=3)
    for name in ("s1", "s2", "s3", "s4"):
        affinity.remember(name, "r-" + name)
    assert len(affinity) == 3
    assert affinity.route_for("s1") is None and affinity.route_for("s4") == "r-s4"
    affinity.remember("s2", "r-s2")  # used again: now the newest
    affinity.remember("s5", "r-s5")
    assert affinity.route_for("s2") == "r-s2" and affinity.route_for("s3") is None


def test_the_process_store_is_an_affinity_store() -> None:
    store: AffinityStore = SessionAffinity()
    store.remember("k", "r", 5)
    assert asyncio.run(store.bound("k")) == "r"
    assert asyncio.run(store.bound("other")) is None
