"""Monthly budgets: the spend rebuilt from request records (SQLite and PostgreSQL), the
refusal once it is reached, and the month turning (an injected clock)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.recorder import Recorder
from llmrelay.limits.base import Demand, LimitKind, Scope, ScopeKind, month_of
from llmrelay.limits.errors import LimitExceeded
from llmrelay.limits.local import LocalLimiter
from llmrelay.limits.spend import month_spend, seed
from llmrelay.metering.cost import Price

NOW = datetime(2026, 12, 15, 12, 0, tzinfo=UTC).timestamp()
LAST_MONTH = datetime(2026, 11, 30, 23, 59, tzinfo=UTC).timestamp()
MIDNIGHT = datetime(2027, 1, 1, tzinfo=UTC).timestamp()
NEXT_MONTH = MIDNIGHT + 1


def _record(request_id: str, key: str, project: str, created: float, cost: int) -> CallRecord:
    record = CallRecord(request_id, "chat.completions", time.perf_counter())
    record.created = created
    record.key_id, record.project_id = key, project
    # 1 USD per million tokens on both sides: `cost` tokens cost `cost` micro-USD.
    record.price = Price("v1", input=1_000_000, output=1_000_000)
    record.take_usage({"prompt_tokens": cost, "completion_tokens": 0})
    return record


async def test_month_spend_sums_this_months_cost_per_key_and_project(engine: AsyncEngine) -> None:
    recorder = Recorder(engine, gather_s=0.01)
    recorder.start()
    rows = [
        _record("a", "k1", "p1", NOW - 3600, 1_000),
        _record("b", "k1", "p1", NOW - 60, 2_500),
        _record("c", "k2", "p1", NOW - 10, 300),
        _record("d", "k1", "p1", LAST_MONTH, 999_999),  # last month: not counted
    ]
    unpriced = CallRecord("e", "chat.completions", time.perf_counter())
    unpriced.created, unpriced.key_id, unpriced.project_id = NOW, "k3", "p2"
    for record in [*rows, unpriced]:
        recorder.record(record.row(1.0))
    await recorder.stop(timeout_s=10)
    spend = await month_spend(engine, NOW)
    assert spend == {"key:k1": 3_500, "key:k2": 300, "project:p1": 3_800}

    limiter = LocalLimiter()
    await seed(limiter, engine, NOW)
    assert limiter.spent("project:p1") == 3_800


def _demand(scope: Scope, now: float, lease: str) -> Demand:
    return Demand((scope,), lease, 1, now)


def test_a_reached_budget_refuses_until_the_month_turns() -> None:
    project = Scope(ScopeKind.PROJECT, "p1", budget_micros=10_000)
    limiter = LocalLimiter()
    limiter.seed_spend(month_of(NOW), {"project:p1": 9_000})
    first = limiter.admit_now(_demand(project, NOW, "1"))
    assert first.quota is not None and first.quota.remaining == 1_000
    limiter.settle(first, tokens=5, cost_micros=1_000)  # reaches the budget
    with pytest.raises(LimitExceeded) as refused:
        limiter.admit_now(_demand(project, NOW + 1, "2"))
    quota = refused.value.quota
    assert (quota.kind, quota.scope, quota.remaining) == (LimitKind.BUDGET, ScopeKind.PROJECT, 0)
    retry = int(refused.value.headers["Retry-After"])
    assert retry == int(MIDNIGHT - (NOW + 1))  # until midnight UTC on the 1st
    assert refused.value.code == "budget_limit_exceeded"
    # Still refused on the last second of the month; admitted once it turns.
    end_of_month = datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
    with pytest.raises(LimitExceeded):
        limiter.admit_now(_demand(project, end_of_month, "3"))
    admitted = limiter.admit_now(_demand(project, NEXT_MONTH, "4"))
    assert admitted.quota is not None and admitted.quota.remaining == 10_000


def test_a_refused_request_takes_nothing_from_any_scope() -> None:
    key = Scope(ScopeKind.KEY, "k1", rpm=5, concurrency=3)
    project = Scope(ScopeKind.PROJECT, "p1", tpm=100)
    limiter = LocalLimiter()
    big = Demand((key, project), "big", 101, NOW)
    limiter.admit_now(Demand((key, project), "small", 60, NOW))
    with pytest.raises(LimitExceeded) as refused:
        limiter.admit_now(big)
    assert refused.value.quota.kind is LimitKind.TPM
    assert limiter.in_flight("key:k1") == 1  # the refused one holds no lease
    after = limiter.admit_now(Demand((key, project), "next", 10, NOW))
    assert after.quota is not None
    # rpm: 2 of 5 taken (the refused one not counted); tpm: 70 of 100 -> the tightest.
    assert (after.quota.kind, after.quota.remaining) == (LimitKind.TPM, 30)
