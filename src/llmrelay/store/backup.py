"""Online backup and restore of a SQLite database (`llmrelay backup`, `llmrelay restore`).

A backup is taken with SQLite's online backup API while the gateway keeps serving: it copies
a consistent snapshot page by page (WAL mode lets the writer go on), in steps, so the
gateway's writes wait at most one step. The copy is then checked (`PRAGMA integrity_check`)
and its schema revision read, so a backup that would not restore is known at once.

A restore replaces the database with a checked backup, through the same API into the
database file (its WAL and shared memory stay consistent), after keeping the current file as
`<database>.before-restore-<time>`. It is refused while a gateway or worker has the database
open (each holds a shared lock on `<database>.lock`) and for a backup from a newer schema
than this program knows. PostgreSQL is backed up with its own tools (docs/operations.md, pg_dump).
"""

from __future__ import annotations

import fcntl
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from llmrelay.store.migrate import HEAD_REVISION, alembic_config

#: Pages copied per step of the online backup (4 KiB pages: 4 MiB a step).
PAGES_PER_STEP = 1024


class BackupError(RuntimeError):
    """A backup or restore cannot be made; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class BackupReport:
    path: Path
    bytes: int
    revision: str | None
    records: int
    seconds: float


def _revision(conn: sqlite3.Connection) -> str | None:
    try:
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.DatabaseError:
        return None
    return None if row is None else str(row[0])


def known_revisions() -> set[str]:
    """Every schema revision this program's migrations know."""
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(alembic_config())
    return {script.revision for script in scripts.walk_revisions()}


def check(path: Path) -> tuple[str | None, int]:
    """The schema revision and record count of a database file that passes SQLite's
    integrity check; raises BackupError otherwise."""
    if not path.is_file():
        raise BackupError(f"{path}: no such file")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise BackupError(f"{path}: cannot open: {exc}") from exc
    try:
        result = conn.execute("PRAGMA integrity_check").fetchall()
        if result != [("ok",)]:
            problems = "; ".join(str(row[0]) for row in result[:5])
            raise BackupError(f"{path} failed SQLite's integrity check: {problems}")
        revision = _revision(conn)
        if revision is None:
            raise BackupError(f"{path} is not an llmrelay database (no schema revision)")
        records = conn.execute("SELECT count(*) FROM request_records").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise BackupError(f"{path} is not a readable SQLite database: {exc}") from exc
    finally:
        conn.close()
    return revision, int(records)


def backup(database: Path, target: Path, *, overwrite: bool = False) -> BackupReport:
    """Copy `database` to `target` while it is in use, then check the copy."""
    if not database.is_file():
        raise BackupError(f"{database}: no such database file")
    if target.exists() and not overwrite:
        raise BackupError(f"{target} exists: give another path, or --force to replace it")
    started = time.monotonic()
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    source = sqlite3.connect(database, timeout=30)
    try:
        copy = sqlite3.connect(partial)
        try:
            source.backup(copy, pages=PAGES_PER_STEP)
        finally:
            copy.close()
    except sqlite3.Error as exc:
        partial.unlink(missing_ok=True)
        raise BackupError(f"the backup of {database} failed: {exc}") from exc
    finally:
        source.close()
    try:
        revision, records = check(partial)
    except BackupError:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(target)
    return BackupReport(
        target, target.stat().st_size, revision, records, time.monotonic() - started
    )


def lock_path(database: Path) -> Path:
    return database.with_name(database.name + ".lock")


def hold_in_use(database: Path) -> IO[bytes]:
    """Mark the database as in use for as long as this process lives (a shared lock on
    `<database>.lock`): every serving process and worker holds one, so a restore can tell
    that the database is open without relying on SQLite's short-lived locks."""
    handle = lock_path(database).open("ab")
    fcntl.flock(handle, fcntl.LOCK_SH)
    return handle


def _in_use(database: Path) -> bool:
    """Whether a gateway or worker holds the database (see `hold_in_use`)."""
    path = lock_path(database)
    if not path.exists():
        return False
    with path.open("ab") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def restore(source: Path, database: Path) -> tuple[BackupReport, Path | None]:
    """Replace `database` with the checked backup `source`; the report and where the
    previous database was kept (None when there was none)."""
    started = time.monotonic()
    revision, records = check(source)
    if revision not in known_revisions():
        raise BackupError(
            f"{source} is at schema revision {revision}, which this program does not know "
            f"(its newest is {HEAD_REVISION}): restore it with the llmrelay version that made it"
        )
    kept: Path | None = None
    if database.exists():
        if _in_use(database):
            raise BackupError(
                f"{database} is in use (a gateway or worker has it open): stop them first"
            )
        # Moved aside whole (with its WAL, which SQLite finds by name next to it): nothing
        # is lost, even when the file is damaged.
        kept = database.with_name(f"{database.name}.before-restore-{int(time.time())}")
        for suffix in ("", "-wal", "-shm"):
            part = database.with_name(database.name + suffix)
            if part.exists():
                part.replace(kept.with_name(kept.name + suffix))
    reader = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        writer = sqlite3.connect(database)
        try:
            reader.backup(writer, pages=PAGES_PER_STEP)
        finally:
            writer.close()
    finally:
        reader.close()
    report = BackupReport(
        database, database.stat().st_size, revision, records, time.monotonic() - started
    )
    return report, kept
