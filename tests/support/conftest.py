"""The mock upstream that the tests of its protocols drive: one server per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.mock_upstream import MockUpstream


@pytest.fixture(scope="module")
def upstream() -> Iterator[MockUpstream]:
    server = MockUpstream().start()
    yield server
    server.stop()
