"""Alembic environment: runs on a connection handed over by llmrelay.store.migrate,
or, from the `alembic` command line, on LLMRELAY_DATABASE_URL."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import Connection

from llmrelay.store.models import Base
from llmrelay.store.partitions import include_name

config = context.config
target_metadata = Base.metadata


def run_on(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_name=include_name,
    )
    with context.begin_transaction():
        context.run_migrations()


async def run_from_settings() -> None:
    from llmrelay.settings import Settings
    from llmrelay.store.db import create_engine

    engine = create_engine(Settings().database_url)
    async with engine.begin() as conn:
        await conn.run_sync(run_on)
    await engine.dispose()


handed_over = config.attributes.get("connection")
if handed_over is not None:
    run_on(handed_over)
else:
    asyncio.run(run_from_settings())
