"""Migrations build the schema the models describe, on SQLite and PostgreSQL."""

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, text
from sqlalchemy.exc import IntegrityError
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


async def _to(engine: AsyncEngine, revision: str, *, down: bool = False) -> None:
    from alembic import command

    def run(connection: Connection) -> None:
        config = migrate.alembic_config(connection)
        (command.downgrade if down else command.upgrade)(config, revision)

    async with engine.begin() as conn:
        await conn.run_sync(run)


async def test_policy_bindings_come_and_go_without_losing_keys(database_url: str) -> None:
    """0002 adds columns to `projects`, `api_keys` and `providers` (foreign keys on the first
    two). On SQLite a table copy (how SQLite adds a constraint or drops a column in batch
    mode) drops the old table, and with foreign keys enforced that deletes every key of a
    project or route of a provider (ON DELETE CASCADE): neither direction may copy them. 0003
    adds columns to `routes`, the same way."""
    engine = create_engine(database_url)
    now = "CURRENT_TIMESTAMP"
    rows = [
        f"INSERT INTO tenants VALUES ('t', 'default', 'd', {now}, {now})",
        "INSERT INTO projects (id, tenant_id, name, created_at, updated_at)"
        f" VALUES ('p', 't', 'acme', {now}, {now})",
        "INSERT INTO api_keys (id, tenant_id, project_id, name, digest, prefix, last_four,"
        " status, ip_allowlist, source, created_at, updated_at) VALUES"
        f" ('k', 't', 'p', 'ci', 'd', 'x', 'y', 'active', '[]', 'config', {now}, {now})",
        "INSERT INTO providers (id, tenant_id, slug, type, created_at, updated_at)"
        f" VALUES ('v', 't', 'up', 'openai', {now}, {now})",
        "INSERT INTO virtual_models (id, tenant_id, name, strategy, retry_attempts,"
        " retry_backoff_ms, deadline_s, fallbacks, context_fallbacks, embedding, created_at,"
        f" updated_at) VALUES ('m', 't', 'chat', 'priority', 1, 0, 1, '[]', '[]', false, {now},"
        f" {now})",
        "INSERT INTO routes (id, model_id, provider_id, upstream_model, priority, weight,"
        f" disabled, position, created_at, updated_at) VALUES ('r', 'm', 'v', 'x', 0, 1, false,"
        f" 0, {now}, {now})",
    ]
    kept = text("SELECT (SELECT count(*) FROM api_keys), (SELECT count(*) FROM routes)")
    try:
        await _to(engine, "0001")
        async with engine.begin() as conn:
            for row in rows:
                await conn.execute(text(row))
        await _to(engine, "0002")
        async with engine.connect() as conn:
            assert (await conn.execute(kept)).one() == (1, 1)
        # columns added to `routes` (0003), `providers` (0004), `request_records` (0005,
        # 0006); tables for the usage rollups (0007)
        await _to(engine, "0007")
        async with engine.connect() as conn:
            assert (await conn.execute(kept)).one() == (1, 1)
            assert await conn.run_sync(_diff) == []
        with pytest.raises(IntegrityError):
            async with engine.begin() as conn:
                await conn.execute(text("UPDATE api_keys SET routing_policy_id = 'nowhere'"))
        await _to(engine, "0001", down=True)
        async with engine.connect() as conn:
            assert (await conn.execute(kept)).one() == (1, 1)
    finally:
        await engine.dispose()
