"""A fake Stripe API server for the billing tests of a module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fake_stripe import FakeStripe


@pytest.fixture(scope="module")
def fake_stripe() -> Iterator[FakeStripe]:
    server = FakeStripe().start()
    yield server
    server.stop()
