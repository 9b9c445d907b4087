"""Model discovery from the real mock upstream into a provider's inventory, on SQLite and
PostgreSQL: catalogue metadata, the provider's own figures first, hand entries kept, the
version moved only by a change, and a refused credential handed to the health probe."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.jobs import discovery, probe
from llmrelay.jobs.runner import JobRunner, RunnerOptions
from llmrelay.store.db import session_factory
from llmrelay.store.models import Provider
from llmrelay.store.models_jobs import Job
from tests.jobs.ops_support import apply, provider_id, registry, services, upstream
from tests.support.mock_upstream import MockUpstream

__all__ = ["upstream"]  # a module fixture

KEY = "sk-good-key-0123456789"
REVOKED = "sk-revoked-key-9876543210"
FAST = RunnerOptions(concurrency=4, lease_s=5.0, poll_s=0.05, housekeeping_s=0.2)
HAND_ENTRIES = [
    {"id": "house-model-7b", "source": "manual", "note": "ours, fine-tuned"},
    {"id": "legacy-model"},  # put through the API before discovery existed: a hand entry
    {"id": "retired-model", "source": "discovered"},
]


def config(upstream: MockUpstream) -> str:
    return f"""
providers:
  - {{slug: good, type: openai_compatible, base_url: "{upstream.base_url}", api_key: {KEY}}}
  - {{slug: gem, type: gemini, base_url: "{upstream.root_url}", api_key: {KEY}}}
  - {{slug: revoked, type: openai_compatible, base_url: "{upstream.base_url}", api_key: {REVOKED}}}
"""


async def _provider(engine: AsyncEngine, provider: str) -> Provider:
    async with session_factory(engine)() as session:
        found = await session.get(Provider, provider)
    assert found is not None
    return found


async def _discover(engine: AsyncEngine, provider: str) -> Any:
    async with registry() as providers:
        runner = JobRunner(
            engine,
            [discovery.kind(), probe.kind()],
            services=services(engine, providers),
            options=FAST,
        )
        async with engine.begin() as conn:
            job_id = await discovery.enqueue(
                conn, await _provider(engine, provider), now=time.time()
            )
            # One live discovery per provider: asking again names the same job.
            again = await discovery.enqueue(
                conn, await _provider(engine, provider), now=time.time()
            )
            assert again == job_id
        await runner.run_until_idle()
    async with engine.connect() as conn:
        return (await conn.execute(select(Job.__table__).where(Job.id == job_id))).one()


async def test_discovery_fills_the_inventory_and_keeps_hand_entries(
    engine: AsyncEngine, upstream: MockUpstream
) -> None:
    await apply(engine, config(upstream))
    good = await provider_id(engine, "good")
    async with session_factory(engine).begin() as session:
        row = await session.get(Provider, good)
        assert row is not None
        row.model_inventory = HAND_ENTRIES
    version = (await _provider(engine, good)).version

    job = await _discover(engine, good)
    assert job.status == "succeeded", job.error
    assert job.result == {
        "provider_id": good,
        "listed": 4,
        "models": 5,
        "added": 3,
        "removed": 1,
        "kept_manual": 2,
        "changed": True,
    }
    row = await _provider(engine, good)
    assert row.version == version + 1  # the ETag moves with the inventory
    inventory = row.model_inventory
    assert inventory is not None
    assert inventory[:2] == HAND_ENTRIES[:2]  # as they were, first
    assert [e["id"] for e in inventory[2:]] == [
        "claude-sonnet-4-5",
        "gpt-4o",
        "gpt-4o-mini-2024-07-18",
    ]
    mini = inventory[-1]
    assert mini == {
        "id": "gpt-4o-mini-2024-07-18",
        "source": "discovered",
        "catalogue_id": "gpt-4o-mini",
        "context_window": 128000,
        "max_output": 16384,
        "capabilities": ["tools", "vision", "json"],
        "pricing": {"input_per_mtok": 0.15, "cached_input_per_mtok": 0.075, "output_per_mtok": 0.6},
    }

    again = await _discover(engine, good)  # the same list: nothing changes
    assert again.status == "succeeded" and again.result["changed"] is False
    assert (await _provider(engine, good)).version == version + 1


async def test_the_providers_own_figures_come_before_the_catalogues(
    engine: AsyncEngine, upstream: MockUpstream
) -> None:
    await apply(engine, config(upstream))
    gem = await provider_id(engine, "gem")
    job = await _discover(engine, gem)
    assert job.status == "succeeded", job.error
    inventory = (await _provider(engine, gem)).model_inventory
    assert inventory is not None
    by_id = {e["id"]: e for e in inventory}
    assert set(by_id) == {"gpt-4o-mini-2024-07-18", "gpt-4o", "claude-sonnet-4-5", "house-model-7b"}
    # Gemini's list states the token limits: they win; the catalogue adds the rest.
    assert by_id["gpt-4o"]["context_window"] == 1_048_576
    assert by_id["gpt-4o"]["catalogue_id"] == "gpt-4o"
    assert by_id["gpt-4o"]["name"] == "Gpt-4O"
    assert (
        "pricing" not in by_id["house-model-7b"] and "catalogue_id" not in by_id["house-model-7b"]
    )


async def test_a_refused_credential_fails_discovery_and_queues_a_probe(
    engine: AsyncEngine, upstream: MockUpstream
) -> None:
    await apply(engine, config(upstream))
    revoked = await provider_id(engine, "revoked")
    upstream.refused_keys.add(REVOKED)
    try:
        job = await _discover(engine, revoked)
    finally:
        upstream.refused_keys.clear()
    assert job.status == "failed" and job.attempts == 1
    assert "refused the credentials" in job.error and REVOKED not in job.error
    assert (await _provider(engine, revoked)).model_inventory is None
    async with engine.connect() as conn:
        probes = (
            await conn.execute(select(Job.dedupe_key).where(Job.kind == "provider_probe"))
        ).all()
    # The probe ran in the same runner, found the key refused, and waits for its next round.
    assert probes == [(f"probe:{revoked}",)]
