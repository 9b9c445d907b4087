"""Database preparation the CLI runs before serving, and applying a config to a database."""

from __future__ import annotations

from llmrelay.config.apply import ApplyResult, apply_config
from llmrelay.config.schema import GatewayConfig
from llmrelay.settings import Settings, resolve_secret_key
from llmrelay.store import migrate, partitions
from llmrelay.store.bootstrap import ensure_default_tenant
from llmrelay.store.crypto import Sealer
from llmrelay.store.db import create_engine, is_sqlite, session_factory


async def migrate_database(url: str) -> str | None:
    engine = create_engine(url)
    try:
        await migrate.upgrade_if_needed(engine)
        await partitions.ensure(engine)  # PostgreSQL: this month's and the next two
        async with session_factory(engine).begin() as session:
            await ensure_default_tenant(session)
        return await migrate.current_revision(engine)
    finally:
        await engine.dispose()


async def prepare_for_serving(url: str) -> None:
    """SQLite is migrated in place (one process owns it); PostgreSQL must be migrated by
    `llmrelay migrate` first, so replicas never race a schema change."""
    if is_sqlite(url):
        await migrate_database(url)
        return
    engine = create_engine(url)
    try:
        if not await migrate.is_up_to_date(engine):
            raise RuntimeError(
                f"schema revision {await migrate.current_revision(engine)} is not the required "
                f"{migrate.HEAD_REVISION}: run `llmrelay migrate` first"
            )
    finally:
        await engine.dispose()


async def apply_to_database(
    settings: Settings, config: GatewayConfig, *, source: str
) -> ApplyResult:
    engine = create_engine(settings.database_url)
    try:
        if is_sqlite(settings.database_url):
            await migrate.upgrade_if_needed(engine)
        elif not await migrate.is_up_to_date(engine):
            raise RuntimeError(
                "the database schema is not up to date: run `llmrelay migrate` first"
            )
        sealer = Sealer(resolve_secret_key(settings))
        async with session_factory(engine).begin() as session:
            return await apply_config(session, config, sealer, source=source)
    finally:
        await engine.dispose()
