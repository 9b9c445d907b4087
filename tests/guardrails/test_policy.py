"""Compiling policies and the precedence of their bindings (global, project, key)."""

from __future__ import annotations

from typing import Any

from llmrelay.guardrails.policy import Guard, compile_policy, effective_rules, guard_for


def _policy(name: str, *rules: dict[str, Any]) -> Any:
    return compile_policy(f"id-{name}", name, rules)


def _in_force(levels: list[list[Any]]) -> list[tuple[str, str, str]]:
    return [(r.policy, r.name, r.action) for r in effective_rules(levels)]


def test_rules_of_different_names_add_up_across_levels() -> None:
    glob = _policy("pii", {"detector": "email", "action": "mask"})
    key = _policy("cards", {"detector": "card", "action": "block"})
    assert _in_force([[glob], [], [key]]) == [("pii", "email", "mask"), ("cards", "card", "block")]


def test_a_more_specific_level_replaces_rules_of_the_same_name() -> None:
    glob = _policy(
        "pii", {"detector": "email", "action": "mask"}, {"detector": "phone", "action": "mask"}
    )
    project = _policy("lenient", {"detector": "email", "action": "audit"})
    assert _in_force([[glob], [project], []]) == [
        ("lenient", "email", "audit"),
        ("pii", "phone", "mask"),
    ]


def test_off_switches_an_inherited_rule_off() -> None:
    glob = _policy(
        "pii", {"detector": "email", "action": "mask"}, {"detector": "phone", "action": "mask"}
    )
    key = _policy("no-email", {"detector": "email", "action": "off"})
    assert _in_force([[glob], [], [key]]) == [("pii", "phone", "mask")]


def test_the_key_wins_over_the_project_which_wins_over_global() -> None:
    levels = [
        [_policy("g", {"detector": "email", "action": "audit"})],
        [_policy("p", {"detector": "email", "action": "block"})],
        [_policy("k", {"detector": "email", "action": "mask"})],
    ]
    assert _in_force(levels) == [("k", "email", "mask")]
    assert _in_force(levels[:2]) == [("p", "email", "block")]


def test_rules_of_one_name_at_one_level_all_apply() -> None:
    a = _policy(
        "a", {"detector": "regex", "name": "ticket", "pattern": "T-\\d+", "action": "audit"}
    )
    b = _policy("b", {"detector": "regex", "name": "ticket", "pattern": "TK\\d+", "action": "mask"})
    assert _in_force([[a, b]]) == [("a", "ticket", "audit"), ("b", "ticket", "mask")]


def test_no_rule_in_force_is_no_guard() -> None:
    assert guard_for([[], [], []]) is None
    off = _policy("off", {"detector": "email", "action": "off"})
    assert guard_for([[off]]) is None


def test_a_guard_knows_whether_answers_are_screened() -> None:
    request_only = Guard(_policy("a", {"detector": "email", "action": "mask"}).rules)
    assert request_only.request_rules and not request_only.responses
    both = Guard(_policy("b", {"detector": "email", "action": "mask", "scope": "both"}).rules)
    assert both.request_rules and both.responses
    answers = Guard(
        _policy("c", {"detector": "email", "action": "mask", "scope": "response"}).rules
    )
    assert not answers.request_rules and answers.responses
