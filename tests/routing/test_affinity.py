"""Session affinity: the session's route first while usable, bounded, forgetting idle ones."""

from __future__ import annotations

from llmrelay.routing.affinity import SessionAffinity


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _same(route: str) -> str:
    return route


def test_the_remembered_route_goes_first_only_while_usable() -> None:
    affinity = SessionAffinity()
    ordered = ["a", "b", "c"]
    assert affinity.prefer("s", ordered, _same, lambda r: True) == ["a", "b", "c"]
    affinity.remember("s", "c")
    assert affinity.prefer("s", ordered, _same, lambda r: True) == ["c", "a", "b"]
    assert affinity.prefer("s", ordered, _same, lambda r: r != "c") == ["a", "b", "c"]
    assert affinity.prefer("s", ["a", "b"], _same, lambda r: True) == ["a", "b"]  # gone
    assert affinity.prefer("other", ordered, _same, lambda r: True) == ordered


def test_idle_sessions_are_forgotten_and_the_map_is_bounded() -> None:
    clock = Clock()
    affinity = SessionAffinity(max_sessions=3, ttl_s=10, clock=clock)
    affinity.remember("old", "a")
    clock.now = 11
    assert affinity.route_for("old") is None
    for name in ("s1", "s2", "s3", "s4"):
        affinity.remember(name, "r-" + name)
    assert len(affinity) == 3
    assert affinity.route_for("s1") is None and affinity.route_for("s4") == "r-s4"
    affinity.remember("s2", "r-s2")  # used again: now the newest
    affinity.remember("s5", "r-s5")
    assert affinity.route_for("s2") == "r-s2" and affinity.route_for("s3") is None
