"""What a plain (non-development) install of llmrelay consists of, read from the development
virtualenv's own metadata: the distributions that the main dependencies of pyproject.toml
need, transitively (markers and extras evaluated as pip would on this machine).

Two users: tests/test_plain_install.py builds a scratch environment of exactly these
distributions (offline, in seconds, at the versions of requirements/dev.lock that `make setup`
installed) and imports all of llmrelay in it; `make runtime-lock` writes requirements/runtime.lock
(the image's pins: the main dependencies and the `otel` extra) from it, and tests/test_lock.py
checks that the file is what this module makes of dev.lock today.

    python -m tests.support.dependencies   # prints requirements/runtime.lock
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any, cast

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
DEV_LOCK = ROOT / "requirements" / "dev.lock"
RUNTIME_LOCK = ROOT / "requirements" / "runtime.lock"
#: The extras that the image installs besides the main dependencies (Dockerfile).
IMAGE_EXTRAS = ("otel",)

RUNTIME_HEADER = """\
# The runtime dependencies of the image (deploy/Dockerfile: the main dependencies of
# pyproject.toml and the `otel` extra), each pinned as in requirements/dev.lock, nothing else;
# last, with their markers, what only other Pythons need (the image's may be one).
# Generated, do not edit: `make runtime-lock` (also part of `make lock`); tests/test_lock.py
# fails when it no longer matches pyproject.toml and dev.lock.
"""


class DependencyError(RuntimeError):
    """The development environment cannot answer: a distribution is missing or differs from
    requirements/dev.lock (the message says which, and that `make setup` fixes it)."""


def project() -> dict[str, Any]:
    return cast(dict[str, Any], tomllib.loads((ROOT / "pyproject.toml").read_text())["project"])


def main_requirements() -> list[str]:
    """The `dependencies` of pyproject.toml."""
    return [str(text) for text in project()["dependencies"]]


def extra_requirements(*extras: str) -> list[str]:
    """The requirements of these optional extras of pyproject.toml."""
    table = project()["optional-dependencies"]
    return [str(text) for extra in extras for text in table[extra]]


#: The oldest Python the project supports (requires-python): a requirement that its marker
#: keeps off this machine's Python but not off that one is needed elsewhere (the image's
#: Python is Debian's 3.11.2 on machines without a registry).
OLDEST_PYTHON = {"python_version": "3.11", "python_full_version": "3.11.0"}
#: Pins of what is needed elsewhere only, hence neither installed here nor in dev.lock: redis
#: needs async-timeout before Python 3.11.3.
ELSEWHERE_PINS = {"async-timeout": "5.0.1"}


def closure(
    requirements: Iterable[str], elsewhere: dict[str, str] | None = None
) -> dict[str, metadata.Distribution]:
    """Canonical name -> installed distribution, for each requirement and what it requires in
    turn (a requirement's extras bring their own requirements; markers are evaluated here).
    `elsewhere`, when given, gets name -> marker for what only another Python needs."""
    found: dict[str, metadata.Distribution] = {}
    seen: set[tuple[str, str]] = set()
    queue = [Requirement(text) for text in requirements]
    while queue:
        requirement = queue.pop()
        name = canonicalize_name(requirement.name)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        for extra in ("", *sorted(requirement.extras)):
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            if name not in found:
                try:
                    found[name] = metadata.distribution(name)
                except metadata.PackageNotFoundError as exc:
                    raise DependencyError(
                        f"{requirement.name} is not installed in {sys.prefix}: `make setup`"
                    ) from exc
            for text in found[name].requires or ():
                needed = Requirement(text)
                if needed.marker is None or needed.marker.evaluate({"extra": extra}):
                    needed.marker = None  # evaluated: it applies
                    queue.append(needed)
                elif elsewhere is not None and needed.marker.evaluate(
                    {"extra": extra, **OLDEST_PYTHON}
                ):
                    elsewhere[canonicalize_name(needed.name)] = str(needed.marker)
    return found


def _pins(lock: Path) -> dict[str, str]:
    """Canonical name -> the lock's line for it."""
    pins: dict[str, str] = {}
    for line in lock.read_text().splitlines():
        if line and not line.startswith("#"):
            pins[canonicalize_name(line.split("==", 1)[0])] = line
    return pins


def pinned(requirements: Iterable[str], lock: Path = DEV_LOCK) -> list[str]:
    """The lock's lines for the closure of `requirements`, in the lock's order; refuses when
    an installed version is not the pinned one (the closure would be of other versions).
    Then, with their markers, what only another Python needs (pip installs a line whose
    marker holds, and skips the others)."""
    pins = _pins(lock)
    elsewhere: dict[str, str] = {}
    lines: list[str] = []
    found = closure(requirements, elsewhere)
    for name, distribution in found.items():
        line = pins.get(name)
        if line is None:
            raise DependencyError(f"{name} is not pinned in {lock.name}: `make lock`")
        if line.split("==", 1)[1] != distribution.version:
            raise DependencyError(
                f"{name} {distribution.version} is installed, {lock.name} pins {line}: `make setup`"
            )
        lines.append(line)
    order = {name: place for place, name in enumerate(pins)}
    lines.sort(key=lambda line: order[canonicalize_name(line.split("==", 1)[0])])
    for name, marker in sorted(elsewhere.items()):
        if name in found:
            continue  # needed here too: pinned above
        if name in ELSEWHERE_PINS:
            lines.append(f"{name}=={ELSEWHERE_PINS[name]} ; {marker}")
        elif name in pins:
            lines.append(f"{pins[name]} ; {marker}")
        else:
            raise DependencyError(
                f"{name} is needed where {marker}: pin it in ELSEWHERE_PINS ({__name__})"
            )
    return lines


def runtime_lock_text() -> str:
    """What requirements/runtime.lock holds."""
    wanted = [*main_requirements(), *extra_requirements(*IMAGE_EXTRAS)]
    return RUNTIME_HEADER + "".join(line + "\n" for line in pinned(wanted))


if __name__ == "__main__":
    sys.stdout.write(runtime_lock_text())
