"""A snapshot is validated before it can be installed; a broken one keeps the last good one."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.snapshot.builder import build_snapshot
from llmrelay.snapshot.holder import SnapshotHolder
from llmrelay.snapshot.validate import SnapshotInvalid
from llmrelay.store.bootstrap import bump_generation
from llmrelay.store.db import session_factory
from llmrelay.store.models import Provider, Route, RoutingPolicy, VirtualModel
from tests.config.test_apply import SEALER, _apply
from tests.config.test_loader import GOOD, POLICIES

BREAKAGES = {
    "dangling fallback": (
        update(VirtualModel)
        .where(VirtualModel.name == "chat-fast")
        .values(fallbacks=["chat-backup", "gone"]),
        "model 'chat-fast': fallbacks names a missing model 'gone'",
    ),
    "dangling context fallback": (
        update(VirtualModel)
        .where(VirtualModel.name == "chat-backup")
        .values(context_fallbacks=["gone-too"]),
        "model 'chat-backup': context_fallbacks names a missing model 'gone-too'",
    ),
    "unknown provider type": (
        update(Provider).where(Provider.slug == "local").values(type="carrier-pigeon"),
        "provider 'local': unknown type 'carrier-pigeon'",
    ),
    "unknown strategy": (
        update(VirtualModel).where(VirtualModel.name == "chat-fast").values(strategy="dice"),
        "model 'chat-fast': unknown strategy 'dice'",
    ),
    "negative weight": (
        update(Route).where(Route.upstream_model == "llama").values(weight=-1),
        "has a negative weight -1",
    ),
}


@pytest.mark.parametrize("breakage", BREAKAGES)
async def test_a_broken_config_fails_the_build(engine: AsyncEngine, breakage: str) -> None:
    await _apply(engine, GOOD)
    statement, message = BREAKAGES[breakage]
    async with session_factory(engine).begin() as session:
        await session.execute(statement)
    async with session_factory(engine)() as session:
        with pytest.raises(SnapshotInvalid, match=message.replace("(", r"\(")):
            await build_snapshot(session, SEALER)


async def test_an_unknown_policy_strategy_fails_the_build(engine: AsyncEngine) -> None:
    await _apply(engine, POLICIES)
    async with session_factory(engine).begin() as session:
        await session.execute(update(RoutingPolicy).values(strategy="dice"))
    async with session_factory(engine)() as session:
        with pytest.raises(SnapshotInvalid, match="unknown strategy 'dice'"):
            await build_snapshot(session, SEALER)


async def test_the_holder_keeps_the_last_good_snapshot_and_counts_a_generation_once(
    engine: AsyncEngine,
) -> None:
    await _apply(engine, GOOD)
    holder = SnapshotHolder(session_factory(engine), SEALER)
    good = await holder.load()
    failures: list[tuple[int, str]] = []
    holder.failure_listeners.append(lambda generation, error: failures.append((generation, error)))
    async with session_factory(engine).begin() as session:
        await session.execute(update(Provider).values(type="carrier-pigeon"))
        broken = await bump_generation(session)

    for _ in range(3):  # every poll and signal retries it: counted and logged once
        assert not await holder.refresh_if_changed()
    assert holder.current is good
    assert holder.failed_builds == 1
    assert holder.failed_generation == broken
    assert holder.last_error is not None and "carrier-pigeon" in holder.last_error
    assert [g for g, _ in failures] == [broken]

    async with session_factory(engine).begin() as session:  # a second broken generation
        await bump_generation(session)
    assert not await holder.refresh_if_changed()
    assert holder.failed_builds == 2

    async with session_factory(engine).begin() as session:  # fixed
        await session.execute(update(Provider).values(type="openai_compatible"))
        fixed = await bump_generation(session)
    assert await holder.refresh_if_changed()
    assert holder.current.generation == fixed
    assert holder.last_error is None and holder.failed_generation is None


async def test_concurrent_refreshes_build_once(engine: AsyncEngine) -> None:
    await _apply(engine, GOOD)
    holder = SnapshotHolder(session_factory(engine), SEALER)
    await holder.load()
    installed: list[int] = []
    holder.listeners.append(lambda snapshot: installed.append(snapshot.generation))
    await _apply(engine, GOOD.replace("rpm: 600", "rpm: 601"))
    results = await asyncio.gather(*(holder.refresh_if_changed() for _ in range(4)))
    assert sorted(results) == [False, False, False, True]
    assert installed == [holder.current.generation]
