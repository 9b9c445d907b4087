"""How a batch of record rows reaches the database: the SQL, and who runs it.

A batch is never handed over whole: `InsertSql.chunks` makes its statements one small chunk
of rows at a time (each row put in the database's form only when its chunk is made), so the
event loop never spends more than a fraction of a millisecond on one batch before requests
get their turn (docs/performance.md, "Stalls beside the request path").

SQLite: the recorder's own stdlib `sqlite3` connection. The inserts run on the event loop in
slices of at most SLICE_S (statements of at most 8 rows, about 0.05 ms each); measured under
load, the same inserts sent through aiosqlite's worker thread cost about three times their own
CPU: every statement hands the GIL between that thread and the event loop, and on a busy loop
each hand-over is a contended wake-up. The COMMIT, which writes the whole batch's pages to the
WAL (about half a millisecond for a thousand rows), and the periodic WAL checkpoint, which may
wait on the disk, run on a thread of the writer's own: sqlite3 releases the GIL while SQLite
works, so the loop goes on serving meanwhile. The connection never waits for a lock on the
loop (busy timeout 0; a locked database is retried after a pause).

PostgreSQL: asyncpg runs on the event loop and pipelines an executemany; a batch is sent as
executemanys of PG_CHUNK_ROWS rows in one transaction, so no single one encodes a whole batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from itertools import chain
from typing import Any, Final, Protocol

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

#: Rows per SQLite statement, largest first: a batch is cut greedily into these sizes, so
#: only this many distinct statements exist (each distinct SQL text is a prepared statement in
#: sqlite3's cache, and one with thousands of parameters is big: one text per batch size once
#: cost about 100 MB of memory). Small, because one statement is the unit a slice cannot cut:
#: 32 rows took 0.13-0.22 ms at the median but up to 0.8 ms (a B-tree page split, a page
#: fault), which put about 4 % of the record batches' slices over 0.5 ms; 8 rows take
#: 0.03-0.06 ms (at most 0.25-0.3 ms) for the same CPU per row within the spread (4-7 us, from
#: 4 to 32 rows a statement: docs/performance.md, "Stalls beside the request path").
SQLITE_STATEMENT_ROWS: Final = (8, 2, 1)
#: Rows per PostgreSQL executemany (one transaction holds them all).
PG_CHUNK_ROWS: Final = 128
#: The SQLite writer's budget for one slice on the event loop: it yields to requests before a
#: statement that would take the slice past this (judged by the longest statement lately),
#: leaving room under 0.5 ms for a statement slower than any before it.
SLICE_S: Final = 0.0003
#: The budget of a slice that starts while the recorder is behind (`recorder._BEHIND_ROWS`
#: rows queued behind the batch being written). A slice comes once per turn of the loop, and
#: on a saturated loop a turn is milliseconds of requests: at c=64, slices of 0.3 ms wrote
#: fewer rows than arrived, and the queue filled to its bound (where records are dropped)
#: within 40 s. Catching up in longer slices costs a saturated loop's tail little; a loop
#: that keeps up never sees them.
SLICE_BEHIND_S: Final = 0.002
#: How fast the estimate of a statement's cost forgets a slow one (per statement).
_STEP_DECAY: Final = 0.75
#: How long a locked database (another process applying config, say) is waited for, in
#: pauses that leave the event loop free, before the batch counts as failed.
LOCKED_WAIT_S = 30.0
_LOCKED_PAUSE_S: Final = 0.05
#: Rows written between two WAL checkpoints (on the writer's thread).
CHECKPOINT_ROWS = 8192

Statement = tuple[str, Any]


def _bind_fast() -> None:
    """Binds None and bool without sqlite3's adaptation protocol. For any type but exact
    int, float, str and bytearray, sqlite3 (CPython 3.11) looks for an adapter and then
    probes the value's `__conform__` and the protocol's `__adapt__`, each a failed attribute
    lookup that formats an AttributeError: about 3,000 CPU instructions per None or bool
    parameter (callgrind), some 10,000 per request record, whose optional columns are often
    None. A registered adapter is found at once: None stays None (bound as NULL) and a
    bool becomes the int SQLite stores it as anyway. Process-wide, and the same values as
    before for every sqlite3 user (SQLAlchemy binds booleans as ints on SQLite itself)."""
    sqlite3.register_adapter(type(None), _same)
    sqlite3.register_adapter(bool, int)


def _same(value: None) -> None:
    return value


_bind_fast()


class SqliteTime:
    """SQLAlchemy's own SQLite storage format for DateTime, so the ORM reads it back. The
    date-and-time part is formatted once per second (a batch shares a handful of seconds)."""

    __slots__ = ("_second", "_text")

    def __init__(self) -> None:
        self._second = -1
        self._text = ""

    def __call__(self, timestamp: float) -> str:
        seconds = int(timestamp)
        micros = round((timestamp - seconds) * 1_000_000)
        if micros == 1_000_000:
            seconds, micros = seconds + 1, 0
        if seconds != self._second:
            self._second = seconds
            self._text = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds))
        # Six digits without a format spec (compiled by mypyc, an f-string's `:06d` is parsed
        # at every call: about four times the cost).
        return self._text + "." + str(1_000_000 + micros)[1:]


def aware_time(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)


class InsertSql:
    """One table's idempotent INSERT, compiled once, and its multi-row forms for SQLite.

    `unique` names the columns a row is unique by (request records: the request id). A table
    partitioned on PostgreSQL (its `partition_key` info: request records, by created_at,
    migration 0009) can only be unique by keys that include the partition key, so there the
    conflict target gets it too: ON CONFLICT (request_id, created_at). That keeps inserts
    idempotent, because a row written again (a retried batch, or the spool replaying one
    after an outage) carries the same created_at as the first time: it is the record's own
    time, taken when the request began and kept in the row, not the time of the insert.
    Decided here once, not per batch: a PostgreSQL database at this revision is always
    partitioned (`serve` refuses an older schema)."""

    def __init__(
        self, engine: AsyncEngine, table: Any, columns: tuple[str, ...], unique: list[str]
    ) -> None:
        is_postgres = engine.dialect.name == "postgresql"
        dialect = postgresql if is_postgres else sqlite
        partition_key = table.info.get("partition_key") if is_postgres else None
        if partition_key is not None and partition_key not in unique:
            unique = [*unique, partition_key]
        statement = dialect.insert(table).on_conflict_do_nothing(index_elements=unique)
        compiled = statement.compile(dialect=engine.dialect, column_keys=list(columns))
        assert tuple(compiled.positiontup or ()) == columns, compiled.positiontup
        self.sql = str(compiled)
        self.multi_row = not is_postgres
        self.created_at = columns.index("created_at")
        self.convert_time: Callable[[float], Any] = aware_time if is_postgres else SqliteTime()
        head, _, rest = self.sql.partition(" VALUES ")
        group, _, tail = rest.partition(")")
        self._parts = (head + " VALUES ", group + ")", tail)
        self._multi_sql: dict[int, str] = {}

    def prepare(self, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """The rows with `created_at` (a Unix timestamp) in the database's form."""
        at, convert = self.created_at, self.convert_time
        return [(*row[:at], convert(row[at]), *row[at + 1 :]) for row in rows]

    def statements(self, rows: list[tuple[Any, ...]]) -> list[Statement]:
        """SQLite: multi-row INSERTs covering `rows` (already prepared), sized from
        SQLITE_STATEMENT_ROWS. PostgreSQL: one executemany."""
        if not self.multi_row:
            return [(self.sql, rows)] if rows else []
        return list(self._multi_row(rows, prepared=True))

    def chunks(self, rows: list[tuple[Any, ...]]) -> Iterator[Statement]:
        """The statements that insert `rows` (as queued: `created_at` a Unix timestamp), made
        one at a time as they are asked for, each chunk of rows prepared only then: however
        large the batch, no step takes long on the event loop. SQLite: multi-row INSERTs
        sized from SQLITE_STATEMENT_ROWS; PostgreSQL: executemanys of PG_CHUNK_ROWS rows."""
        if self.multi_row:
            yield from self._multi_row(rows, prepared=False)
            return
        for start in range(0, len(rows), PG_CHUNK_ROWS):
            yield (self.sql, self.prepare(rows[start : start + PG_CHUNK_ROWS]))

    def _multi_row(self, rows: list[tuple[Any, ...]], *, prepared: bool) -> Iterator[Statement]:
        start = 0
        for size in SQLITE_STATEMENT_ROWS:
            while len(rows) - start >= size:
                part = rows[start : start + size]
                if not prepared:
                    part = self.prepare(part)
                yield (self._statement_for(size), tuple(chain.from_iterable(part)))
                start += size

    @property
    def statement_shapes(self) -> int:
        return len(self._multi_sql)

    def _statement_for(self, count: int) -> str:
        sql = self._multi_sql.get(count)
        if sql is None:
            head, group, tail = self._parts
            sql = self._multi_sql[count] = head + ", ".join([group] * count) + tail
        return sql


class BatchWriter(Protocol):
    async def write(
        self,
        statements: Iterable[Statement],
        rows: int,
        slice_s: float = SLICE_S,
        behind: Callable[[], bool] | None = None,
    ) -> None:
        """Run `statements` in one transaction (all or nothing); raise on failure. They may
        be made lazily (InsertSql.chunks): each is taken only when it is about to run.
        `slice_s`: the longest the event loop is held between two turns, where it is held;
        SLICE_BEHIND_S instead for each slice that starts while `behind()`."""

    async def drain(self) -> None:
        """Finish background work (before the engine is disposed)."""

    def close(self) -> None: ...


class EngineWriter:
    """Through the SQLAlchemy engine (PostgreSQL; SQLite without a file)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def write(
        self,
        statements: Iterable[Statement],
        rows: int,
        slice_s: float = SLICE_S,
        behind: Callable[[], bool] | None = None,
    ) -> None:
        async with self._engine.begin() as conn:
            for sql, params in statements:
                await conn.exec_driver_sql(sql, params)

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        pass


class SqliteWriter:
    """The recorder's own connection to the SQLite file: statements on the event loop in
    short slices, COMMIT and checkpoints on the writer's own thread (never two at once:
    the recorder awaits each write before the next)."""

    def __init__(self, engine: AsyncEngine, path: str) -> None:
        self._path = path
        self._db: sqlite3.Connection | None = None
        self._since_checkpoint = 0
        #: One thread, made on the first commit: the commits and checkpoints, in order.
        self._committer: ThreadPoolExecutor | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            # Used by the loop's thread and the writer's, never at the same time.
            db = sqlite3.connect(
                self._path, isolation_level=None, timeout=0, check_same_thread=False
            )
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA wal_autocheckpoint=0")
            self._db = db
        return self._db

    async def write(
        self,
        statements: Iterable[Statement],
        rows: int,
        slice_s: float = SLICE_S,
        behind: Callable[[], bool] | None = None,
    ) -> None:
        db = self._connection()
        await self._begin(db)
        try:
            resumed = last = time.perf_counter()
            # The next statement's cost, with making it (InsertSql.chunks): the longest
            # lately, decaying, so that one slow statement (the first on a connection is
            # compiled) does not cut every later slice down to one statement.
            step = 0.0
            budget = _budget(slice_s, behind)
            for sql, params in statements:
                db.execute(sql, params)
                now = time.perf_counter()
                step = max(step * _STEP_DECAY, now - last)
                last = now
                if now - resumed + step > budget:  # the next one would overrun the slice
                    await asyncio.sleep(0)  # let requests through; the transaction stays open
                    budget = _budget(slice_s, behind)
                    resumed = last = time.perf_counter()
            self._since_checkpoint += rows
            checkpoint = self._since_checkpoint >= CHECKPOINT_ROWS
            if checkpoint:
                self._since_checkpoint = 0
            await self._off_loop(_commit, db, checkpoint)
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    async def _off_loop(self, work: Callable[..., None], *args: Any) -> None:
        """`work` on the writer's thread. Not cancelled halfway: a cancelled write (at
        shutdown) still waits for its COMMIT, which cannot be taken back once begun."""
        if self._committer is None:
            self._committer = ThreadPoolExecutor(1, thread_name_prefix="llmrelay-records")
        done = asyncio.get_running_loop().run_in_executor(self._committer, work, *args)
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            await asyncio.wait((done,))
            raise

    async def _begin(self, db: sqlite3.Connection) -> None:
        """BEGIN IMMEDIATE (the write lock now, not halfway through), waiting for a lock
        another connection holds in pauses that leave the loop free."""
        give_up = time.monotonic() + LOCKED_WAIT_S
        while True:
            try:
                db.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if not _is_locked(exc) or time.monotonic() >= give_up:
                    raise
            await asyncio.sleep(_LOCKED_PAUSE_S)

    async def drain(self) -> None:
        """Nothing runs on the writer's thread between two writes."""

    def close(self) -> None:
        if self._committer is not None:
            self._committer.shutdown(wait=True)
            self._committer = None
        if self._db is not None:
            self._db.close()
            self._db = None


def _budget(slice_s: float, behind: Callable[[], bool] | None) -> float:
    return SLICE_BEHIND_S if behind is not None and behind() else slice_s


def _commit(db: sqlite3.Connection, checkpoint: bool) -> None:
    """On the writer's thread: the transaction's COMMIT, then, every CHECKPOINT_ROWS rows, a
    passive WAL checkpoint (it copies what no reader still needs into the database file and
    may wait on the disk; a failed one is tried again at the next)."""
    db.execute("COMMIT")
    if checkpoint:
        with contextlib.suppress(sqlite3.Error):
            db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()


def _is_locked(exc: sqlite3.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


def writer_for(engine: AsyncEngine) -> EngineWriter | SqliteWriter:
    path = engine.url.database if engine.dialect.name == "sqlite" else None
    if not path or path == ":memory:" or path.startswith("file:"):
        return EngineWriter(engine)
    return SqliteWriter(engine, path)
