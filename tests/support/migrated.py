"""Migrated databases for tests, copied from a template each test process migrates once.

Running every migration for each test that wants a migrated database cost about 0.7 s on
PostgreSQL and 0.2 s on SQLite, hundreds of times per run: minutes of the suite's wall time.
A copy costs a few milliseconds (PostgreSQL's `CREATE DATABASE ... TEMPLATE`, a file copy for
SQLite) and is the same database a migration makes. Each process (each pytest-xdist worker)
has its own template, named after its pid and a digest of the migration files, so a changed
revision is never served from an old template and two workers never share one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import os
import secrets
import shutil
import sqlite3
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg

from llmrelay.store import migrate
from llmrelay.store.db import create_engine
from tests.support.databases import drop_postgres_database, sqlite_url
from tests.support.services import POSTGRES_ADMIN_URL, POSTGRES_HOST, POSTGRES_PORT


def _migrations_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(migrate.MIGRATIONS_DIR.rglob("*.py")):
        digest.update(str(path.relative_to(migrate.MIGRATIONS_DIR)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:10]


_TEMPLATE_NAME = f"llmrelay_tmpl_{_migrations_digest()}_{os.getpid()}"
_postgres_template: str | None = None
_sqlite_template: Path | None = None


async def _migrate(url: str) -> None:
    engine = create_engine(url)
    try:
        await migrate.upgrade(engine)
    finally:
        await engine.dispose()


async def _ensure_postgres_template() -> str:
    """Made at the first need (tests of a process run one at a time: no race here)."""
    global _postgres_template
    if _postgres_template is None:
        admin = await asyncpg.connect(POSTGRES_ADMIN_URL)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{_TEMPLATE_NAME}" WITH (FORCE)')
            await admin.execute(f'CREATE DATABASE "{_TEMPLATE_NAME}"')
        finally:
            await admin.close()
        await _migrate(f"postgresql://postgres@{POSTGRES_HOST}:{POSTGRES_PORT}/{_TEMPLATE_NAME}")
        _postgres_template = _TEMPLATE_NAME
    return _postgres_template


@asynccontextmanager
async def migrated_postgres_database() -> AsyncIterator[str]:
    """A new database holding the current schema; dropped afterwards."""
    template = await _ensure_postgres_template()
    name = "llmrelay_test_" + secrets.token_hex(6)
    admin = await asyncpg.connect(POSTGRES_ADMIN_URL)
    try:
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    finally:
        await admin.close()
    url = f"postgresql://postgres@{POSTGRES_HOST}:{POSTGRES_PORT}/{name}"
    try:
        yield url
    finally:
        await drop_postgres_database(url)


def drop_postgres_template() -> None:
    """At the process's end (tests/conftest.py): the template goes with it."""
    if _postgres_template is None:
        return

    async def drop() -> None:
        admin = await asyncpg.connect(POSTGRES_ADMIN_URL)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{_postgres_template}" WITH (FORCE)')
        finally:
            await admin.close()

    asyncio.run(drop())


async def _ensure_sqlite_template() -> Path:
    global _sqlite_template
    if _sqlite_template is None:
        where = Path(tempfile.mkdtemp(prefix="llmrelay-tmpl-"))
        await _migrate(sqlite_url(where))
        made = where / "llmrelay.db"
        # Everything in the main file: a WAL left beside it would not travel with the copy.
        with sqlite3.connect(made) as connection:
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        connection.close()
        _sqlite_template = made
    return _sqlite_template


async def migrated_sqlite_url(folder: Path) -> str:
    """`folder`'s database, a copy of this process's migrated template."""
    shutil.copyfile(await _ensure_sqlite_template(), folder / "llmrelay.db")
    return sqlite_url(folder)


def copy_migrated_sqlite(path: Path) -> None:
    """A migrated database at `path`, for code that is not in a coroutine (a gateway
    process's start). The template is made on a thread of its own the first time: the
    caller may be a test whose event loop is running."""
    if _sqlite_template is None:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, _ensure_sqlite_template()).result()
    assert _sqlite_template is not None
    shutil.copyfile(_sqlite_template, path)


def drop_sqlite_template() -> None:
    if _sqlite_template is not None:
        shutil.rmtree(_sqlite_template.parent, ignore_errors=True)
