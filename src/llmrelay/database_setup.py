"""Database preparation the CLI runs before serving, applying a config to a database, and
re-sealing secrets under a new key."""

from __future__ import annotations

from collections.abc import Iterable

from llmrelay.config.apply import ApplyResult, apply_config
from llmrelay.config.schema import GatewayConfig
from llmrelay.settings import Settings
from llmrelay.snapshot.signals import publish_generation
from llmrelay.store import migrate, partitions
from llmrelay.store.bootstrap import ensure_default_tenant
from llmrelay.store.crypto import sealer_for
from llmrelay.store.db import create_engine, is_sqlite, session_factory
from llmrelay.store.rotation import RotationReport, rotate


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
        sealer = sealer_for(settings)
        async with session_factory(engine).begin() as session:
            result = await apply_config(session, config, sealer, source=source)
        if result.changed:  # committed: tell the running replicas now (signals.py)
            await publish_generation(result.generation, engine=engine, redis_url=settings.redis_url)
        return result
    finally:
        await engine.dispose()


async def rotate_secret(
    settings: Settings, previous_keys: Iterable[str], *, dry_run: bool = False
) -> RotationReport:
    """Re-seal every sealed value under LLMRELAY_SECRET_KEY in one transaction. The schema
    must be current: a rotation never migrates, so it cannot race a schema change."""
    engine = create_engine(settings.database_url)
    try:
        if not await migrate.is_up_to_date(engine):
            raise RuntimeError(
                "the database schema is not up to date: run `llmrelay migrate` first"
            )
        sealer = sealer_for(settings, previous_keys)
        async with session_factory(engine).begin() as session:
            report = await rotate(session, sealer, dry_run=dry_run)
        if report.generation is not None:  # committed: replicas rebuild with the new values
            await publish_generation(report.generation, engine=engine, redis_url=settings.redis_url)
        return report
    finally:
        await engine.dispose()
