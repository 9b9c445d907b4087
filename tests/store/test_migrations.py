"""Migrations build the schema the models describe, on SQLite and PostgreSQL."""

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.store import migrate
from llmrelay.store.db import create_engine
from llmrelay.store.models import Base


def _diff(connection: Connection) -> list[object]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, Base.metadata))


async def test_upgrade_from_empty_matches_the_models(engine: AsyncEngine) -> None:
    assert await migrate.is_up_to_date(engine)
    async with engine.connect() as conn:
        assert await conn.run_sync(_diff) == []


async def test_upgrade_twice_is_harmless(engine: AsyncEngine) -> None:
    await migrate.upgrade(engine)
    assert await migrate.current_revision(engine) == migrate.head_revision()
    assert not await migrate.upgrade_if_needed(engine)


def test_the_head_constant_names_the_newest_revision_file() -> None:
    assert migrate.head_revision() == migrate.HEAD_REVISION


async def test_an_empty_database_is_not_up_to_date(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        assert await migrate.current_revision(engine) is None
        assert not await migrate.is_up_to_date(engine)
        assert await migrate.upgrade_if_needed(engine)
        assert await migrate.is_up_to_date(engine)
    finally:
        await engine.dispose()
