"""Policies compiled for the snapshot, and the precedence of their bindings.

A policy is a named list of rules; a rule runs one detector (or a family) with one action:
`audit` (note the hit, change nothing), `mask` (replace each match with a placeholder),
`block` (refuse the request, or withhold the answer), or `off` (only meaningful to switch off
a rule inherited from a less specific binding, see `effective_rules`). Its scope says where
it looks: the request's text, the answer's text (non-streamed answers only), or both.

Policies are bound at three levels: gateway-wide (global), to a project, to a key. The rules
in force for a key:

1. start from the rules of every policy bound globally;
2. a rule name that any policy bound to the key's project uses replaces every inherited rule
   of that name with the project's rules of that name (so `email: audit` at the project
   turns a global `email: mask` into an audit, and `email: off` switches it off);
3. the same again for the policies bound to the key itself.

Rules of different names add up; rules of one name bound at the same level all apply (each
with its own action). A rule's name is its detector's name unless it says otherwise (a custom
`regex` or `words` rule always has one).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from llmrelay.guardrails.detectors import default_placeholder, finder
from llmrelay.guardrails.spans import Finder

AUDIT: Final = "audit"
MASK: Final = "mask"
BLOCK: Final = "block"
OFF: Final = "off"
ACTIONS: Final = (AUDIT, MASK, BLOCK, OFF)

REQUEST: Final = "request"
RESPONSE: Final = "response"
BOTH: Final = "both"
SCOPES: Final = (REQUEST, RESPONSE, BOTH)


@dataclass(frozen=True, slots=True)
class Rule:
    """One compiled rule of one policy."""

    policy_id: str
    policy: str
    name: str
    detector: str
    action: str
    request: bool
    response: bool
    placeholder: str | None
    find: Finder = field(compare=False, repr=False)

    def placeholder_for(self, kind: str) -> str:
        return self.placeholder if self.placeholder is not None else default_placeholder(kind)


@dataclass(frozen=True, slots=True)
class CompiledPolicy:
    id: str
    name: str
    rules: tuple[Rule, ...]


def rule_name(stored: Mapping[str, Any]) -> str:
    return str(stored.get("name") or stored["detector"])


def compile_policy(policy_id: str, name: str, rules: Iterable[Mapping[str, Any]]) -> CompiledPolicy:
    """A stored policy (its rules as the config schema validated them) with each detector
    compiled once. Raises custom.PatternError for a pattern that no longer compiles."""
    compiled = []
    for stored in rules:
        detector = str(stored["detector"])
        name_of_rule = rule_name(stored)
        scope = stored.get("scope") or REQUEST
        compiled.append(
            Rule(
                policy_id=policy_id,
                policy=name,
                name=name_of_rule,
                detector=detector,
                action=str(stored["action"]),
                request=scope in (REQUEST, BOTH),
                response=scope in (RESPONSE, BOTH),
                placeholder=stored.get("placeholder"),
                find=finder(
                    detector,
                    name_of_rule,
                    pattern=stored.get("pattern"),
                    words=stored.get("words"),
                    case_sensitive=bool(stored.get("case_sensitive", False)),
                ),
            )
        )
    return CompiledPolicy(policy_id, name, tuple(compiled))


def effective_rules(levels: Sequence[Sequence[CompiledPolicy]]) -> tuple[Rule, ...]:
    """The rules in force, from the levels least specific first (global, project, key):
    see the module's docstring. Rules with action `off` are dropped once they have done
    their work."""
    in_force: dict[str, list[Rule]] = {}
    for level in levels:
        named: dict[str, list[Rule]] = {}
        for policy in level:
            for rule in policy.rules:
                named.setdefault(rule.name, []).append(rule)
        for name, rules in named.items():
            in_force[name] = [r for r in rules if r.action != OFF]
    return tuple(rule for rules in in_force.values() for rule in rules)


class Guard:
    """The rules in force for one set of bindings (keys with the same bindings share one).
    `KeySnap.guard` is None when no rule applies, so such a key costs one attribute check."""

    __slots__ = ("request_rules", "response_rules", "responses", "rules")

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        self.rules = rules
        self.request_rules = tuple(r for r in rules if r.request)
        self.response_rules = tuple(r for r in rules if r.response)
        #: Whether non-streamed answers are screened at all (one check per answer).
        self.responses = bool(self.response_rules)


def guard_for(levels: Sequence[Sequence[CompiledPolicy]]) -> Guard | None:
    rules = effective_rules(levels)
    return Guard(rules) if rules else None
