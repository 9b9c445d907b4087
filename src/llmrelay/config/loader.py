"""Reading a config file: YAML, `${VAR}` expansion, schema and cross-reference checks.

Every problem is reported as `FILE: PATH: PROBLEM` (PATH like `models[0].routes[1].provider`),
all at once, so an operator fixes a file in one pass.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from llmrelay.config.schema import GatewayConfig

_VAR = re.compile(r"\$\{([^}]*)\}|\$\$")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class Problem:
    path: str
    message: str


class ConfigError(ValueError):
    """The file is not a valid configuration; `problems` lists each place and why."""

    def __init__(self, source: str, problems: Iterable[Problem]) -> None:
        self.source = source
        self.problems = tuple(problems)
        lines = [
            f"{source}: {p.path}: {p.message}" if p.path else f"{source}: {p.message}"
            for p in self.problems
        ]
        super().__init__("\n".join(lines))


def format_path(loc: Iterable[str | int]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def expand_env(node: Any, env: Mapping[str, str], path: tuple[str | int, ...] = ()) -> Any:
    """Replace `${NAME}` in every string of a parsed YAML tree; `$$` is a literal `$`.

    Expansion happens after parsing so a value can never inject YAML structure.
    """
    if isinstance(node, str):
        return _expand_string(node, env, path)
    if isinstance(node, list):
        return [expand_env(item, env, (*path, i)) for i, item in enumerate(node)]
    if isinstance(node, dict):
        return {k: expand_env(v, env, (*path, str(k))) for k, v in node.items()}
    return node


class _MissingVariable(ValueError):
    def __init__(self, path: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.path = path


def _expand_string(value: str, env: Mapping[str, str], path: tuple[str | int, ...]) -> str:
    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        if not _NAME.fullmatch(name):
            raise _MissingVariable(path, f"${{{name}}} is not a valid variable name")
        if name not in env:
            raise _MissingVariable(path, f"environment variable {name} is not set")
        return env[name]

    return _VAR.sub(replace, value)


def parse_config(text: str, source: str, env: Mapping[str, str]) -> GatewayConfig:
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError(source, [Problem("", f"{where}not valid YAML: {exc}")]) from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(source, [Problem("", "the top level must be a mapping")])
    try:
        expanded = expand_env(raw, env)
    except _MissingVariable as exc:
        raise ConfigError(source, [Problem(format_path(exc.path), str(exc))]) from None
    try:
        config = GatewayConfig.model_validate(expanded)
    except ValidationError as exc:
        raise ConfigError(source, _pydantic_problems(exc)) from None
    problems = list(check_uniqueness(config))
    if problems:
        raise ConfigError(source, problems)
    return config


def load_config(path: Path, env: Mapping[str, str]) -> GatewayConfig:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(
            str(path), [Problem("", f"cannot read the file: {exc.strerror}")]
        ) from None
    return parse_config(text, str(path), env)


def _pydantic_problems(exc: ValidationError) -> list[Problem]:
    problems = []
    for error in exc.errors():
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown field"
        elif message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        problems.append(Problem(format_path(error["loc"]), message))
    return problems


def _duplicates(names: Iterable[str]) -> dict[str, list[int]]:
    seen: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        seen.setdefault(name, []).append(i)
    return {name: idx for name, idx in seen.items() if len(idx) > 1}


def check_uniqueness(config: GatewayConfig) -> Iterable[Problem]:
    """Names that must be unique inside the file (and keys given twice)."""
    for name, idx in _duplicates(p.slug for p in config.providers).items():
        yield Problem(f"providers[{idx[1]}].slug", f"duplicate provider slug {name!r}")
    for name, idx in _duplicates(m.name for m in config.models).items():
        yield Problem(f"models[{idx[1]}].name", f"duplicate model name {name!r}")
    for name, idx in _duplicates(p.name for p in config.projects).items():
        yield Problem(f"projects[{idx[1]}].name", f"duplicate project name {name!r}")
    policies = config.routing.policies if config.routing is not None else []
    for name, idx in _duplicates(p.name for p in policies).items():
        yield Problem(f"routing.policies[{idx[1]}].name", f"duplicate routing policy name {name!r}")
    guardrails = config.guardrails.policies if config.guardrails is not None else []
    for name, idx in _duplicates(p.name for p in guardrails).items():
        yield Problem(
            f"guardrails.policies[{idx[1]}].name", f"duplicate guardrail policy name {name!r}"
        )
    key_values: dict[str, str] = {}
    for pi, project in enumerate(config.projects):
        for name, idx in _duplicates(k.name for k in project.keys).items():
            yield Problem(f"projects[{pi}].keys[{idx[1]}].name", f"duplicate key name {name!r}")
        for ki, key in enumerate(project.keys):
            where = f"projects[{pi}].keys[{ki}]"
            if key.key is None:
                continue
            if key.key in key_values:
                yield Problem(
                    f"{where}.key", f"the same key is also given at {key_values[key.key]}"
                )
            key_values[key.key] = where


def check_references(
    config: GatewayConfig,
    known_providers: frozenset[str] = frozenset(),
    known_models: frozenset[str] = frozenset(),
    known_policies: frozenset[str] = frozenset(),
    known_guardrails: frozenset[str] = frozenset(),
) -> Iterable[Problem]:
    """Every provider, model, routing policy and guardrail policy the file names exists in
    the file or is already stored."""
    providers = known_providers | {p.slug for p in config.providers}
    models = known_models | {m.name for m in config.models}
    policies = set(known_policies)
    if config.routing is not None:
        policies.update(p.name for p in config.routing.policies)
        for pi, policy in enumerate(config.routing.policies):
            for i, slug in enumerate(policy.providers or ()):
                if slug not in providers:
                    yield Problem(
                        f"routing.policies[{pi}].providers[{i}]", f"unknown provider {slug!r}"
                    )
        yield from _unknown_policy("routing.policy", config.routing.policy, policies)
    guardrails = set(known_guardrails)
    if config.guardrails is not None:
        guardrails.update(p.name for p in config.guardrails.policies)
        yield from _unknown_guardrails(
            "guardrails.global", config.guardrails.global_policies, guardrails
        )
    for mi, model in enumerate(config.models):
        for ri, route in enumerate(model.routes):
            if route.provider not in providers:
                yield Problem(
                    f"models[{mi}].routes[{ri}].provider", f"unknown provider {route.provider!r}"
                )
        for field in ("fallbacks", "context_fallbacks"):
            for fi, target in enumerate(getattr(model, field)):
                if target not in models:
                    yield Problem(f"models[{mi}].{field}[{fi}]", f"unknown model {target!r}")
    for pi, project in enumerate(config.projects):
        yield from _unknown_models(f"projects[{pi}].models", project.models, models)
        yield from _unknown_policy(
            f"projects[{pi}].routing_policy", project.routing_policy, policies
        )
        yield from _unknown_guardrails(f"projects[{pi}].guardrails", project.guardrails, guardrails)
        for ki, key in enumerate(project.keys):
            where = f"projects[{pi}].keys[{ki}]"
            yield from _unknown_models(f"{where}.models", key.models, models)
            yield from _unknown_policy(f"{where}.routing_policy", key.routing_policy, policies)
            yield from _unknown_guardrails(f"{where}.guardrails", key.guardrails, guardrails)


def _unknown_models(
    path: str, names: list[str] | None, models: set[str] | frozenset[str]
) -> Iterable[Problem]:
    for i, name in enumerate(names or ()):
        if name not in models:
            yield Problem(f"{path}[{i}]", f"unknown model {name!r}")


def _unknown_policy(path: str, name: str | None, policies: set[str]) -> Iterable[Problem]:
    if name is not None and name not in policies:
        yield Problem(path, f"unknown routing policy {name!r}")


def _unknown_guardrails(path: str, names: list[str], known: set[str]) -> Iterable[Problem]:
    for i, name in enumerate(names):
        if name not in known:
            yield Problem(f"{path}[{i}]", f"unknown guardrail policy {name!r}")
