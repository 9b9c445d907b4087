"""The executor asks the breaker before it waits to retry (gateway/executor.py), in process,
against the real mock upstream on loopback: a request that gets a route's half-open trial and
sees it fail with `Retry-After: 10` moves to the next route at once, though retries remain and
the wait would fit the deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from types import MappingProxyType

import pytest

from llmrelay.deadlines import Deadlines
from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.executor import Executor
from llmrelay.providers.base import Operation, UpstreamResponse
from llmrelay.providers.http import HttpTransport
from llmrelay.providers.registry import ProviderRegistry
from llmrelay.routing.breaker import Breakers
from llmrelay.routing.strategies import Router
from llmrelay.snapshot.model import BreakerSettings, ModelSnap, ProviderSnap, RouteSnap
from tests.support.mock_upstream import MockUpstream


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def upstream() -> Iterator[MockUpstream]:
    server = MockUpstream().start()
    yield server
    server.stop()


@pytest.fixture
async def registry() -> AsyncIterator[ProviderRegistry]:
    made = ProviderRegistry(HttpTransport(Deadlines(asyncio.get_running_loop())))
    try:
        yield made
    finally:
        await made.close()


async def _read(route: RouteSnap, response: UpstreamResponse) -> tuple[str, bytes]:
    try:
        return route.id, await response.read()
    finally:
        response.release()


async def test_a_failed_half_open_trial_moves_to_the_next_route_without_the_retry_wait(
    upstream: MockUpstream, registry: ProviderRegistry
) -> None:
    provider = ProviderSnap(
        "p", "up", "openai_compatible", upstream.base_url, None, MappingProxyType({}), 10, 5, 10,
        10, None,
    )  # fmt: skip
    failing = RouteSnap("failing", provider, "retry-after-10-trial", 0, 1.0, None, False, 0)
    healthy = RouteSnap("healthy", provider, "echo-after-trial", 1, 1.0, None, False, 1)
    routes = (failing, healthy)
    model = ModelSnap("m", "t", "m", "priority", routes, 3, 10, 300, (), (), False, None, 0)
    clock = FakeClock()
    breakers = Breakers(BreakerSettings(failures=3, cooldown_s=10, max_cooldown_s=30), clock)
    ticket = breakers.admit("failing")
    assert ticket is not None
    breakers.failed(ticket, misconfigured=True)  # open
    clock.now += 10  # the cooldown is over: the next request gets the trial
    executor = Executor(registry, breakers, Router())
    record = CallRecord("req", "chat.completions", time.perf_counter())
    payload = {"model": "m", "messages": [{"role": "user", "content": "still there"}]}

    started = time.monotonic()
    served, body = await executor.execute(
        Operation.CHAT,
        model,
        list(routes),
        payload,
        {},
        record,
        _read,
        deadline_at=time.monotonic() + 300,
    )
    took = time.monotonic() - started

    assert served == "healthy" and b"still there" in body
    assert took < 2.0, took  # not the 10 s the failed trial's Retry-After asked for
    assert record.attempts == 2
    assert breakers.state("failing") == "open"
    assert breakers.retry_after("failing") == 20.0  # the failed trial doubled the cooldown
