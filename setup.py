"""The build: llmrelay's data-plane hot path compiled to C by mypyc, the rest plain Python.

The compiled modules are the same typed Python source (mypyc builds C extensions from code
that mypy checks): about a tenth less CPU per request (docs/performance.md, "Compiled hot
path"). mypyc type-checks what it compiles, so it needs llmrelay's dependencies and mypy
installed where it builds: `make setup` installs them first, then builds with
`pip install --no-build-isolation -e .`. Where they are missing (a plain `pip install .`
builds in an isolated environment), or with LLMRELAY_PURE_PYTHON=1, the build is plain
Python, and says so.

A compiled build records a digest of the sources it compiled (src/llmrelay/compiled.json);
llmrelay/_compiled.py runs the sources instead whenever they no longer match it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import runpy
import sys
from pathlib import Path
from typing import Any

from setuptools import setup

SRC = Path(__file__).resolve().parent / "src"
MANIFEST = SRC / "llmrelay" / "compiled.json"
#: The modules whose types the compiled code is checked against (besides the stdlib).
NEEDED = ("mypy", "mypyc", "aiohttp", "orjson", "starlette", "structlog", "sqlalchemy")


def extensions() -> list[Any]:
    if {"egg_info", "dist_info"} & set(sys.argv):
        return []  # the package's metadata: no need to compile for it
    MANIFEST.unlink(missing_ok=True)
    for leftover in [*SRC.glob("llmrelay__mypyc*"), *SRC.glob("llmrelay/**/*.so")]:
        leftover.unlink()  # an earlier build's (in place: an editable install)
    if os.environ.get("LLMRELAY_PURE_PYTHON") == "1":
        print("llmrelay: LLMRELAY_PURE_PYTHON=1: building plain Python")
        return []
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        print(
            "llmrelay: building plain Python (the compiled build needs "
            f"{', '.join(missing)} installed first: see README, 'Compiled build')"
        )
        return []
    from mypyc.build import mypycify

    listing = runpy.run_path(str(SRC / "llmrelay" / "compiled_modules.py"))
    modules: tuple[str, ...] = listing["COMPILED"]
    paths = [str(listing["source_path"](SRC, module)) for module in modules]
    built = mypycify(paths, opt_level="3", debug_level="0", multi_file=True, group_name="llmrelay")
    MANIFEST.write_text(json.dumps({"digest": listing["source_digest"](SRC)}) + "\n")
    return built


setup(ext_modules=extensions(), options={"build_ext": {"parallel": os.cpu_count() or 1}})
