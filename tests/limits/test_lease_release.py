"""A shared limiter's concurrency lease, given back when its request ends, is written off the
request path; the next request of a client that waits for nothing (an agent's loop at
concurrency 1) must not be refused by it (limits/releases.py)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import pytest

from llmrelay.limits.base import Limiter, LimitKind, Plan, Scope, ScopeKind
from llmrelay.limits.errors import LimitExceeded
from tests.support.limiters import started_limiter

ROUNDS = 60


@pytest.fixture(params=["redis", pytest.param("database", marks=pytest.mark.postgres)])
async def limiter(request: pytest.FixtureRequest) -> AsyncIterator[Limiter]:
    async with started_limiter(request.param) as made:
        yield made


async def test_a_sequential_client_at_concurrency_1_is_never_refused(limiter: Limiter) -> None:
    plan = Plan((Scope(ScopeKind.KEY, uuid.uuid4().hex, concurrency=1),))
    for _ in range(ROUNDS):
        admission = await limiter.admit_plan(plan, 1, time.time())
        limiter.settle(admission, None, 0)  # the request ended: its lease is queued back


async def test_a_lease_still_held_is_still_refused(limiter: Limiter) -> None:
    plan = Plan((Scope(ScopeKind.KEY, uuid.uuid4().hex, concurrency=1),))
    held = await limiter.admit_plan(plan, 1, time.time())
    ended = None
    for _ in range(3):  # with and without releases of other requests queued meanwhile
        with pytest.raises(LimitExceeded) as refused:
            await limiter.admit_plan(plan, 1, time.time())
        assert refused.value.quota.kind is LimitKind.CONCURRENCY
        other = Plan((Scope(ScopeKind.KEY, uuid.uuid4().hex, concurrency=1),))
        ended = await limiter.admit_plan(other, 1, time.time())
        limiter.settle(ended, None, 0)
    limiter.settle(held, None, 0)
    await limiter.admit_plan(plan, 1, time.time())  # given back: admitted (after the wait)
