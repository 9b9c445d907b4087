"""The mypyc build: what the compiled modules' source must avoid, and how a process decides
between the compiled modules and their sources.

mypyc compiles typed Python, but some things it does not do as CPython does (each found by
the suite failing under the compiled build): an async generator does not compile; one name
bound by `except` clauses of different types in one function is given the first clause's
type, so the second clause raises TypeError; a class that extends a class mypyc does not
compile loses the class attributes its body sets (`status = 429` read as the base's); a
`Final` tuple of fixed length whose first item is a float always reads as unset. These
tests read the sources, so they hold whether or not this run is compiled.
"""

from __future__ import annotations

import ast
import importlib.machinery
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llmrelay import _compiled
from llmrelay.compiled_modules import COMPILED, source_digest, source_path

SRC = Path(__file__).resolve().parent.parent / "src"


def _trees() -> list[tuple[str, ast.Module]]:
    return [(module, ast.parse(source_path(SRC, module).read_text())) for module in COMPILED]


def _functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def test_every_compiled_module_exists_once() -> None:
    assert len(set(COMPILED)) == len(COMPILED)
    assert all(source_path(SRC, module).is_file() for module in COMPILED)


def _own_nodes(fn: ast.AST) -> list[ast.AST]:
    """The nodes of a function's body, without those of functions nested in it."""
    nodes, todo = [], list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        nodes.append(node)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))
    return nodes


def test_no_async_generator_in_a_compiled_module() -> None:
    found = [
        f"{module}.{fn.name}"
        for module, tree in _trees()
        for fn in _functions(tree)
        if isinstance(fn, ast.AsyncFunctionDef)
        and any(isinstance(node, ast.Yield | ast.YieldFrom) for node in _own_nodes(fn))
    ]
    assert found == []


def test_an_except_name_has_one_type_per_function() -> None:
    found = []
    for module, tree in _trees():
        for fn in _functions(tree):
            types: dict[str, set[str]] = {}
            for node in ast.walk(fn):
                if isinstance(node, ast.ExceptHandler) and node.name:
                    kind = ast.unparse(node.type) if node.type else "BaseException"
                    types.setdefault(node.name, set()).add(kind)
            found += [
                f"{module}.{fn.name}: {n} {sorted(t)}" for n, t in types.items() if len(t) > 1
            ]
    assert found == []


def test_no_class_attribute_on_a_class_extending_an_uncompiled_one() -> None:
    compiled = set(COMPILED)
    found = []
    for module, tree in _trees():
        imported = {
            alias.asname or alias.name: node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
            for alias in node.names
        }
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            origins = [imported.get(ast.unparse(base).split(".")[0]) for base in cls.bases]
            outside = [
                origin
                for origin in origins
                if origin is not None and origin.startswith("llmrelay.") and origin not in compiled
            ]
            assigns = [n for n in cls.body if isinstance(n, ast.Assign | ast.AnnAssign) and n.value]
            if outside and assigns:
                found.append(f"{module}.{cls.name} extends {outside}")
    assert found == []


def test_no_interpreted_class_extends_a_compiled_one() -> None:
    """mypyc refuses it at import ("interpreted classes cannot inherit from compiled"), and
    only in the compiled build: the limiter on PostgreSQL did so and passed every test run
    from the sources. A module with such a class is compiled too."""
    compiled = set(COMPILED)
    found = []
    for path in sorted((SRC / "llmrelay").rglob("*.py")):
        module = ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        if module in compiled:
            continue
        tree = ast.parse(path.read_text())
        imported = {
            alias.asname or alias.name: node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
            for alias in node.names
        }
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            origins = [imported.get(ast.unparse(base).split(".")[0]) for base in cls.bases]
            if any(origin in compiled for origin in origins):
                found.append(f"{module}.{cls.name}")
    assert found == []


#: Module constants the tests replace (monkeypatch): compiled code reads a `Final` from a C
#: static the module's attribute no longer reaches.
_PATCHED = {"CHECKPOINT_ROWS", "LOCKED_WAIT_S", "MAX_QUEUED_PAYLOAD_BYTES"}


def _constants(tree: ast.Module) -> list[ast.Assign | ast.AnnAssign]:
    """Module-level assignments of one UPPER_CASE name (type variables aside)."""
    found: list[ast.Assign | ast.AnnAssign] = []
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if (
            isinstance(node, ast.Assign | ast.AnnAssign)
            and isinstance(target, ast.Name)
            and target.id.lstrip("_").isupper()
            and not (isinstance(value, ast.Call) and ast.unparse(value.func) == "TypeVar")
        ):
            found.append(node)
    return found


def test_module_constants_are_final() -> None:
    """A compiled function reads a module constant that is not `Final` from the module's
    dict, and computes with it as a Python object: `Final` makes it a C value (inlined when
    it is a literal). The first such pass took 10 % of the instructions of a request."""
    found = [
        f"{module}: {ast.unparse(node.targets[0])}"
        for module, tree in _trees()
        for node in _constants(tree)
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) not in _PATCHED
    ]
    assert found == []


def test_no_final_tuple_starts_with_a_float() -> None:
    """mypyc keeps a fixed-length tuple of floats unboxed and checks such a static inverted
    (`!= -113.0 && PyErr_Occurred()`): every read raises NameError, "value for final name
    ... was not set". `Final[tuple[float, ...]]` keeps it a Python tuple."""
    found = [
        f"{module}: {ast.unparse(node.target)}"
        for module, tree in _trees()
        for node in _constants(tree)
        if isinstance(node, ast.AnnAssign)
        and "Final" in ast.unparse(node.annotation)
        and "..." not in ast.unparse(node.annotation)
        and isinstance(node.value, ast.Tuple)
        and node.value.elts
        and isinstance(node.value.elts[0], ast.Constant)
        and isinstance(node.value.elts[0].value, float)
    ]
    assert found == []


def test_the_digest_follows_every_compiled_source(tmp_path: Path) -> None:
    copy = tmp_path / "src"
    shutil.copytree(SRC / "llmrelay", copy / "llmrelay")
    before = source_digest(copy)
    assert before == source_digest(SRC)
    path = source_path(copy, COMPILED[-1])
    path.write_text(path.read_text() + "\n# edited\n")
    assert source_digest(copy) != before


def _mode_in(src: Path, env: dict[str, str], module: str = "llmrelay.gateway.relay") -> str:
    """The mode a fresh interpreter chooses for the package at `src`, and where it found
    `module`."""
    code = f"import llmrelay._compiled as c, {module} as m; print(c.MODE, m.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "PYTHONPATH": str(src)},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_a_changed_source_runs_every_compiled_module_from_its_source(tmp_path: Path) -> None:
    copy = tmp_path / "src"
    shutil.copytree(SRC / "llmrelay", copy / "llmrelay", ignore=shutil.ignore_patterns("*.so"))
    # A build's manifest and an extension module that would shadow the source if loaded:
    # a file that is not a real extension fails to import, so finding it would fail the run.
    (copy / "llmrelay" / "compiled.json").write_text(f'{{"digest": "{source_digest(copy)}"}}')
    env = {k: v for k, v in os.environ.items() if k != "LLMRELAY_PURE_PYTHON"}
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    # An extension an earlier build left for a module it no longer compiles is not loaded.
    (copy / "llmrelay" / "gateway" / f"errors{suffix}").write_bytes(b"")
    mode, where = _mode_in(copy, env, "llmrelay.gateway.errors").split()
    assert mode == "compiled" and where.endswith("errors.py")  # the digest matches
    relay = copy / "llmrelay" / "gateway" / "relay.py"
    relay.write_text(relay.read_text() + "\n# edited\n")
    (copy / "llmrelay" / "gateway" / f"relay{suffix}").write_bytes(b"")
    mode, where = _mode_in(copy, env).split()
    assert mode == "stale" and where.endswith("relay.py")
    mode, where = _mode_in(copy, {**env, "LLMRELAY_PURE_PYTHON": "1"}).split()
    assert mode == "sources" and where.endswith("relay.py")


def test_this_run_is_compiled_when_ci_asks() -> None:
    """`.ci/run` sets LLMRELAY_TEST_REQUIRE_COMPILED=1: the suite must then run the build
    users get, not the sources."""
    if os.environ.get("LLMRELAY_TEST_REQUIRE_COMPILED") != "1":
        pytest.skip("LLMRELAY_TEST_REQUIRE_COMPILED is not set (this run may be the sources)")
    assert _compiled.MODE == "compiled"
