"""Fresh, empty databases for tests: a SQLite file, or a new PostgreSQL database per test."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg

from tests.support.services import POSTGRES_ADMIN_URL, POSTGRES_HOST, POSTGRES_PORT


async def create_postgres_database() -> str:
    """A new, uniquely named, empty database; returns its URL."""
    name = "llmrelay_test_" + secrets.token_hex(6)
    admin = await asyncpg.connect(POSTGRES_ADMIN_URL)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    return f"postgresql://postgres@{POSTGRES_HOST}:{POSTGRES_PORT}/{name}"


async def drop_postgres_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    admin = await asyncpg.connect(POSTGRES_ADMIN_URL)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@asynccontextmanager
async def postgres_database() -> AsyncIterator[str]:
    """Create a uniquely named database, yield its URL, drop it afterwards."""
    url = await create_postgres_database()
    try:
        yield url
    finally:
        await drop_postgres_database(url)


def sqlite_url(folder: Path) -> str:
    return f"sqlite:///{folder / 'llmrelay.db'}"
