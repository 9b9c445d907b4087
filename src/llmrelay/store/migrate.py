"""Bringing a database schema up to date with Alembic, on SQLite and PostgreSQL alike.

Checking whether a database is current is a plain query against `alembic_version` compared
with HEAD_REVISION, so a process that only serves never imports Alembic (about a quarter of a
second of start-up). tests/store/test_migrations.py keeps HEAD_REVISION equal to the newest
revision file.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
#: The newest revision in migrations/versions; bump it with every new revision.
HEAD_REVISION = "0029"
#: Any constant: replicas starting together take turns migrating a PostgreSQL database.
_PG_MIGRATION_LOCK = 7_211_960_123


def alembic_config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option(
        "file_template",
        "%%(year)d_%%(month).2d_%%(day).2d_%%(rev)s_%%(slug)s",
    )
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str | None:
    """The head according to the revision files (slow: parses them)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def _upgrade(connection: Connection) -> None:
    from alembic import command

    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_MIGRATION_LOCK})
    command.upgrade(alembic_config(connection), "head")


async def upgrade(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(_upgrade)


async def current_revision(engine: AsyncEngine) -> str | None:
    async with engine.connect() as conn:
        try:
            result = await conn.execute(text("SELECT version_num FROM alembic_version"))
        except DBAPIError:
            return None  # no alembic_version table: an empty database
        return result.scalar_one_or_none()


async def is_up_to_date(engine: AsyncEngine) -> bool:
    return await current_revision(engine) == HEAD_REVISION


async def upgrade_if_needed(engine: AsyncEngine) -> bool:
    """Migrate when the schema is behind; True when it ran."""
    if await is_up_to_date(engine):
        return False
    await upgrade(engine)
    return True
