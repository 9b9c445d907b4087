"""requirements/dev.lock pins every package a development install brings (`make setup` installs
with it as constraints, and a constraint file pins only what it names): each dependency that
pyproject.toml asks for has its line, so nothing reaches CI at whatever version was released
last."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from tests.support.dependencies import RUNTIME_LOCK, runtime_lock_text

ROOT = Path(__file__).resolve().parent.parent


def _name(requirement: str) -> str:
    """PEP 503's normal form of a requirement's distribution name."""
    name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert name is not None, requirement
    return re.sub(r"[-_.]+", "-", name.group()).lower()


def test_every_dependency_of_the_dev_install_is_pinned() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        wanted += extra
    pinned = {
        _name(line): line.split("==", 1)[1]
        for line in (ROOT / "requirements" / "dev.lock").read_text().splitlines()
        if line and not line.startswith("#")
    }
    missing = sorted({_name(r) for r in wanted} - set(pinned))
    assert not missing, f"not in requirements/dev.lock (run `make lock`): {missing}"


def test_the_runtime_lock_is_what_the_runtime_dependencies_need_at_dev_lock_versions() -> None:
    assert RUNTIME_LOCK.read_text() == runtime_lock_text(), (
        "requirements/runtime.lock is out of date: `make runtime-lock`"
    )
