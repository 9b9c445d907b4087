"""Module-wide things built per parameter at their first need and kept to the module's end.

A module-scoped fixture parametrized by backend has one instance at a time: pytest tears it
down and builds it again at every change of parameter. The default order groups a module's
tests by such parameters; a random order (`-p random_order`) does not, and changes the
parameter at nearly every test, rebuilding gateways and databases dozens of times
(docs/testing.md, "Order and independence"). So such a module has a module-scoped `KeptPerParam`
and a function-scoped fixture, parametrized as before, that asks it for its parameter's thing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from typing import Generic, TypeVar

T = TypeVar("T")


class KeptPerParam(Generic[T]):
    """`get(param)`: the thing `build(param)` enters, built once; all left at `close()`, in
    the reverse order of their building."""

    def __init__(self, build: Callable[[str], AbstractContextManager[T]]) -> None:
        self._build = build
        self._stack = ExitStack()
        self._kept: dict[str, T] = {}

    def get(self, param: str) -> T:
        if param not in self._kept:
            self._kept[param] = self._stack.enter_context(self._build(param))
        return self._kept[param]

    def close(self) -> None:
        self._kept.clear()
        self._stack.close()


def kept_per_param(build: Callable[[str], AbstractContextManager[T]]) -> Iterator[KeptPerParam[T]]:
    """A module fixture's body: `yield from kept_per_param(build)`."""
    kept = KeptPerParam(build)
    try:
        yield kept
    finally:
        kept.close()
