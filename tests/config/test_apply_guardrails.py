"""The YAML's guardrails: policies and bindings applied idempotently, bindings left out
cleared, references and rules checked with the path named, the snapshot's guards."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay import apikeys
from llmrelay.config.loader import ConfigError
from llmrelay.snapshot.builder import build_snapshot
from llmrelay.store.db import session_factory
from tests.config.test_apply import SEALER, _apply, _dump

KEY_A = "guard-key-a-0123456789abcdef"
KEY_B = "guard-key-b-0123456789abcdef"
KEY_C = "guard-key-c-0123456789abcdef"

GUARDED = f"""
guardrails:
  policies:
    - name: secrets
      rules: [{{detector: secrets, action: block}}]
    - name: pii
      description: personal data
      rules:
        - {{detector: email, action: mask}}
        - {{detector: card, action: block, scope: both, placeholder: "<card>"}}
    - name: lenient
      rules: [{{detector: email, action: audit}}, {{detector: secrets, action: "off"}}]
    - name: tickets
      rules: [{{detector: regex, name: ticket, pattern: "T-[0-9]+", action: mask}}]
  global: [secrets]
projects:
  - name: acme
    guardrails: [pii]
    keys:
      - {{name: a, key: {KEY_A}}}
      - {{name: b, key: {KEY_B}, guardrails: [lenient, tickets]}}
  - name: other
    keys:
      - {{name: c, key: {KEY_C}}}
"""


async def _rules(engine: AsyncEngine, key: str) -> list[tuple[str, str, str]] | None:
    async with session_factory(engine)() as session:
        snapshot = await build_snapshot(session, SEALER)
    guard = snapshot.keys_by_digest[apikeys.digest(key)].guard
    if guard is None:
        return None
    return sorted((r.policy, r.name, r.action) for r in guard.rules)


async def test_policies_and_bindings_resolve_with_precedence(engine: AsyncEngine) -> None:
    result = await _apply(engine, GUARDED)
    assert "created guardrail policy pii" in result.changes
    assert "updated setting guardrails" in result.changes
    assert await _rules(engine, KEY_A) == [
        ("pii", "card", "block"),
        ("pii", "email", "mask"),
        ("secrets", "secrets", "block"),
    ]
    # the key's lenient policy: email audited instead of masked, secrets switched off
    assert await _rules(engine, KEY_B) == [
        ("lenient", "email", "audit"),
        ("pii", "card", "block"),
        ("tickets", "ticket", "mask"),
    ]
    assert await _rules(engine, KEY_C) == [("secrets", "secrets", "block")]


async def test_applying_twice_changes_nothing(engine: AsyncEngine) -> None:
    await _apply(engine, GUARDED)
    before = await _dump(engine)
    again = await _apply(engine, GUARDED)
    assert not again.changed, again.changes
    assert await _dump(engine) == before


async def test_bindings_left_out_are_cleared_and_changes_reported(engine: AsyncEngine) -> None:
    await _apply(engine, GUARDED)
    changed = (
        GUARDED.replace("    guardrails: [pii]\n", "")
        .replace(", guardrails: [lenient, tickets]", ", guardrails: [tickets]")
        .replace("  global: [secrets]\n", "")
        .replace("action: mask}}\n        - {{detector: card", "")
    )
    changed = GUARDED.replace("    guardrails: [pii]\n", "")
    changed = changed.replace(", guardrails: [lenient, tickets]", ", guardrails: [tickets]")
    changed = changed.replace("  global: [secrets]\n", "")
    changed = changed.replace('pattern: "T-[0-9]+"', 'pattern: "TK-[0-9]+"')
    result = await _apply(engine, changed)
    assert "updated project acme (guardrails)" in result.changes
    assert "updated key acme/b (guardrails)" in result.changes
    assert "updated guardrail policy tickets (rules)" in result.changes
    assert "updated setting guardrails" in result.changes
    assert await _rules(engine, KEY_A) is None  # nothing bound any more
    assert await _rules(engine, KEY_B) == [("tickets", "ticket", "mask")]


@pytest.mark.parametrize(
    ("yaml_text", "path", "message"),
    [
        ("projects: [{name: p, guardrails: [ghost]}]", "projects[0].guardrails[0]", "ghost"),
        (
            "projects: [{name: p, keys: [{name: k, guardrails: [ghost]}]}]",
            "projects[0].keys[0].guardrails[0]",
            "unknown guardrail policy",
        ),
        ("guardrails: {global: [ghost]}", "guardrails.global[0]", "ghost"),
        (
            "guardrails: {policies: [{name: p, rules: [{detector: nope, action: mask}]}]}",
            "guardrails.policies[0].rules[0].detector",
            "unknown detector",
        ),
        (
            "guardrails: {policies: [{name: p, rules: "
            "[{detector: regex, name: r, pattern: '(?<=a)b', action: mask}]}]}",
            "guardrails.policies[0].rules[0]",
            "pattern: not a valid pattern",
        ),
        (
            "guardrails: {policies: [{name: p, rules: "
            "[{detector: regex, pattern: x, action: mask}]}]}",
            "guardrails.policies[0].rules[0]",
            "needs a name",
        ),
        (
            "guardrails: {policies: [{name: p, rules: "
            "[{detector: email, action: mask}, {detector: email, action: audit}]}]}",
            "guardrails.policies[0]",
            "listed twice",
        ),
        (
            "guardrails: {policies: [{name: p, rules: [{detector: email, action: delete}]}]}",
            "guardrails.policies[0].rules[0].action",
            "",
        ),
        (
            "guardrails: {policies: [{name: p, rules: [{detector: email, action: mask}]},"
            " {name: p, rules: [{detector: card, action: mask}]}]}",
            "guardrails.policies[1].name",
            "duplicate",
        ),
    ],
)
async def test_problems_name_their_path(
    engine: AsyncEngine, yaml_text: str, path: str, message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        await _apply(engine, yaml_text, {})
    problems: list[Any] = list(raised.value.problems)
    assert any(p.path == path and message in p.message for p in problems), problems
