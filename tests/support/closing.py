"""The type of the `closing` fixture (tests/conftest.py): hand it a client, get it back, and
it is closed at the end of the test that made it."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

Resource = TypeVar("Resource", bound=AbstractContextManager[Any])


class Closing(Protocol):
    def __call__(self, resource: Resource, /) -> Resource: ...
