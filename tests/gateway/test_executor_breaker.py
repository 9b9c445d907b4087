"""The executor asks the breaker and the deadline before it waits to retry
(gateway/executor.py), in process, against the real mock upstream on loopback: a request that
gets a route's half-open trial and sees it fail with `Retry-After: 10` moves to the next route
at once, though retries remain and the wait would fit the deadline; a `Retry-After` longer
than what is left of the deadline is not waited for either (the breaker still closed); one
that fits is waited for, on the same route."""

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


def _two_routes(upstream: MockUpstream, failing_model: str) -> tuple[ModelSnap, list[RouteSnap]]:
    provider = ProviderSnap(
        "p", "up", "openai_compatible", upstream.base_url, None, MappingProxyType({}), 10, 5, 10,
        10, None,
    )  # fmt: skip
    failing = RouteSnap("failing", provider, failing_model, 0, 1.0, None, False, 0)
    healthy = RouteSnap("healthy", provider, f"echo-after-{failing_model}", 1, 1.0, None, False, 1)
    model = ModelSnap("m", "t", "m", "priority", (failing, healthy), 2, 10, 300, (), (), False,
                      None, 0)  # fmt: skip
    return model, [failing, healthy]


async def _served_within(
    upstream: MockUpstream, registry: ProviderRegistry, failing_model: str, deadline_s: float
) -> tuple[str, float, CallRecord, Breakers]:
    model, routes = _two_routes(upstream, failing_model)
    breakers = Breakers(BreakerSettings(failures=3, cooldown_s=10, max_cooldown_s=30))
    executor = Executor(registry, breakers, Router())
    record = CallRecord("req", "chat.completions", time.perf_counter())
    payload = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
    started = time.monotonic()
    served, _ = await executor.execute(
        Operation.CHAT, model, routes, payload, {}, record, _read,
        deadline_at=time.monotonic() + deadline_s,
    )  # fmt: skip
    return served, time.monotonic() - started, record, breakers


async def test_a_retry_after_longer_than_the_deadline_left_moves_to_the_next_route_at_once(
    upstream: MockUpstream, registry: ProviderRegistry
) -> None:
    served, took, record, breakers = await _served_within(
        upstream, registry, "retry-after-10-deadline", deadline_s=5.0
    )
    assert served == "healthy"
    assert took < 2.0, took  # not the 10 s asked for: they would pass the 5 s deadline
    assert record.attempts == 2  # one on the failing route though two were allowed
    assert breakers.state("failing") == "closed"  # one failure of three: not the breaker


async def test_a_retry_after_that_fits_the_deadline_is_waited_for_on_the_same_route(
    upstream: MockUpstream, registry: ProviderRegistry
) -> None:
    served, took, record, _ = await _served_within(
        upstream, registry, "retry-after-1-fits", deadline_s=300.0
    )
    assert served == "healthy"
    assert took >= 1.0, took  # the second attempt on the failing route came after 1 s
    assert record.attempts == 3
