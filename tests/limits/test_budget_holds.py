"""Budgets as hard caps: an admission holds the request's most possible cost until it settles
with the real one, in each limiter (in process, Redis, PostgreSQL): concurrent requests
cannot all pass on a budget that covers a few, and a settle gives back what the request
held but did not spend."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import pytest

from llmrelay.limits.base import Admission, Limiter, LimitKind, Plan, Scope, ScopeKind
from llmrelay.limits.errors import LimitExceeded
from llmrelay.limits.postgres import DatabaseLimiter
from llmrelay.limits.redis import RedisLimiter
from tests.support.limiters import started_limiter

BUDGET = 1_000
HOLD = 400


async def _flush(limiter: Limiter) -> None:
    if isinstance(limiter, RedisLimiter | DatabaseLimiter):
        await limiter.flush()


@pytest.fixture(params=["local", "redis", pytest.param("database", marks=pytest.mark.postgres)])
async def limiter(request: pytest.FixtureRequest) -> AsyncIterator[Limiter]:
    async with started_limiter(request.param) as made:
        yield made


async def _admit(limiter: Limiter, plan: Plan, lease: str) -> Admission:
    return await limiter.admit_plan(plan, 1, time.time(), lease, HOLD)


async def test_holds_refuse_what_the_budget_cannot_cover_and_settles_give_back(
    limiter: Limiter,
) -> None:
    scope = Scope(ScopeKind.PROJECT, uuid.uuid4().hex, budget_micros=BUDGET)
    plan = Plan((scope,))
    first = await _admit(limiter, plan, "a")
    second = await _admit(limiter, plan, "b")  # 400 held: still below the budget
    assert second.quota is not None and second.quota.remaining == BUDGET - 2 * HOLD
    third = await _admit(limiter, plan, "c")  # 800 held: below, admitted (it may cross)
    with pytest.raises(LimitExceeded) as refused:  # 1200 held: refused, whatever it would cost
        await _admit(limiter, plan, "d")
    assert refused.value.quota.kind is LimitKind.BUDGET
    assert refused.value.quota.remaining == BUDGET - 3 * HOLD
    limiter.settle(first, None, 100)  # spent 100 of its 400: 300 back
    limiter.settle(second, None, 150)
    limiter.settle(third, None, 400)
    await _flush(limiter)
    fourth = await _admit(limiter, plan, "e")  # 650 spent, nothing held: admitted
    assert fourth.quota is not None and fourth.quota.remaining == BUDGET - 650 - HOLD
    with pytest.raises(LimitExceeded):
        await _admit(limiter, plan, "f")
    limiter.settle(fourth, None, 400)
    await _flush(limiter)
    with pytest.raises(LimitExceeded) as spent:  # 1050 spent: one hold over at most
        await _admit(limiter, plan, "g")
    assert spent.value.quota.remaining == BUDGET - 1050
