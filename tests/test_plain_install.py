"""A plain install of llmrelay (its main dependencies only, no dev extra) imports every module
of the package, and every other distribution's module that the package imports anywhere,
inside functions too: an import in a function fails only when that code runs, which is how
`redis` (the config-change signal, imported where it is used) went missing from the image
while the tests, with the dev extra installed, never saw it.

The plain install is a scratch virtualenv holding exactly the distributions that the main
dependencies need (tests/support/dependencies.py), linked file by file from the development
virtualenv: the versions of requirements/dev.lock, offline, in seconds. llmrelay itself is the
source tree on its path (a build from source here would remove the in-place compiled build).
Imports guarded against ImportError and those of the optional extras other than `dev`
(`otel`: tracing says what to install when it is asked for and missing) are left out.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

from tests.support.dependencies import (
    ROOT,
    closure,
    extra_requirements,
    main_requirements,
    project,
)

SOURCES = ROOT / "src" / "llmrelay"
#: Present in a development install, absent from a plain one: the check that the scratch
#: environment is plain.
DEV_ONLY = ("pytest", "openai", "anthropic", "hypothesis", "mypy")

#: Run by the scratch environment's Python: import every module of llmrelay (but __main__,
#: which runs the command line), then run each import statement found in the sources.
CHILD = r"""
import importlib, importlib.util, json, pkgutil, sys
statements = json.load(sys.stdin)
failures = {}
def failed(name, exc):
    failures[name] = f"{type(exc).__name__}: {exc}"
import llmrelay
modules = 0
for info in pkgutil.walk_packages(
    llmrelay.__path__, "llmrelay.", onerror=lambda name: failed(name, sys.exc_info()[1])
):
    if info.name == "llmrelay.__main__":
        continue
    modules += 1
    try:
        importlib.import_module(info.name)
    except Exception as exc:
        failed(info.name, exc)
for statement in statements:
    try:
        exec(statement, {})
    except Exception as exc:
        failed(statement, exc)
dev_present = [name for name in json.loads(sys.argv[1]) if importlib.util.find_spec(name)]
json.dump(
    {"failures": failures, "modules": modules, "dev_present": dev_present,
     "llmrelay": llmrelay.__file__},
    sys.stdout,
)
"""


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _handles_import_error(node: ast.Try) -> bool:
    for handler in node.handlers:
        caught = handler.type
        names = caught.elts if isinstance(caught, ast.Tuple) else [caught]
        if any(
            isinstance(name, ast.Name) and name.id in ("ImportError", "ModuleNotFoundError")
            for name in names
        ):
            return True
    return False


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that runs at some point: not those under `if TYPE_CHECKING:`
    (never run) nor those in a `try` that handles ImportError (missing is allowed there)."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
        return
    if isinstance(node, ast.If) and _type_checking(node.test):
        children: list[ast.AST] = list(node.orelse)
    elif isinstance(node, ast.Try) and _handles_import_error(node):
        children = [*node.handlers, *node.orelse, *node.finalbody]
    else:
        children = list(ast.iter_child_nodes(node))
    for child in children:
        yield from _imports(child)


def _modules(node: ast.Import | ast.ImportFrom) -> set[str]:
    """The modules an absolute import statement names (none for a relative one)."""
    if isinstance(node, ast.ImportFrom):
        return set() if node.level else {node.module or ""}
    return {alias.name for alias in node.names}


def _optional_modules() -> set[str]:
    """Dotted names of the modules and packages that only the optional extras other than
    `dev` install (by module, not by top-level name: `opentelemetry` is a namespace that the
    main dependencies share, fastapi bringing its API)."""
    extras = [name for name in project()["optional-dependencies"] if name != "dev"]
    plain = closure(main_requirements())
    everything = closure([*main_requirements(), *extra_requirements(*extras)])
    modules: set[str] = set()
    for name, distribution in everything.items():
        if name in plain:
            continue
        for file in distribution.files or ():
            if file.suffix == ".py" and file.parts[0] != "..":
                parts = list(file.with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                modules.add(".".join(parts))
    return modules


def import_statements() -> dict[str, list[str]]:
    """Statement (as source) -> the modules of llmrelay that hold it, for every import of
    another distribution's module."""
    own = {"llmrelay", "__future__", *sys.stdlib_module_names}
    optional = _optional_modules()
    found: dict[str, list[str]] = {}
    for path in sorted(SOURCES.rglob("*.py")):
        if "migrations" in path.relative_to(SOURCES).parts:
            continue  # run by Alembic, which brings its own imports
        for node in _imports(ast.parse(path.read_text(), str(path))):
            modules = _modules(node)
            if modules and not {m.split(".")[0] for m in modules} & own and modules - optional:
                where = str(path.relative_to(ROOT / "src"))
                found.setdefault(ast.unparse(node), []).append(where)
    return found


def _plain_environment(folder: Path) -> Path:
    """A virtualenv of the main dependencies' distributions and llmrelay's sources; its
    Python."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(folder)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = folder / "lib" / version / "site-packages"
    for distribution in closure(main_requirements()).values():
        base = Path(str(distribution.locate_file("")))
        for file in distribution.files or ():
            if file.parts[0] == ".." or not (base / file).exists():
                continue  # scripts (bin/), or a file the install left out
            target = site / file
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                target.symlink_to(base / file)
    (site / "llmrelay-sources.pth").write_text(f"{ROOT / 'src'}\n")
    return folder / "bin" / "python"


def test_the_statement_finder_sees_imports_in_functions_and_skips_type_checking() -> None:
    source = """
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from never import Seen
def f():
    from redis.asyncio import Redis
try:
    import optional_thing
except ImportError:
    optional_thing = None
"""
    statements = [ast.unparse(node) for node in _imports(ast.parse(source))]
    assert statements == ["from typing import TYPE_CHECKING", "from redis.asyncio import Redis"]
    # ... and on llmrelay itself it finds the config signal's lazy import of redis.
    assert "snapshot/signals.py" in str(import_statements()["from redis.asyncio import Redis"])


def test_a_plain_install_imports_every_module_of_llmrelay(tmp_path: Path) -> None:
    python = _plain_environment(tmp_path / "plain")
    statements = import_statements()
    done = subprocess.run(
        [str(python), "-I", "-c", CHILD, json.dumps(DEV_ONLY)],
        input=json.dumps(sorted(statements)),
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["llmrelay"].startswith(str(SOURCES))
    assert report["dev_present"] == [], "the scratch environment is not a plain install"
    assert report["modules"] > 100
    failures = [
        f"{name} (in {', '.join(statements.get(name, [name]))}): {error}"
        for name, error in sorted(report["failures"].items())
    ]
    assert not failures, (
        "a plain install (main dependencies only) cannot import what llmrelay imports; add the "
        "distribution to [project] dependencies in pyproject.toml:\n  " + "\n  ".join(failures)
    )
