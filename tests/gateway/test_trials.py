"""The breakers' timer-sent trials and probe closes (gateway/trials.py), in process, against
the real mock upstream on loopback: a route opened by a failure is tried again by the timer
when its cooldown ends, with no request; a failed trial opens it for longer, a trial that gets
an answer closes it; an embedding model is tried with an embedding; a probe that found the
provider online closes its routes' breakers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from types import MappingProxyType

import pytest

from llmrelay.deadlines import Deadlines
from llmrelay.gateway.trials import TRIAL_HEADER, BreakerTrials
from llmrelay.providers.http import HttpTransport
from llmrelay.providers.registry import ProviderRegistry
from llmrelay.routing.breaker import Breakers
from llmrelay.snapshot.model import BreakerSettings, ModelSnap, ProviderSnap, RouteSnap, Snapshot
from tests.support.mock_upstream import MockUpstream

#: Generous: each wait ends at the event, long before this.
CEILING_S = 30.0


@pytest.fixture(scope="module")
def upstream() -> Iterator[MockUpstream]:
    server = MockUpstream().start()
    yield server
    server.stop()


def _snapshot(upstream: MockUpstream) -> Snapshot:
    provider = ProviderSnap(
        "prov-1",
        "up",
        "openai_compatible",
        upstream.base_url,
        "sk-trials-0123456789",
        MappingProxyType({}),
        10,
        5,
        10,
        10,
        None,
    )
    chat_route = RouteSnap("route-chat", provider, "echo-trial", 0, 1.0, None, False, 0)
    embed_route = RouteSnap("route-embed", provider, "embed-trial", 0, 1.0, None, False, 0)
    off_route = RouteSnap("route-off", provider, "echo-off", 0, 1.0, None, True, 1)

    def model(name: str, routes: tuple[RouteSnap, ...], embedding: bool) -> ModelSnap:
        return ModelSnap(
            name, "t1", name, "priority", routes, 1, 200, 300, (), (), embedding, None, 0
        )

    models = {
        "chat": model("chat", (chat_route, off_route), False),
        "embed": model("embed", (embed_route,), True),
    }
    return Snapshot(generation=1, built_at=0.0, models=MappingProxyType({"t1": models}))


@pytest.fixture
async def trials(upstream: MockUpstream) -> AsyncIterator[tuple[Breakers, BreakerTrials]]:
    loop = asyncio.get_running_loop()
    registry = ProviderRegistry(HttpTransport(Deadlines(loop)))
    breakers = Breakers(BreakerSettings(failures=1, cooldown_s=0.2, max_cooldown_s=0.4))
    snapshot = _snapshot(upstream)
    made = BreakerTrials(registry, breakers, lambda: snapshot, loop)
    breakers.on_open = made.schedule
    try:
        yield breakers, made
    finally:
        await made.close()
        await registry.close()


async def _until(check: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + CEILING_S
    while not check():
        assert asyncio.get_running_loop().time() < deadline, f"not within {CEILING_S} s: {what}"
        await asyncio.sleep(0.02)


def _trials(upstream: MockUpstream, model: str) -> int:
    return sum(1 for t in upstream.trials if t.body.get("model") == model)


def _open(breakers: Breakers, route_id: str) -> None:
    ticket = breakers.admit(route_id)
    assert ticket is not None
    breakers.failed(ticket)
    assert breakers.state(route_id) == "open"


async def test_the_timer_tries_an_open_route_and_closes_it_once_it_answers(
    upstream: MockUpstream, trials: tuple[Breakers, BreakerTrials]
) -> None:
    breakers, _ = trials
    upstream.down.add("echo-trial")
    try:
        _open(breakers, "route-chat")
        await _until(lambda: _trials(upstream, "echo-trial") >= 2, "two failed trials")
        assert breakers.state("route-chat") in ("open", "half_open")
    finally:
        upstream.down.discard("echo-trial")
    await _until(lambda: breakers.state("route-chat") == "closed", "closed by a trial")
    trial = [t for t in upstream.trials if t.body.get("model") == "echo-trial"][-1]
    assert trial.path == "/v1/chat/completions"
    assert trial.headers[TRIAL_HEADER] == "breaker"
    assert trial.body["max_tokens"] == 1 and trial.body["messages"][0]["content"] == "ping"
    assert not [r for r in upstream.requests if r.body.get("model") == "echo-trial"]


async def test_an_embedding_route_is_tried_with_an_embedding(
    upstream: MockUpstream, trials: tuple[Breakers, BreakerTrials]
) -> None:
    breakers, _ = trials
    _open(breakers, "route-embed")
    await _until(lambda: breakers.state("route-embed") == "closed", "closed by a trial")
    trial = [t for t in upstream.trials if t.body.get("model") == "embed-trial"][-1]
    assert trial.path == "/v1/embeddings" and trial.body["input"] == "ping"


async def test_a_probe_that_found_the_provider_online_closes_its_routes_breakers(
    upstream: MockUpstream, trials: tuple[Breakers, BreakerTrials]
) -> None:
    breakers, made = trials
    upstream.down.add("echo-trial")  # the timer's trials would fail: only the probe closes
    try:
        _open(breakers, "route-chat")
        made.provider_online("prov-1")
        assert breakers.state("route-chat") == "closed"
        made.provider_online("prov-unknown")  # another provider's: nothing happens
    finally:
        upstream.down.discard("echo-trial")
