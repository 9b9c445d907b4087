"""Validation errors name the file, the path inside it and the problem."""

from pathlib import Path

import pytest

from llmrelay.config.loader import (
    ConfigError,
    check_references,
    expand_env,
    load_config,
    parse_config,
)
from llmrelay.config.schema import BreakerConfig, ProviderType, Strategy

GOOD = """
providers:
  - slug: openai-main
    type: openai
    api_key: ${OPENAI_API_KEY}
    timeout_s: 120
  - slug: local
    type: openai_compatible
    base_url: http://127.0.0.1:8000/v1/
models:
  - name: chat-fast
    strategy: priority
    routes:
      - {provider: openai-main, upstream_model: gpt-4o-mini, priority: 0, weight: 2, tag: primary}
      - {provider: local, upstream_model: llama, priority: 1}
    retry: {attempts: 2, backoff_ms: 100}
    fallbacks: [chat-backup]
    pricing: {input_per_mtok: 0.15, output_per_mtok: 0.60, cached_input_per_mtok: 0.075}
  - name: chat-backup
    routes: [{provider: local, upstream_model: llama}]
projects:
  - name: acme
    models: [chat-fast]
    limits: {rpm: 600, tpm: 1000000, concurrency: 50}
    monthly_budget_usd: 100
    keys:
      - name: ci
        key: ${ACME_CI_KEY}
        models: [chat-fast]
        ip_allowlist: [127.0.0.0/8, "::1"]
        expires_at: 2030-01-01T00:00:00Z
routing:
  breaker: {failures: 3, cooldown_s: 10, max_cooldown_s: 60}
"""
ENV = {"OPENAI_API_KEY": "sk-test-provider", "ACME_CI_KEY": "acme-ci-key-0123456789abcdef"}


def _problems(text: str, env: dict[str, str] | None = None) -> list[str]:
    """Problems from parsing, or else from the reference check against an empty store."""
    try:
        config = parse_config(text, "gw.yaml", ENV if env is None else env)
    except ConfigError as exc:
        return str(exc).splitlines()
    problems = list(check_references(config))
    assert problems, "expected the file to be refused"
    return str(ConfigError("gw.yaml", problems)).splitlines()


def test_a_complete_file_parses_with_env_expanded() -> None:
    config = parse_config(GOOD, "gw.yaml", ENV)
    assert config.providers[0].api_key == "sk-test-provider"
    assert config.providers[0].type is ProviderType.OPENAI
    assert config.providers[0].effective_base_url == "https://api.openai.com/v1"
    assert config.providers[1].base_url == "http://127.0.0.1:8000/v1"
    assert config.models[0].strategy is Strategy.PRIORITY
    assert config.models[0].routes[0].weight == 2
    key = config.projects[0].keys[0]
    assert key.key == ENV["ACME_CI_KEY"]
    assert key.ip_allowlist == ["127.0.0.0/8", "::1/128"]
    assert key.expires_at is not None and key.expires_at.year == 2030
    assert config.routing is not None and config.routing.breaker.failures == 3


def test_missing_env_var_is_named_with_its_path() -> None:
    problems = _problems(GOOD, {"OPENAI_API_KEY": "x"})
    assert problems == [
        "gw.yaml: projects[0].keys[0].key: environment variable ACME_CI_KEY is not set"
    ]


def test_expansion_does_not_inject_yaml_and_dollar_dollar_is_literal() -> None:
    tree = expand_env({"a": "${X}", "b": ["$${X}", "pre-${X}-post"]}, {"X": "v: [1]"})
    assert tree == {"a": "v: [1]", "b": ["${X}", "pre-v: [1]-post"]}


def test_unknown_provider_in_a_route() -> None:
    text = GOOD.replace(
        "{provider: local, upstream_model: llama, priority: 1}",
        "{provider: nope, upstream_model: x}",
    )
    assert "gw.yaml: models[0].routes[1].provider: unknown provider 'nope'" in _problems(text)


def test_duplicate_slug() -> None:
    text = GOOD.replace("slug: local", "slug: openai-main")
    assert "gw.yaml: providers[1].slug: duplicate provider slug 'openai-main'" in _problems(text)


def test_bad_cidr() -> None:
    text = GOOD.replace("127.0.0.0/8", "300.1.2.0/8")
    problems = _problems(text)
    assert any(
        p.startswith("gw.yaml: projects[0].keys[0].ip_allowlist:") and "'300.1.2.0/8'" in p
        for p in problems
    ), problems


def test_key_scopes_are_known_apis() -> None:
    scoped = GOOD.replace(
        "        models: [chat-fast]\n        ip_",
        "        models: [chat-fast]\n        scopes: [messages, chat, chat]\n        ip_",
    )
    assert parse_config(scoped, "gw.yaml", ENV).projects[0].keys[0].scopes == ["chat", "messages"]
    assert parse_config(GOOD, "gw.yaml", ENV).projects[0].keys[0].scopes is None
    problems = _problems(scoped.replace("scopes: [messages, chat, chat]", "scopes: [chat, admin]"))
    assert any(p.startswith("gw.yaml: projects[0].keys[0].scopes[1]:") for p in problems), problems
    problems = _problems(scoped.replace("scopes: [messages, chat, chat]", "scopes: []"))
    assert any(
        p.startswith("gw.yaml: projects[0].keys[0].scopes:") and "at least one API" in p
        for p in problems
    ), problems


def test_key_shorter_than_20_characters() -> None:
    problems = _problems(GOOD, {**ENV, "ACME_CI_KEY": "short-key"})
    assert len(problems) == 1
    assert problems[0].startswith("gw.yaml: projects[0].keys[0].key:")
    assert "at least 20 characters" in problems[0]


def test_unknown_field_unknown_model_and_bad_strategy_all_at_once() -> None:
    text = GOOD.replace("strategy: priority", "strategy: fastest").replace(
        "timeout_s: 120", "timeout_s: 120\n    colour: blue"
    )
    problems = _problems(text)
    assert "gw.yaml: providers[0].colour: unknown field" in problems
    assert any(p.startswith("gw.yaml: models[0].strategy:") for p in problems)


def test_references_to_unknown_models() -> None:
    text = GOOD.replace("fallbacks: [chat-backup]", "fallbacks: [missing]").replace(
        "    models: [chat-fast]\n    limits", "    models: [ghost]\n    limits"
    )
    problems = _problems(text)
    assert "gw.yaml: models[0].fallbacks[0]: unknown model 'missing'" in problems
    assert "gw.yaml: projects[0].models[0]: unknown model 'ghost'" in problems


def test_base_url_required_for_openai_compatible_and_must_be_http() -> None:
    text = GOOD.replace("    base_url: http://127.0.0.1:8000/v1/\n", "")
    assert any("base_url is required for type openai_compatible" in p for p in _problems(text))
    text = GOOD.replace("http://127.0.0.1:8000/v1/", "ftp://x")
    assert any(p.startswith("gw.yaml: providers[1].base_url:") for p in _problems(text))


def test_reserved_provider_headers_are_refused() -> None:
    text = GOOD.replace("timeout_s: 120", "timeout_s: 120\n    headers: {Host: evil}")
    assert any("providers[0].headers" in p and "'Host'" in p for p in _problems(text))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("api_key", '"sk-x\\r\\nX-Injected: 1"'),
        ("api_key", '"sk-x\\u0000"'),
        ("headers", '{"X-Team": "a\\nX-Injected: 1"}'),
        ("headers", '{"X-Team": "a\\u0000"}'),
        ("headers", '{"X-Team\\n": "a"}'),
        ("api_version", '"2024-10-21\\r\\nX: 1"'),
    ],
)
def test_provider_values_sent_in_headers_cannot_hold_line_breaks(field: str, value: str) -> None:
    """They go into the upstream request's headers: a line break would add a header."""
    text = GOOD.replace("    api_key: ${OPENAI_API_KEY}\n", f"    {field}: {value}\n")
    assert any(p.startswith(f"gw.yaml: providers[0].{field}") for p in _problems(text))


def test_same_key_twice_is_refused() -> None:
    text = GOOD.replace(
        "        expires_at: 2030-01-01T00:00:00Z\n",
        "        expires_at: 2030-01-01T00:00:00Z\n"
        "      - name: other\n        key: ${ACME_CI_KEY}\n",
    )
    assert (
        "gw.yaml: projects[0].keys[1].key: the same key is also given at projects[0].keys[0]"
        in _problems(text)
    )


def test_yaml_syntax_error_gives_the_line() -> None:
    problems = _problems("providers: [\n  - slug: a\n")
    assert problems[0].startswith("gw.yaml: line ")


def test_top_level_must_be_a_mapping_and_unreadable_file(tmp_path: Path) -> None:
    assert _problems("- a\n- b\n") == ["gw.yaml: the top level must be a mapping"]
    with pytest.raises(ConfigError, match="cannot read the file"):
        load_config(tmp_path / "absent.yaml", {})


def test_model_names_cannot_hold_a_colon() -> None:
    text = GOOD.replace("name: chat-backup", "name: chat:backup")
    assert any(p.startswith("gw.yaml: models[1].name:") for p in _problems(text))


# -- routing policies -------------------------------------------------------------------

POLICIES = (
    GOOD.replace(
        "    base_url: http://127.0.0.1:8000/v1/\n",
        "    base_url: http://127.0.0.1:8000/v1/\n    region: eu-west\n",
    )
    .replace(
        "    monthly_budget_usd: 100\n    keys:\n",
        "    monthly_budget_usd: 100\n    routing_policy: eu-only\n    keys:\n",
    )
    .replace(
        "        expires_at: 2030-01-01T00:00:00Z\n",
        "        expires_at: 2030-01-01T00:00:00Z\n        routing_policy: primary-only\n",
    )
    + """  policies:
    - name: eu-only
      providers: [local]
      regions: [eu-west]
      strategy: fixed
    - name: primary-only
      tags: [primary]
  policy: eu-only
"""
)


def test_routing_policies_and_their_bindings_parse() -> None:
    config = parse_config(POLICIES, "gw.yaml", ENV)
    assert config.providers[1].region == "eu-west" and config.providers[0].region is None
    assert config.routing is not None
    eu, primary = config.routing.policies
    assert (eu.name, eu.providers, eu.tags, eu.regions) == ("eu-only", ["local"], None, ["eu-west"])
    assert eu.strategy is Strategy.FIXED and primary.strategy is None
    assert primary.tags == ["primary"]
    assert config.routing.policy == "eu-only"
    assert config.projects[0].routing_policy == "eu-only"
    assert config.projects[0].keys[0].routing_policy == "primary-only"
    assert list(check_references(config)) == []


def test_a_policy_naming_an_unknown_provider() -> None:
    text = POLICIES.replace("providers: [local]", "providers: [local, azure-eu]")
    assert _problems(text) == [
        "gw.yaml: routing.policies[0].providers[1]: unknown provider 'azure-eu'"
    ]


def test_bindings_naming_an_unknown_policy() -> None:
    text = (
        POLICIES.replace("  policy: eu-only", "  policy: us-only")
        .replace("    routing_policy: eu-only", "    routing_policy: nowhere")
        .replace("routing_policy: primary-only", "routing_policy: ghost")
    )
    assert _problems(text) == [
        "gw.yaml: routing.policy: unknown routing policy 'us-only'",
        "gw.yaml: projects[0].routing_policy: unknown routing policy 'nowhere'",
        "gw.yaml: projects[0].keys[0].routing_policy: unknown routing policy 'ghost'",
    ]


def test_a_duplicate_policy_name() -> None:
    text = POLICIES.replace("- name: primary-only", "- name: eu-only")
    assert "gw.yaml: routing.policies[1].name: duplicate routing policy name 'eu-only'" in (
        _problems(text)
    )


def test_a_policy_strategy_and_fields_are_checked() -> None:
    text = POLICIES.replace("strategy: fixed", "strategy: cheapest").replace(
        "tags: [primary]", "tags: [primary]\n      models: [chat-fast]"
    )
    problems = _problems(text)
    assert any(p.startswith("gw.yaml: routing.policies[0].strategy:") for p in problems)
    assert "gw.yaml: routing.policies[1].models: unknown field" in problems


def test_the_breaker_cooldown_is_capped_at_30_seconds_unless_the_first_is_longer() -> None:
    assert BreakerConfig().max_cooldown_s == 30.0
    assert BreakerConfig(cooldown_s=45).max_cooldown_s == 45.0  # valid before: still valid
    assert BreakerConfig(cooldown_s=5, max_cooldown_s=120).max_cooldown_s == 120.0
    with pytest.raises(ValueError, match="max_cooldown_s must be at least cooldown_s"):
        BreakerConfig(cooldown_s=20, max_cooldown_s=10)
