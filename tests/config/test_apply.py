"""Applying a config is an idempotent upsert that stores keys only as digests."""

from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay import apikeys
from llmrelay.config.apply import ApplyResult, apply_config
from llmrelay.config.loader import ConfigError, parse_config
from llmrelay.store.crypto import Sealer
from llmrelay.store.db import session_factory
from llmrelay.store.models import (
    ApiKey,
    Base,
    GatewaySetting,
    PriceVersion,
    Project,
    Provider,
    Route,
    RoutingPolicy,
)
from tests.config.test_loader import ENV, GOOD, POLICIES

SEALER = Sealer("test-secret-key-for-apply-tests-0123456789")


async def _apply(engine: AsyncEngine, yaml_text: str, env: dict[str, str] = ENV) -> ApplyResult:
    config = parse_config(yaml_text, "gw.yaml", env)
    async with session_factory(engine).begin() as session:
        return await apply_config(session, config, SEALER, source="gw.yaml")


async def _dump(engine: AsyncEngine) -> dict[str, list[tuple[Any, ...]]]:
    out = {}
    async with engine.connect() as conn:
        for table in Base.metadata.sorted_tables:
            rows = await conn.execute(text(f"SELECT * FROM {table.name}"))
            out[table.name] = sorted((tuple(r) for r in rows), key=repr)
    return out


async def test_first_apply_creates_everything(engine: AsyncEngine) -> None:
    result = await _apply(engine, GOOD)
    assert result.changed
    assert "created provider openai-main" in result.changes
    assert "created key acme/ci" in result.changes
    assert result.generated_keys == []
    assert result.generation == 1
    async with session_factory(engine)() as session:
        key = await session.scalar(select(ApiKey).where(ApiKey.name == "ci"))
        assert key is not None
        assert key.digest == apikeys.digest(ENV["ACME_CI_KEY"])
        assert (key.prefix, key.last_four) == ("acme-ci-ke", "cdef")
        assert key.ip_allowlist == ["127.0.0.0/8", "::1/128"]
        routes = (await session.scalars(select(Route).order_by(Route.position))).all()
        assert [(r.upstream_model, r.priority, r.weight) for r in routes][:1] == [
            ("gpt-4o-mini", 0, 2.0)
        ]
        price = await session.scalar(select(PriceVersion))
        assert price is not None
        assert (price.input_micros_per_mtok, price.output_micros_per_mtok) == (150_000, 600_000)
        assert price.cached_input_micros_per_mtok == 75_000


async def test_secrets_are_never_stored_in_plain_text(engine: AsyncEngine) -> None:
    await _apply(engine, GOOD)
    everything = repr(await _dump(engine))
    assert ENV["ACME_CI_KEY"] not in everything
    assert ENV["OPENAI_API_KEY"] not in everything
    async with session_factory(engine)() as session:
        provider = await session.scalar(select(Provider).where(Provider.slug == "openai-main"))
        assert provider is not None and provider.credentials_sealed is not None
        assert SEALER.open(provider.credentials_sealed, context=provider.id) == (
            b'{"api_key":"sk-test-provider","headers":{}}'
        )
        assert provider.api_key_last_four == "ider"


async def test_applying_twice_changes_nothing(engine: AsyncEngine) -> None:
    await _apply(engine, GOOD)
    before = await _dump(engine)
    again = await _apply(engine, GOOD)
    assert again.changes == []
    assert again.generation == 1
    assert await _dump(engine) == before


async def test_a_change_is_applied_reported_and_moves_the_generation(engine: AsyncEngine) -> None:
    await _apply(engine, GOOD)
    changed = (
        GOOD.replace("attempts: 2", "attempts: 3")
        .replace("{provider: local, upstream_model: llama, priority: 1}", "")
        .replace("      - \n", "")
    )
    result = await _apply(engine, changed.replace("input_per_mtok: 0.15", "input_per_mtok: 0.2"))
    assert "updated model chat-fast (pricing, retry_attempts, routes)" in result.changes
    assert result.generation == 2
    async with session_factory(engine)() as session:
        assert len((await session.scalars(select(PriceVersion))).all()) == 2
        routes = (await session.scalars(select(Route))).all()
        assert sorted(r.upstream_model for r in routes) == [
            "gpt-4o-mini",
            "llama",
        ]  # backup keeps its


async def test_credentials_change_is_detected(engine: AsyncEngine) -> None:
    await _apply(engine, GOOD)
    result = await _apply(engine, GOOD, {**ENV, "OPENAI_API_KEY": "sk-rotated-value"})
    assert result.changes == ["updated provider openai-main (credentials)"]


async def test_a_key_without_value_is_generated_once_and_printed_once(engine: AsyncEngine) -> None:
    yaml_text = GOOD.replace("        key: ${ACME_CI_KEY}\n", "")
    first = await _apply(engine, yaml_text)
    assert len(first.generated_keys) == 1
    generated = first.generated_keys[0]
    assert (generated.project, generated.name) == ("acme", "ci")
    second = await _apply(engine, yaml_text)
    assert second.generated_keys == [] and second.changes == []
    async with session_factory(engine)() as session:
        key = await session.scalar(select(ApiKey))
        assert key is not None and key.digest == apikeys.digest(generated.key)
        assert key.source == "generated"


async def test_routes_to_a_provider_stored_earlier_are_accepted(engine: AsyncEngine) -> None:
    await _apply(engine, GOOD)
    later = """
models:
  - name: extra
    routes: [{provider: local, upstream_model: other}]
"""
    result = await _apply(engine, later)
    assert result.changes == ["created model extra"]


async def test_unknown_provider_against_the_database_is_an_error(engine: AsyncEngine) -> None:
    bad = "models:\n  - name: m\n    routes: [{provider: ghost, upstream_model: x}]\n"
    with pytest.raises(ConfigError) as caught:
        await _apply(engine, bad)
    assert str(caught.value) == "gw.yaml: models[0].routes[0].provider: unknown provider 'ghost'"
    assert (await _dump(engine))["virtual_models"] == []


# -- routing policies -------------------------------------------------------------------


async def _bindings(engine: AsyncEngine) -> dict[str, str | None]:
    """Policy names by binding: "global", "project", "key" (None: not bound)."""
    async with session_factory(engine)() as session:
        names = {p.id: p.name for p in await session.scalars(select(RoutingPolicy))}
        routing = await session.get(GatewaySetting, "routing")
        project = await session.scalar(select(Project).where(Project.name == "acme"))
        key = await session.scalar(select(ApiKey).where(ApiKey.name == "ci"))
    assert routing is not None and project is not None and key is not None
    return {
        "global": names.get(routing.value.get("policy_id", "")),
        "project": names.get(project.routing_policy_id or ""),
        "key": names.get(key.routing_policy_id or ""),
    }


async def test_policies_are_stored_and_bound(engine: AsyncEngine) -> None:
    result = await _apply(engine, POLICIES)
    assert "created routing policy eu-only" in result.changes
    assert "created routing policy primary-only" in result.changes
    async with session_factory(engine)() as session:
        policies = {p.name: p for p in await session.scalars(select(RoutingPolicy))}
        local = await session.scalar(select(Provider).where(Provider.slug == "local"))
    eu = policies["eu-only"]
    assert (eu.providers, eu.tags, eu.regions, eu.strategy) == (
        ["local"],
        None,
        ["eu-west"],
        "fixed",
    )
    primary = policies["primary-only"]
    assert (primary.providers, primary.tags, primary.regions, primary.strategy) == (
        None,
        ["primary"],
        None,
        None,
    )
    assert local is not None and local.region == "eu-west"
    assert await _bindings(engine) == {
        "global": "eu-only",
        "project": "eu-only",
        "key": "primary-only",
    }


async def test_applying_policies_twice_changes_nothing(engine: AsyncEngine) -> None:
    await _apply(engine, POLICIES)
    before = await _dump(engine)
    again = await _apply(engine, POLICIES)
    assert again.changes == []
    assert again.generation == 1
    assert await _dump(engine) == before


async def test_a_policy_change_is_applied_and_reported(engine: AsyncEngine) -> None:
    await _apply(engine, POLICIES)
    changed = POLICIES.replace("strategy: fixed", "strategy: least_time").replace(
        "      tags: [primary]\n", "      tags: [primary, backup]\n      regions: [us]\n"
    )
    result = await _apply(engine, changed)
    assert sorted(result.changes) == [
        "updated routing policy eu-only (strategy)",
        "updated routing policy primary-only (regions, tags)",
    ]
    assert result.generation == 2


async def test_bindings_left_out_are_cleared_and_policies_left_out_are_kept(
    engine: AsyncEngine,
) -> None:
    """As for models and providers, a policy the file no longer names stays stored (a key
    outside the file may be bound to it); bindings of the entries the file names follow it."""
    await _apply(engine, POLICIES)
    rebound = POLICIES.replace("  policy: eu-only\n", "  policy: primary-only\n").replace(
        "        routing_policy: primary-only\n", ""
    )
    result = await _apply(engine, rebound)
    assert sorted(result.changes) == [
        "updated key acme/ci (routing_policy_id)",
        "updated setting routing",
    ]
    assert await _bindings(engine) == {
        "global": "primary-only",
        "project": "eu-only",
        "key": None,
    }
    result = await _apply(engine, GOOD)  # no policies, no bindings; a routing section
    assert sorted(result.changes) == [
        "updated project acme (routing_policy_id)",
        "updated provider local (region)",
        "updated setting routing",
    ]
    assert await _bindings(engine) == {"global": None, "project": None, "key": None}
    dump = await _dump(engine)
    assert len(dump["routing_policies"]) == 2
    no_routing = GOOD.split("routing:")[0] + "\n"
    rebound_again = await _apply(engine, POLICIES)
    assert rebound_again.changed
    assert sorted((await _apply(engine, no_routing)).changes) == [
        "updated key acme/ci (routing_policy_id)",
        "updated project acme (routing_policy_id)",
        "updated provider local (region)",
    ]
    assert (await _bindings(engine))["global"] == "eu-only"  # no routing section: left alone


async def test_bindings_may_name_a_policy_stored_earlier(engine: AsyncEngine) -> None:
    await _apply(engine, POLICIES)
    later = "projects:\n  - name: other\n    routing_policy: primary-only\n"
    result = await _apply(engine, later)
    assert result.changes == ["created project other"]
    async with session_factory(engine)() as session:
        other = await session.scalar(select(Project).where(Project.name == "other"))
        primary = await session.scalar(
            select(RoutingPolicy).where(RoutingPolicy.name == "primary-only")
        )
    assert other is not None and primary is not None
    assert other.routing_policy_id == primary.id


async def test_an_unknown_policy_against_the_database_is_an_error(engine: AsyncEngine) -> None:
    await _apply(engine, POLICIES)
    bad = "projects:\n  - name: other\n    keys: [{name: k, routing_policy: ghost}]\n"
    with pytest.raises(ConfigError) as caught:
        await _apply(engine, bad)
    assert str(caught.value) == (
        "gw.yaml: projects[0].keys[0].routing_policy: unknown routing policy 'ghost'"
    )
    assert len((await _dump(engine))["projects"]) == 1


CAPABLE = GOOD.replace(
    "{provider: local, upstream_model: llama, priority: 1}",
    "{provider: local, upstream_model: llama, priority: 1,"
    " capabilities: {tools: false, context_window: 8192},"
    " pricing: {input_per_mtok: 0.25, output_per_mtok: 1}}",
)


async def test_route_capabilities_and_prices_are_stored_as_stated(engine: AsyncEngine) -> None:
    await _apply(engine, CAPABLE)
    async with session_factory(engine)() as session:
        routes = (await session.scalars(select(Route))).all()
    llama = next(r for r in routes if r.upstream_model == "llama" and r.priority == 1)
    assert llama.capabilities == {"tools": False, "context_window": 8192}  # the rest unknown
    assert llama.pricing == {"input": 250_000, "output": 1_000_000}
    others = [r for r in routes if r is not llama]
    assert len(others) == 2 and all(r.capabilities is None and r.pricing is None for r in others)
    again = await _apply(engine, CAPABLE)
    assert again.changes == []
    changed = await _apply(engine, CAPABLE.replace("tools: false", "tools: true"))
    assert changed.changes == ["updated model chat-fast (routes)"]
    removed = await _apply(engine, GOOD)
    assert removed.changes == ["updated model chat-fast (routes)"]
    async with session_factory(engine)() as session:
        assert all(r.capabilities is None for r in (await session.scalars(select(Route))).all())


def test_a_bad_capability_names_the_path() -> None:
    with pytest.raises(ConfigError) as bad:
        parse_config(CAPABLE.replace("tools: false", "tools: maybe"), "gw.yaml", ENV)
    assert "models[0].routes[1].capabilities.tools" in str(bad.value)
    with pytest.raises(ConfigError) as unknown:
        parse_config(CAPABLE.replace("tools: false", "vision: false"), "gw.yaml", ENV)
    assert "vision" in str(unknown.value)


PRESETS_YAML = """
providers:
  - {slug: ds, type: openai_compatible, preset: deepseek, api_key: sk-x}
  - {slug: local, type: openai_compatible, preset: ollama, base_url: "http://gpu-box:11434/v1"}
models:
  - name: m
    routes: [{provider: ds, upstream_model: deepseek-chat}]
"""


async def test_a_preset_gives_a_default_base_url_and_is_stored(engine: AsyncEngine) -> None:
    await _apply(engine, PRESETS_YAML)
    async with session_factory(engine)() as session:
        rows = {p.slug: p for p in (await session.scalars(select(Provider))).all()}
    assert (rows["ds"].preset, rows["ds"].base_url) == ("deepseek", "https://api.deepseek.com/v1")
    assert (rows["local"].preset, rows["local"].base_url) == ("ollama", "http://gpu-box:11434/v1")
    assert (await _apply(engine, PRESETS_YAML)).changes == []


def test_a_preset_is_only_for_openai_compatible_and_must_be_known() -> None:
    wrong_type = "providers: [{slug: a, type: anthropic, preset: deepseek}]\nmodels: []\n"
    with pytest.raises(ConfigError) as bad:
        parse_config(wrong_type, "gw.yaml", ENV)
    assert "preset is only for type openai_compatible" in str(bad.value)
    unknown = "providers: [{slug: a, type: openai_compatible, preset: llamacpp}]\nmodels: []\n"
    with pytest.raises(ConfigError) as unknown_preset:
        parse_config(unknown, "gw.yaml", ENV)
    assert "providers[0].preset" in str(unknown_preset.value)


CAPTURE_YAML = """
providers: [{slug: up, type: openai_compatible, base_url: "http://127.0.0.1:9/v1"}]
models: [{name: chat, routes: [{provider: up, upstream_model: m}]}]
projects:
  - name: quiet
    keys:
      - {name: plain, key: capture-plain-key-0123456789}
      - {name: full, key: capture-full-key-0123456789, capture: full}
  - name: loud
    capture: full
    keys:
      - {name: inherits, key: capture-inherits-key-0123456789}
      - {name: opts-out, key: capture-optout-key-0123456789, capture: off}
"""


async def _captures(engine: AsyncEngine) -> dict[str, str]:
    async with session_factory(engine)() as session:
        return {k.name: k.capture for k in (await session.scalars(select(ApiKey))).all()}


async def test_capture_is_the_keys_own_else_its_projects_else_off(engine: AsyncEngine) -> None:
    await _apply(engine, CAPTURE_YAML)
    assert await _captures(engine) == {
        "plain": "off",
        "full": "full",
        "inherits": "full",
        "opts-out": "off",  # a bare YAML `off` (read as false) is "off"
    }
    before = await _dump(engine)
    again = await _apply(engine, CAPTURE_YAML)
    assert again.changes == [] and again.generation == 1
    assert await _dump(engine) == before

    quieter = await _apply(engine, CAPTURE_YAML.replace("    capture: full\n", ""))
    assert quieter.changes == ["updated key loud/inherits (capture)"]
    assert quieter.generation == 2
    assert (await _captures(engine))["inherits"] == "off"


def test_capture_takes_off_or_full_only() -> None:
    for value in ("on", "true", "headers"):
        text = CAPTURE_YAML.replace("capture: full}", f"capture: {value}}}")
        with pytest.raises(ConfigError) as bad:
            parse_config(text, "gw.yaml", ENV)
        assert "projects[0].keys[1].capture" in str(bad.value)
