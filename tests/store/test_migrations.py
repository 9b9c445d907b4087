"""Migrations build the schema the models describe, on SQLite and PostgreSQL."""

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.store import migrate
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
