"""Which routes a prepaid call may reach, for its reservation: the model's (a pin and a
routing policy narrow them), then its fallback models' unless pinned."""

from __future__ import annotations

from types import MappingProxyType

from llmrelay.gateway.prepaid import reachable
from llmrelay.snapshot.model import ModelSnap, PolicySnap, ProviderSnap, RouteSnap, Snapshot


def _provider(slug: str) -> ProviderSnap:
    return ProviderSnap(slug, slug, "openai_compatible", "http://x/v1", None, MappingProxyType({}),
                        5, 5, 5, 5, None)  # fmt: skip


A, B = _provider("a"), _provider("b")


def _model(name: str, *routes: RouteSnap, fallbacks: tuple[str, ...] = ()) -> ModelSnap:
    return ModelSnap(name, "t", name, "priority", routes, 1, 0, 300.0, fallbacks, (), False,
                     None, 0)  # fmt: skip


def test_the_routes_a_call_may_reach() -> None:
    chat = _model(
        "chat",
        RouteSnap("ra", A, "m", 0, 1.0, None, False, 0),
        RouteSnap("rb", B, "m", 1, 1.0, None, False, 1),
        RouteSnap("off", B, "m", 2, 1.0, None, True, 2),
        fallbacks=("backup", "missing"),
    )
    backup = _model("backup", RouteSnap("rk", B, "k", 0, 1.0, None, False, 0))
    snapshot = Snapshot(
        1, 0.0, models=MappingProxyType({"t": MappingProxyType({"chat": chat, "backup": backup})})
    )
    found = reachable(snapshot, "t", chat, None, None)
    assert [(m.name, [r.id for r in routes]) for m, routes in found] == [
        ("chat", ["ra", "rb"]),
        ("backup", ["rk"]),
    ]
    pinned = reachable(snapshot, "t", chat, "a", None)
    assert [(m.name, [r.id for r in routes]) for m, routes in pinned] == [("chat", ["ra"])]
    only_a = PolicySnap("p", "only-a", frozenset({"a"}), None, None, None)
    narrowed = reachable(snapshot, "t", chat, None, only_a)
    assert [(m.name, [r.id for r in routes]) for m, routes in narrowed] == [
        ("chat", ["ra"]),
        ("backup", []),
    ]
