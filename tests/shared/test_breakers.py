"""Breakers shared by replicas (shared/breakers.py), two `SharedBreakers` in one process on
a real Redis (with PostgreSQL behind it) and on PostgreSQL alone: a trial claim goes to one
replica at a time and is free again once released or lapsed (a trial that was sent keeps it
until it lapses); an opening and a closing on one
replica reach the other; and when a cooldown ends on both, one trial only reaches the real
mock upstream, whose outcome (a failure, then a success) both replicas follow."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from types import MappingProxyType

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.deadlines import Deadlines
from llmrelay.gateway.trials import BreakerTrials
from llmrelay.providers.http import HttpTransport
from llmrelay.providers.registry import ProviderRegistry
from llmrelay.routing.breaker import Breakers
from llmrelay.shared.breakers import SharedBreakers
from llmrelay.shared.store import DatabaseEntries
from llmrelay.snapshot.model import BreakerSettings, ModelSnap, ProviderSnap, RouteSnap, Snapshot
from tests.support.mock_upstream import MockUpstream
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

#: Generous: each wait ends at the event, long before this.
CEILING_S = 30.0
#: Short, so the trials come quickly; long enough that a closing published by one replica
#: reaches the other before its own timer would claim the trial again.
SETTINGS = BreakerSettings(failures=1, cooldown_s=3.0, max_cooldown_s=6.0)


@dataclass
class Replica:
    breakers: Breakers
    shared: SharedBreakers


@pytest.fixture(scope="module")
def upstream() -> Iterator[MockUpstream]:
    server = MockUpstream().start()
    yield server
    server.stop()


@pytest.fixture(params=["redis", "postgres-only"])
async def replicas(
    request: pytest.FixtureRequest, postgres_engine: AsyncEngine
) -> AsyncIterator[tuple[Replica, Replica]]:
    redis = RedisServer().start() if request.param == "redis" else None
    made: list[Replica] = []
    try:
        for _ in range(2):
            breakers = Breakers(SETTINGS)
            shared = SharedBreakers(
                breakers, None if redis is None else redis.url, DatabaseEntries(postgres_engine)
            )
            shared.start()
            made.append(Replica(breakers, shared))
        if redis is not None:  # what is published from here on reaches both
            for replica in made:
                await asyncio.wait_for(replica.shared.listening.wait(), CEILING_S)
        yield made[0], made[1]
    finally:
        for replica in made:
            await replica.shared.close()
        if redis is not None:
            redis.stop()


async def _until(check: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CEILING_S
    while not check():
        assert loop.time() < deadline, f"not within {CEILING_S} s: {what}"
        await asyncio.sleep(0.02)


def _trip(breakers: Breakers, route_id: str) -> None:
    ticket = breakers.admit(route_id)
    assert ticket is not None
    breakers.failed(ticket)
    assert breakers.state(route_id) == "open"


async def test_a_trial_claim_goes_to_one_replica_until_released_or_lapsed(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    route = uuid.uuid4().hex
    assert await a.shared.claim(route, 30.0)
    assert not await b.shared.claim(route, 30.0)
    await b.shared.release(route)  # not b's claim: it stays a's
    assert not await b.shared.claim(route, 30.0)
    await a.shared.release(route)
    assert await b.shared.claim(route, 0.2)
    assert not await a.shared.claim(route, 30.0)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CEILING_S
    while not await a.shared.claim(route, 30.0):  # b's claim lapses by itself
        assert loop.time() < deadline, "the claim never lapsed"
        await asyncio.sleep(0.05)


async def test_an_opening_and_a_closing_on_one_replica_reach_the_other(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    route = uuid.uuid4().hex
    _trip(a.breakers, route)
    await _until(lambda: b.breakers.state(route) == "open", "opened on b")
    assert a.breakers.close(route)  # what a health probe that found it online does
    await _until(lambda: b.breakers.state(route) == "closed", "closed on b")


def _snapshot(upstream: MockUpstream, route_id: str, upstream_model: str) -> Snapshot:
    provider = ProviderSnap(
        "prov-shared", "up", "openai_compatible", upstream.base_url, None, MappingProxyType({}),
        10, 5, 10, 10, None,
    )  # fmt: skip
    route = RouteSnap(route_id, provider, upstream_model, 0, 1.0, None, False, 0)
    model = ModelSnap("m", "t1", "m", "priority", (route,), 1, 200, 300, (), (), False, None, 0)
    return Snapshot(generation=1, built_at=0.0, models=MappingProxyType({"t1": {"m": model}}))


async def test_one_replica_sends_the_trial_and_the_other_follows_its_outcome(
    replicas: tuple[Replica, Replica], upstream: MockUpstream
) -> None:
    route = uuid.uuid4().hex
    upstream_model = f"echo-{route}"
    snapshot = _snapshot(upstream, route, upstream_model)
    loop = asyncio.get_running_loop()
    registry = ProviderRegistry(HttpTransport(Deadlines(loop)))
    timers: list[BreakerTrials] = []
    for replica in replicas:
        trials = BreakerTrials(registry, replica.breakers, lambda: snapshot, loop)
        trials.claims = replica.shared
        replica.breakers.on_open = trials.schedule
        timers.append(trials)

    def sent() -> int:
        return sum(1 for t in upstream.trials if t.body.get("model") == upstream_model)

    def both(state: str) -> bool:
        return all(r.breakers.state(route) == state for r in replicas)

    upstream.down.add(upstream_model)
    try:
        for replica in replicas:  # both saw the route fail: both timers are due together
            _trip(replica.breakers, route)
        await _until(lambda: sent() == 1, "the first trial")
        # It failed: the one that sent it opened for twice as long, and told the other
        # (which takes what is left of it: a moment less than 6 s).
        await _until(
            lambda: all(r.breakers.cooldown(route) > 4.5 for r in replicas), "both near 6 s"
        )
        assert both("open") and sent() == 1
        # The trial's claim outlives it (for its 3 s): a replica whose timer fires after the
        # trial ended but before its outcome arrived (R52: a loaded machine) finds it claimed
        # instead of sending a second trial.
        for replica in replicas:
            assert not await replica.shared.claim(route, 0.1)
    finally:
        upstream.down.discard(upstream_model)
    await _until(lambda: both("closed"), "closed on both by one trial")
    assert sent() == 2
    for trials in timers:
        await trials.close()
    await registry.close()
