"""What the tests of the operations jobs share: a config applied to a test database, a
provider registry with the real HTTP transport, the services a job receives, and the mock
upstream (a module fixture: import `upstream` into the test module)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.config.apply import apply_config
from llmrelay.config.loader import parse_config
from llmrelay.deadlines import Deadlines
from llmrelay.gateway.endpoints import DataPlane
from llmrelay.jobs.services import Services
from llmrelay.providers.http import HttpTransport
from llmrelay.providers.registry import ProviderRegistry
from llmrelay.settings import Settings
from llmrelay.snapshot.signals import ConfigPublisher
from llmrelay.store.crypto import Sealer
from llmrelay.store.db import session_factory
from llmrelay.store.models import Provider
from tests.support.mock_upstream import MockUpstream

SEALER = Sealer("test-secret-key-for-operations-jobs-0123456789")
#: Short waits between probes, as LLMRELAY_PROBE_DELAYS_S would set them.
DELAYS = (300.0, 600.0, 1800.0, 3600.0)


@pytest.fixture(scope="module")
def upstream() -> Iterator[MockUpstream]:
    server = MockUpstream().start()
    yield server
    server.stop()


async def apply(engine: AsyncEngine, yaml_text: str) -> None:
    config = parse_config(yaml_text, "ops.yaml", {})
    async with session_factory(engine).begin() as session:
        await apply_config(session, config, SEALER, source="ops.yaml")


async def provider_id(engine: AsyncEngine, slug: str) -> str:
    async with session_factory(engine)() as session:
        found = await session.scalar(select(Provider.id).where(Provider.slug == slug))
    assert found is not None
    return str(found)


@asynccontextmanager
async def registry() -> AsyncIterator[ProviderRegistry]:
    """The providers layer as a serving process has it (the shared aiohttp pool)."""
    found = ProviderRegistry(HttpTransport(Deadlines(asyncio.get_running_loop())))
    try:
        yield found
    finally:
        await found.close()


class Announced:
    """A publisher that remembers what it announced (the real one, with no transport on
    SQLite without Redis, would announce to no one)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.generations: list[int] = []
        self.publisher = ConfigPublisher(
            engine=engine, redis_url=None, on_publish=self.generations.append
        )


def services(
    engine: AsyncEngine,
    providers: ProviderRegistry,
    *,
    publisher: ConfigPublisher | None = None,
    wake: Callable[[], None] | None = None,
    **settings: Any,
) -> Services:
    return Services(
        Settings(database_url="sqlite://", **settings),
        engine,
        SEALER,
        DataPlane(),
        providers,
        publisher=publisher,
        wake=wake,
    )
