"""Whether the mypyc-compiled modules run, or their sources do.

A build that compiled the hot path leaves `compiled.json` beside this file with a digest of
the sources it compiled (setup.py). Python prefers an extension module to the source beside
it, so after an edit to one of those sources the old C code would still run; and compiled
modules call each other directly, so one stale module cannot be swapped alone. Hence all or
nothing: when any source differs from the build's (or LLMRELAY_PURE_PYTHON=1), a finder
placed first on sys.meta_path loads every compiled module from its source, and a stale build
says so on stderr. The same finder keeps any other module of the package from loading an
extension an earlier build left. Runs when the package is first imported, before the rest.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

from llmrelay.compiled_modules import COMPILED, source_digest, source_path

_SRC = Path(__file__).resolve().parent.parent
MANIFEST = _SRC / "llmrelay" / "compiled.json"

#: How this process runs the hot path: "compiled", "pure" (a build without C extensions),
#: "sources" (LLMRELAY_PURE_PYTHON=1) or "stale" (sources changed since the build). All but
#: "compiled" run the sources.
MODE = "pure"


class _Sources(importlib.abc.MetaPathFinder):
    """Loads llmrelay's modules from their sources, but for the compiled ones when the build
    is current: an extension module an earlier build left (of a module since taken off the
    list, or under a stale build) is never imported."""

    def __init__(self, compiled: frozenset[str]) -> None:
        self._compiled = compiled

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if not fullname.startswith("llmrelay.") or fullname in self._compiled:
            return None
        source = source_path(_SRC, fullname)
        if not source.is_file():
            return None  # a package (its __init__.py is found as usual)
        return importlib.util.spec_from_file_location(fullname, source)


def choose() -> str:
    """Decide once per process (see the module docstring); the mode chosen."""
    global MODE
    if any(isinstance(finder, _Sources) for finder in sys.meta_path):
        return MODE
    if not MANIFEST.exists():
        MODE = "pure"  # (extension modules an earlier build left would be stale)
    elif os.environ.get("LLMRELAY_PURE_PYTHON") == "1":
        MODE = "sources"
    else:
        try:
            built = json.loads(MANIFEST.read_text())["digest"]
        except (OSError, ValueError, KeyError):
            built = None
        MODE = "compiled" if built == source_digest(_SRC) else "stale"
        if MODE == "stale":
            sys.stderr.write(
                "llmrelay: the compiled modules are older than their sources; running the"
                " sources (slower). Rebuild: `make setup`, or pip install --no-build-isolation"
                " -e .\n"
            )
    sys.meta_path.insert(0, _Sources(frozenset(COMPILED) if MODE == "compiled" else frozenset()))
    return MODE
