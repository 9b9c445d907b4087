"""Provider health probes against the real mock upstream, on SQLite and PostgreSQL: how each
answer is read, the sparse health table, the waits between probes, the denylist the snapshot
builds from it, the probe job's own rescheduling, and the trigger the data plane pulls."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.jobs import probe
from llmrelay.jobs.probe import Prober
from llmrelay.jobs.probe_trigger import ProbeTrigger
from llmrelay.jobs.queue import utc
from llmrelay.jobs.runner import JobRunner, RunnerOptions
from llmrelay.snapshot.holder import SnapshotHolder
from llmrelay.store.bootstrap import current_generation
from llmrelay.store.db import session_factory
from llmrelay.store.models_jobs import Job, ProviderHealth
from tests.jobs.ops_support import (
    DELAYS,
    SEALER,
    Announced,
    apply,
    provider_id,
    registry,
    services,
    upstream,
)
from tests.support.mock_upstream import MockUpstream
from tests.support.ports import free_port

__all__ = ["upstream"]  # a module fixture

KEY = "sk-good-key-0123456789"
REVOKED = "sk-revoked-key-9876543210"
FAST = RunnerOptions(concurrency=4, lease_s=5.0, poll_s=0.05, housekeeping_s=0.2)


def config(upstream: MockUpstream) -> str:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    return f"""
providers:
  - {{slug: good, type: openai_compatible, base_url: "{upstream.base_url}", api_key: {KEY}}}
  - {{slug: revoked, type: openai_compatible, base_url: "{upstream.base_url}", api_key: {REVOKED}}}
  - {{slug: gem, type: gemini, base_url: "{upstream.root_url}", api_key: {REVOKED}}}
  - {{slug: dead, type: openai_compatible, base_url: "{dead}", connect_timeout_s: 1}}
models:
  - name: chat
    routes:
      - {{provider: revoked, upstream_model: echo}}
      - {{provider: good, upstream_model: echo, priority: 1}}
"""


async def _row(engine: AsyncEngine, provider: str) -> ProviderHealth | None:
    async with session_factory(engine)() as session:
        return await session.get(ProviderHealth, provider)


async def _generation(engine: AsyncEngine) -> int:
    async with session_factory(engine)() as session:
        return await current_generation(session)


async def test_what_each_answer_means_and_the_health_it_leaves(
    engine: AsyncEngine, upstream: MockUpstream
) -> None:
    await apply(engine, config(upstream))
    ids = {slug: await provider_id(engine, slug) for slug in ("good", "revoked", "gem", "dead")}
    announced = Announced(engine)
    upstream.refused_keys.add(REVOKED)
    try:
        async with registry() as providers:
            prober = Prober(
                engine, SEALER, providers, delays_s=DELAYS, publisher=announced.publisher
            )
            start = await _generation(engine)

            good = await prober.probe(ids["good"])
            assert good is not None and good.result.status == "online"
            assert good.result.models == 4 and good.next_probe_at is None
            online = await _row(engine, ids["good"])  # online: when it was checked, kept
            assert online is not None and (online.status, online.failures) == ("online", 0)
            assert online.checked_at is not None and online.next_probe_at is None
            assert await _generation(engine) == start

            before = time.time()
            refused = await prober.probe(ids["revoked"])
            assert refused is not None
            assert (refused.result.status, refused.result.reason) == (
                "unavailable",
                "credentials_refused",
            )
            row = await _row(engine, ids["revoked"])
            assert row is not None and (row.status, row.failures) == ("unavailable", 1)
            assert row.detail is not None and row.detail.startswith("HTTP 401")
            assert REVOKED not in row.detail  # OpenAI's message quotes the key: masked
            assert row.next_probe_at is not None
            assert before + 300 <= row.next_probe_at.timestamp() <= time.time() + 300
            # Into the denylist: the generation moved and was announced.
            assert await _generation(engine) == start + 1
            assert announced.generations == [start + 1]
            since = row.since

            again = await prober.probe(ids["revoked"])
            assert again is not None and again.failures == 2 and again.generation is None
            row = await _row(engine, ids["revoked"])
            assert row is not None and row.since == since and row.failures == 2
            assert row.next_probe_at is not None
            assert row.next_probe_at.timestamp() - row.checked_at.timestamp() == pytest.approx(600)

            gemini = await prober.probe(ids["gem"])  # Google says 400 API_KEY_INVALID
            assert gemini is not None and gemini.result.reason == "credentials_refused"

            dead = await prober.probe(ids["dead"])
            assert dead is not None
            assert (dead.result.status, dead.result.reason) == ("unavailable", "unreachable")

            for status, reason in ((503, "upstream_error"), (429, "rate_limited")):
                upstream.models_status = status
                degraded = await prober.probe(ids["good"])
                assert degraded is not None
                assert (degraded.result.status, degraded.result.reason) == ("degraded", reason)
                assert degraded.generation is None  # degraded does not change routing
            upstream.models_status = None
            row = await _row(engine, ids["good"])
            assert row is not None and row.failures == 2 and row.reason == "rate_limited"
            assert row.detail is not None and "sk-upstream-abcdef123456" not in row.detail

            # The denylist as the snapshot reads it: unavailable only.
            holder = SnapshotHolder(session_factory(engine), SEALER)
            snapshot = await holder.load()
            assert snapshot.denied_providers == frozenset({ids["revoked"], ids["gem"], ids["dead"]})
            model = snapshot.model(next(iter(snapshot.models)), "chat")
            assert model is not None
            assert [(r.provider.slug, r.denied, r.disabled) for r in model.routes] == [
                ("revoked", True, True),
                ("good", False, False),
            ]
            assert [r.provider.slug for r in model.enabled_routes] == ["good"]

            upstream.refused_keys.clear()  # the key works again
            back = await prober.probe(ids["revoked"])
            assert back is not None and back.result.status == "online"
            assert back.previous == "unavailable" and back.generation is not None
            restored = await _row(engine, ids["revoked"])
            assert restored is not None and (restored.status, restored.failures) == ("online", 0)
            assert announced.generations[-1] == back.generation
    finally:
        upstream.refused_keys.clear()
        upstream.models_status = None


async def _job(engine: AsyncEngine, job_id: str) -> Any:
    async with engine.connect() as conn:
        return (await conn.execute(select(Job.__table__).where(Job.id == job_id))).one()


async def test_the_probe_job_runs_again_until_the_provider_is_back(
    engine: AsyncEngine, upstream: MockUpstream
) -> None:
    await apply(engine, config(upstream))
    revoked = await provider_id(engine, "revoked")

    async def due_now() -> None:  # the next round, without waiting for it
        async with engine.begin() as conn:
            await conn.execute(update(Job).values(run_at=utc(time.time())))

    upstream.refused_keys.add(REVOKED)
    try:
        async with registry() as providers:
            offered = services(engine, providers, probe_delays_s=(600.0, 1200.0))
            runner = JobRunner(engine, [probe.kind()], services=offered, options=FAST)
            async with engine.begin() as conn:
                job_id = await probe.enqueue(conn, revoked, now=time.time())
                # One live probe per provider: a second one is the same job.
                assert await probe.enqueue(conn, revoked, now=time.time()) == job_id
            assert job_id is not None
            for failures, wait in ((1, 600.0), (2, 1200.0), (3, 1200.0)):
                await runner.run_until_idle()
                job = await _job(engine, job_id)
                row = await _row(engine, revoked)
                # Not online: queued again after the schedule's wait, no attempt spent, the
                # key held (the last wait repeats).
                assert (job.status, job.attempts, job.dedupe_key) == (
                    "queued",
                    0,
                    f"probe:{revoked}",
                )
                assert row is not None and row.failures == failures
                assert row.next_probe_at is not None
                assert job.run_at == row.next_probe_at
                assert job.run_at.timestamp() - row.checked_at.timestamp() == pytest.approx(wait)
                await due_now()

            upstream.refused_keys.clear()
            await runner.run_until_idle()
            job = await _job(engine, job_id)
            assert job.status == "succeeded" and job.result["status"] == "online"
            assert job.dedupe_key is None  # free for the next probe
            back = await _row(engine, revoked)
            assert back is not None and back.status == "online"  # out of the denylist
    finally:
        upstream.refused_keys.clear()


async def test_a_burst_of_refusals_queues_one_probe(
    engine: AsyncEngine, upstream: MockUpstream
) -> None:
    await apply(engine, config(upstream))
    revoked = await provider_id(engine, "revoked")
    woken: list[bool] = []
    trigger = ProbeTrigger(engine, wake=lambda: woken.append(True))
    for _ in range(50):
        trigger(revoked)
    await trigger.close()
    async with engine.connect() as conn:
        count = (await conn.execute(select(func.count()).select_from(Job))).scalar_one()
    assert count == 1 and woken == [True]
    # A probe due later (a provider found degraded) is brought forward by a refusal.
    async with engine.begin() as conn:
        await conn.execute(update(Job).values(run_at=utc(time.time() + 3600)))
    later = ProbeTrigger(engine)
    later(revoked)
    await later.close()  # the write ran in its own task
    async with engine.connect() as conn:
        run_at = (await conn.execute(select(Job.run_at))).scalar_one()
    assert run_at.timestamp() <= time.time()
    # Unknown providers queue nothing.
    async with engine.begin() as conn:
        assert await probe.enqueue(conn, "no-such-provider", now=time.time()) is None


async def test_a_new_credential_in_the_config_brings_the_waiting_probe_forward(
    engine: AsyncEngine, upstream: MockUpstream
) -> None:
    await apply(engine, config(upstream))
    revoked = await provider_id(engine, "revoked")
    async with engine.begin() as conn:
        await probe.enqueue(conn, revoked, now=time.time(), run_at=time.time() + 3600)
    await apply(engine, config(upstream))  # the same file: nothing changes
    async with engine.connect() as conn:
        run_at = (await conn.execute(select(Job.run_at))).scalar_one()
    assert run_at.timestamp() > time.time() + 3000
    await apply(engine, config(upstream).replace(f"api_key: {REVOKED}}}", f"api_key: {KEY}}}", 1))
    async with engine.connect() as conn:
        run_at = (await conn.execute(select(Job.run_at))).scalar_one()
    assert run_at.timestamp() <= time.time()
