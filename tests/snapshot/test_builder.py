"""The snapshot is built from the database, frozen, and replaced only by a good build."""

import asyncio
import dataclasses
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay import apikeys
from llmrelay.metering.cost import Price
from llmrelay.snapshot.holder import SnapshotHolder
from llmrelay.snapshot.model import Capabilities, Snapshot
from llmrelay.store.bootstrap import bump_generation
from llmrelay.store.crypto import Sealer
from llmrelay.store.db import create_engine, session_factory
from llmrelay.store.models import GatewaySetting, PriceVersion, Provider, VirtualModel
from llmrelay.store.types import utcnow
from tests.config.test_apply import CAPABLE, CAPTURE_YAML, SEALER, _apply
from tests.config.test_loader import ENV, GOOD


async def _holder(engine: AsyncEngine, sealer: Sealer = SEALER) -> SnapshotHolder:
    holder = SnapshotHolder(session_factory(engine), sealer)
    await holder.load()
    return holder


async def test_snapshot_holds_keys_models_and_decrypted_providers(engine: AsyncEngine) -> None:
    await _apply(engine, GOOD)
    snapshot = (await _holder(engine)).current
    key = snapshot.keys_by_digest[apikeys.digest(ENV["ACME_CI_KEY"])]
    assert key.name == "ci" and key.project.name == "acme"
    assert key.allowed_models == frozenset({"chat-fast"})
    assert key.allows_model("chat-fast") and not key.allows_model("chat-backup")
    assert [str(n) for n in key.ip_allowlist] == ["127.0.0.0/8", "::1/128"]
    assert key.project.limits.rpm == 600 and key.project.limits.monthly_budget_micros == 100_000_000
    model = snapshot.model(key.tenant_id, "chat-fast")
    assert model is not None
    assert [r.provider.slug for r in model.routes] == ["openai-main", "local"]
    assert model.routes[0].provider.api_key == "sk-test-provider"
    assert model.routes[0].provider.timeout_s == 120
    assert model.price is not None and model.price.input == 150_000
    assert snapshot.breaker.failures == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        snapshot.keys_by_digest["x"] = key  # type: ignore[index]


async def test_key_allowlist_is_intersected_with_the_project(engine: AsyncEngine) -> None:
    text = GOOD.replace(
        "    models: [chat-fast]\n    limits", "    models: [chat-backup]\n    limits"
    )
    await _apply(engine, text)
    snapshot = (await _holder(engine)).current
    key = snapshot.keys_by_digest[apikeys.digest(ENV["ACME_CI_KEY"])]
    assert key.allowed_models == frozenset()


async def test_refresh_follows_the_generation(engine: AsyncEngine) -> None:
    await _apply(engine, GOOD)
    holder = await _holder(engine)
    first = holder.current
    assert not await holder.refresh_if_changed()
    assert holder.current is first
    await _apply(engine, GOOD.replace("rpm: 600", "rpm: 700"))
    assert await holder.refresh_if_changed()
    assert holder.current.generation == first.generation + 1
    key = holder.current.keys_by_digest[apikeys.digest(ENV["ACME_CI_KEY"])]
    assert key.project.limits.rpm == 700
    assert first.keys_by_digest[apikeys.digest(ENV["ACME_CI_KEY"])].project.limits.rpm == 600


def _price(snapshot: Snapshot) -> Price:
    model = snapshot.model(next(iter(snapshot.models)), "chat-fast")
    assert model is not None and model.price is not None
    return model.price


async def test_a_scheduled_price_is_taken_by_the_rebuild_due_at_its_start(
    engine: AsyncEngine,
) -> None:
    await _apply(engine, GOOD)
    # Far enough ahead that the first build is done before the price starts on a loaded
    # machine (0.5 s was not, in a CI run with the load at 16 on two cores); the test waits
    # for that moment whatever the build took.
    starts = utcnow() + timedelta(seconds=3)
    async with session_factory(engine).begin() as session:
        model = await session.scalar(select(VirtualModel).where(VirtualModel.name == "chat-fast"))
        assert model is not None
        session.add(
            PriceVersion(model_id=model.id, effective_from=starts, input_micros_per_mtok=999)
        )
    holder = await _holder(engine)
    first = holder.current
    assert first.rebuild_at == pytest.approx(starts.timestamp())
    assert _price(first).input == 150_000
    assert not await holder.refresh_if_changed()  # not due yet, and the generation is the same

    await asyncio.sleep(max(0.0, starts.timestamp() - time.time()) + 0.01)
    assert await holder.refresh_if_changed()  # due: rebuilt with no change to the config
    second = holder.current
    assert second.generation == first.generation and second.rebuild_at is None
    assert _price(second).input == 999
    assert not await holder.refresh_if_changed()


async def test_a_failed_build_keeps_the_last_good_snapshot(engine: AsyncEngine) -> None:
    await _apply(engine, GOOD)
    holder = await _holder(engine)
    good = holder.current
    async with session_factory(engine).begin() as session:
        await session.execute(update(Provider).values(credentials_sealed="v1.badkey.AAAA"))
        await bump_generation(session)
    assert not await holder.refresh_if_changed()
    assert holder.current is good
    assert holder.failed_builds == 1
    assert holder.last_error is not None and "LLMRELAY_SECRET_KEY" in holder.last_error


# -- routing policies -------------------------------------------------------------------

KEYS = {name: f"{name}-key-0123456789abcdef" for name in ("own", "project", "global")}
SCOPES = f"""
providers:
  - {{slug: p-eu, type: openai_compatible, base_url: "http://127.0.0.1:1/v1", region: eu-west}}
  - {{slug: p-any, type: openai_compatible, base_url: "http://127.0.0.1:2/v1"}}
models:
  - name: m
    routes: [{{provider: p-eu, upstream_model: x, tag: t1}}]
routing:
  policies:
    - {{name: glob, providers: [p-eu, p-any]}}
    - {{name: proj, regions: [eu-west], strategy: fixed}}
    - {{name: own, tags: [t1]}}
  policy: glob
projects:
  - name: bound
    routing_policy: proj
    keys:
      - {{name: own-key, key: {KEYS["own"]}, routing_policy: own}}
      - {{name: project-key, key: {KEYS["project"]}}}
  - name: unbound
    keys:
      - {{name: global-key, key: {KEYS["global"]}}}
"""


async def test_the_most_specific_policy_binding_applies_alone(engine: AsyncEngine) -> None:
    await _apply(engine, SCOPES)
    snapshot = (await _holder(engine)).current

    def policy_of(name: str) -> str | None:
        policy = snapshot.keys_by_digest[apikeys.digest(KEYS[name])].policy
        return None if policy is None else policy.name

    assert [policy_of(n) for n in ("own", "project", "global")] == ["own", "proj", "glob"]
    key = snapshot.keys_by_digest[apikeys.digest(KEYS["own"])]
    assert key.policy is not None
    assert (key.policy.providers, key.policy.tags, key.policy.regions) == (
        None,
        frozenset({"t1"}),
        None,
    )
    project = snapshot.keys_by_digest[apikeys.digest(KEYS["project"])].policy
    assert project is not None and project.regions == frozenset({"eu-west"})
    assert project.strategy == "fixed" and key.policy.strategy is None
    model = snapshot.model(key.tenant_id, "m")
    assert model is not None and model.routes[0].provider.region == "eu-west"

    unbound = SCOPES.replace("  policy: glob\n", "").replace("    routing_policy: proj\n", "")
    await _apply(engine, unbound)
    snapshot = (await _holder(engine)).current
    assert [policy_of(n) for n in ("own", "project", "global")] == ["own", None, None]


async def test_a_binding_to_a_missing_policy_keeps_the_last_good_snapshot(
    engine: AsyncEngine,
) -> None:
    await _apply(engine, SCOPES)
    holder = await _holder(engine)
    good = holder.current
    async with session_factory(engine).begin() as session:
        await session.execute(
            update(GatewaySetting)
            .where(GatewaySetting.key == "routing")
            .values(value={"breaker": {}, "policy_id": "gone"})
        )
        await bump_generation(session)
    assert not await holder.refresh_if_changed()
    assert holder.current is good
    assert holder.last_error is not None and "missing policy gone" in holder.last_error


async def test_route_capabilities_and_prices_reach_the_snapshot(engine: AsyncEngine) -> None:
    await _apply(engine, CAPABLE)
    snapshot = (await _holder(engine)).current
    tenant = next(iter(snapshot.keys_by_digest.values())).tenant_id
    fast = snapshot.model(tenant, "chat-fast")
    backup = snapshot.model(tenant, "chat-backup")
    assert fast is not None and backup is not None
    assert fast.routes[1].capabilities == Capabilities(tools=False, context_window=8192)
    price = fast.routes[1].price
    assert price is not None and price.source == "route"
    assert (price.input, price.output, price.cached_input) == (250_000, 1_000_000, None)
    assert price.version_id == f"route:{fast.routes[1].id}"
    assert fast.routes[0].capabilities is None and fast.routes[0].price is None
    assert fast.capability_aware and not backup.capability_aware


async def test_a_keys_capture_mode_reaches_the_snapshot(engine: AsyncEngine) -> None:
    await _apply(engine, CAPTURE_YAML)
    snapshot = (await _holder(engine)).current
    captures = {key.name: key.capture for key in snapshot.keys_by_digest.values()}
    assert captures == {"plain": False, "full": True, "inherits": True, "opts-out": False}


@pytest.mark.postgres
async def test_a_snapshot_sees_one_state_while_a_config_is_applied(
    postgres_engine: AsyncEngine, postgres_url: str
) -> None:
    """A replica building its snapshot while another process applies a config that adds a
    provider and a route to it: the build reads the providers, then the apply commits, then
    the build reads the routes. It must see one state (this failed at start-up with "route
    names a missing provider" before the build read under REPEATABLE READ)."""
    await _apply(postgres_engine, GOOD)
    grown = GOOD.replace(
        "models:\n",
        "  - {slug: extra, type: openai_compatible, base_url: 'http://127.0.0.1:9/v1'}\nmodels:\n",
        1,
    ).replace(
        "      - {provider: local, upstream_model: llama, priority: 1}\n",
        "      - {provider: local, upstream_model: llama, priority: 1}\n"
        "      - {provider: extra, upstream_model: x, priority: 2}\n",
        1,
    )

    def apply_elsewhere() -> None:
        async def run() -> None:
            other = create_engine(postgres_url)
            try:
                await _apply(other, grown)
            finally:
                await other.dispose()

        asyncio.run(run())

    applied: list[str] = []

    def between_queries(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "FROM routes" in statement and not applied:
            applied.append(statement)
            worker = threading.Thread(target=apply_elsewhere)
            worker.start()
            worker.join(timeout=120)
            assert not worker.is_alive()

    event.listen(postgres_engine.sync_engine, "before_cursor_execute", between_queries)
    try:
        snapshot = (await _holder(postgres_engine)).current
    finally:
        event.remove(postgres_engine.sync_engine, "before_cursor_execute", between_queries)
    assert applied, "the apply did not run between the build's queries"
    tenant = next(iter(snapshot.keys_by_digest.values())).tenant_id
    model = snapshot.model(tenant, "chat-fast")
    assert model is not None
    assert [r.provider.slug for r in model.routes] == ["openai-main", "local"]  # the old state
    holder = await _holder(postgres_engine)
    model = holder.current.model(tenant, "chat-fast")
    assert model is not None
    assert [r.provider.slug for r in model.routes] == ["openai-main", "local", "extra"]
