"""Request records the database could not take, kept in local files until it can.

Memory would not do: an outage can outlast the process (a deploy, a crash), and a record
that was only queued in memory is then gone. Each process appends to a file of its own,
`records-<pid>-<seq>.jsonl`, and holds an exclusive `flock` on it while it is open. Replay
takes a file only when it gets that lock without waiting: a live process's current file is
never read half-written, and files a dead process left behind are replayed by whichever
process looks next (each of `serve --workers N`, a restarted gateway). A file is deleted only
after every row in it was written; the inserts are idempotent (by request id and attempt),
so a file replayed twice, after a crash between writing and deleting, costs nothing.

Format: a header line naming the columns, then one JSON array per row, `["r", [...]]` for a
record, `["a", [...]]` for an attempt row, `["p", [...]]` for a payload row (captured
bodies), `["h", [...]]` for a guardrail hit row and `["s", [...]]` for a wallet lease's
settle (written by the journal, gateway/journal.py), with the values of the tuples
(`created_at` a Unix timestamp; a body, which is bytes, as `{"b64": "..."}`). The header
lets a newer version replay an older version's files: values are matched to columns by name,
and a column the file lacks is None (a file without payload columns has no payload rows). A
version that predates payloads (or hits) skips their lines as corrupt and replays the rest.
An append is flushed and fsynced once, so a batch that was spooled
survives a crash of the process or the machine.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import os
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import structlog

from llmrelay.gateway.call import ATTEMPT_COLUMNS, HIT_COLUMNS, RECORD_COLUMNS
from llmrelay.gateway.capture import PAYLOAD_COLUMNS

log = structlog.get_logger(__name__)

Row = tuple[Any, ...]
#: Writes record rows, attempt rows, payload rows and hit rows in one transaction; raises
#: when it could not.
WriteRows = Callable[[list[Row], list[Row], list[Row], list[Row]], Awaitable[None]]
#: Writes lease settle rows (SETTLE_COLUMNS), after the file's records; raises when it could not.
WriteSettles = Callable[[list[Row]], Awaitable[None]]
#: A wallet lease's settle as the journal keeps it (billing/lease_store.Settle and its lease).
SETTLE_COLUMNS = (
    "tenant_id",
    "lease_id",
    "request_id",
    "amount",
    "charge",
    "over",
    "project_id",
    "key_id",
)

_RECORD = "r"
_ATTEMPT = "a"
_PAYLOAD = "p"
_HIT = "h"
_SETTLE = "s"
_KINDS = (_RECORD, _ATTEMPT, _PAYLOAD, _HIT, _SETTLE)
#: Past this size a file is closed and the next append begins another: replay reads a whole
#: file into memory, so this bounds what one replay holds (about 20,000 records of some 400
#: bytes, about 30 MB as Python tuples).
MAX_FILE_BYTES = 8 * 1024 * 1024
#: Rows handed to the write function at once (the recorder's largest batch).
CHUNK_ROWS = 4096


class Spool:
    """Append-only files in `directory` (created on first use). Thread-safe: the recorder
    appends from a worker thread, so an fsync never stalls the event loop."""

    def __init__(
        self,
        directory: Path,
        *,
        max_file_bytes: int = MAX_FILE_BYTES,
        chunk_rows: int = CHUNK_ROWS,
        record_columns: Sequence[str] = RECORD_COLUMNS,
        attempt_columns: Sequence[str] = ATTEMPT_COLUMNS,
        payload_columns: Sequence[str] = PAYLOAD_COLUMNS,
        hit_columns: Sequence[str] = HIT_COLUMNS,
    ) -> None:
        self.directory = directory.absolute()
        self._max_file_bytes = max_file_bytes
        self._chunk_rows = chunk_rows
        self._columns = {
            _RECORD: tuple(record_columns),
            _ATTEMPT: tuple(attempt_columns),
            _PAYLOAD: tuple(payload_columns),
            _HIT: tuple(hit_columns),
            _SETTLE: SETTLE_COLUMNS,
        }
        self.header = file_header(record_columns, attempt_columns, payload_columns, hit_columns)
        #: Writes the lease settles a journal file holds (none when billing is off here:
        #: then they are logged and left to reconciliation).
        self.write_settles: WriteSettles | None = None
        self._lock = threading.Lock()
        self._seq = 0
        self._fd: int | None = None
        self._name: str | None = None
        self._size = 0
        #: Files this process wrote or took over and has not replayed yet: rows, bytes.
        self._known: dict[str, tuple[int, int]] = {}
        self.pending_rows = 0
        self.size_bytes = 0

    # -- writing ---------------------------------------------------------------------------

    def append(
        self,
        rows: list[Row],
        attempts: list[Row],
        payloads: Sequence[Row] = (),
        hits: Sequence[Row] = (),
    ) -> None:
        """Write the rows to the current file and fsync it. Raises OSError (or orjson's
        error) when they could not be kept; the file then holds none of them."""
        dump, newline = orjson.dumps, orjson.OPT_APPEND_NEWLINE
        lines = [dump((_RECORD, row), option=newline) for row in rows]
        lines += [dump((_ATTEMPT, row), option=newline) for row in attempts]
        lines += [dump((_PAYLOAD, row), default=_bytes_out, option=newline) for row in payloads]
        lines += [dump((_HIT, row), option=newline) for row in hits]
        data = b"".join(lines)
        with self._lock:
            fd = self._fd if self._fd is not None else self._open()
            assert self._name is not None
            start = self._size
            try:
                _write_all(fd, data)
                os.fsync(fd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, start)  # no half batch: the next line starts clean
                self._close()
                raise
            self._size += len(data)
            self._count(self._name, len(lines), len(data))
            if self._size >= self._max_file_bytes:
                self._close()

    def rotate(self) -> None:
        """Close the current file (releasing its lock); the next append begins another."""
        with self._lock:
            self._close()

    def close(self) -> None:
        self.rotate()

    def _open(self) -> int:
        self.directory.mkdir(parents=True, exist_ok=True)
        while True:
            self._seq += 1
            name = f"records-{os.getpid()}-{self._seq}.jsonl"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND
            try:
                fd = os.open(self.directory / name, flags, 0o600)
            except FileExistsError:  # left by an earlier process that had our pid
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                # A replayer may have taken the empty file between create and lock, and
                # deleted it: that one is gone, begin another.
                taken = os.fstat(fd).st_nlink == 0
            except BlockingIOError:
                taken = True
            if taken:
                os.close(fd)
                continue
            try:
                _write_all(fd, self.header)
                _fsync_directory(self.directory)  # the new name survives a crash too
            except OSError:
                os.close(fd)
                # A full disk: leave no empty file behind for every failed attempt.
                with contextlib.suppress(OSError):
                    os.unlink(self.directory / name)
                raise
            self._fd, self._name, self._size = fd, name, len(self.header)
            self._count(name, 0, len(self.header))
            return fd

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd, self._name, self._size = None, None, 0

    def _count(self, name: str, rows: int, size: int) -> None:
        old_rows, old_size = self._known.get(name, (0, 0))
        self._known[name] = (old_rows + rows, old_size + size)
        self.pending_rows += rows
        self.size_bytes += size

    def _forget(self, name: str) -> None:
        with self._lock:
            rows, size = self._known.pop(name, (0, 0))
            self.pending_rows -= rows
            self.size_bytes -= size

    def _forget_gone(self, names: list[str]) -> None:
        """Stop counting files another process replayed (a dead process's, say)."""
        present = set(names)
        with self._lock:
            gone = [n for n in self._known if n not in present and n != self._name]
        for name in gone:
            self._forget(name)

    # -- replay ----------------------------------------------------------------------------

    async def replay(self, write: WriteRows, *, max_files: int | None = None) -> bool:
        """Hand every file no live process holds to `write` in chunks, deleting each once
        all its rows are written. True when nothing was left that this process could take;
        False when `max_files` stopped it first. Raises what `write` raised (that file
        stays, to be replayed whole next time)."""
        names = await asyncio.to_thread(self._names)
        self._forget_gone(names)
        taken = 0
        for name in names:
            if max_files is not None and taken >= max_files:
                return False
            loaded = await asyncio.to_thread(self._take, name)
            if loaded is None:
                continue
            taken += 1
            fd, rows = loaded
            try:
                for chunk in self._chunks(rows):
                    await write(*chunk)
                await self._settle(name, rows[_SETTLE])
                os.unlink(self.directory / name)  # still under our lock: no one else reads it
            finally:
                os.close(fd)
            self._forget(name)
            log.info("record_spool_replayed", file=name, rows=sum(map(len, rows.values())))
        return True

    def _names(self) -> list[str]:
        """Our current file last: replay stops at the first failure, so while the database
        is away the current file is not closed (and another begun) every time."""
        current = self._name
        names = [path.name for path in self.directory.glob("*.jsonl")]
        return sorted(names, key=lambda name: (name == current, name))

    def _take(self, name: str) -> tuple[int, dict[str, list[Row]]] | None:
        """Lock the file and read its rows; None when another process holds it or it is
        gone. The caller closes the descriptor (releasing the lock)."""
        with self._lock:
            if name == self._name:
                self._close()  # our own current file: appends go on in the next one
        try:
            fd = os.open(self.directory / name, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(fd).st_nlink == 0:  # replayed and deleted since we listed it
                os.close(fd)
                return None
            with open(fd, "rb", closefd=False) as file:
                data = file.read()
            rows = self._parse(name, data)
        except BlockingIOError:  # a live process's current file
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        with self._lock:
            old_rows, old_size = self._known.get(name, (0, 0))
            count = sum(map(len, rows.values()))
            self._count(name, count - old_rows, len(data) - old_size)
        return fd, rows

    def _parse(self, name: str, data: bytes) -> dict[str, list[Row]]:
        out: dict[str, list[Row]] = {kind: [] for kind in _KINDS}
        convert = {kind: self._converter(kind, None) for kind in out}
        corrupt = 0
        for number, line in enumerate(data.split(b"\n")):
            if not line:
                continue
            try:
                item = orjson.loads(line)
                if number == 0 and isinstance(item, dict):  # the header
                    convert = {
                        _RECORD: self._converter(_RECORD, item["records"]),
                        _ATTEMPT: self._converter(_ATTEMPT, item["attempts"]),
                        # an older version's file: no payload columns, and no payload rows
                        _PAYLOAD: self._converter(_PAYLOAD, item.get("payloads", [])),
                        _HIT: self._converter(_HIT, item.get("hits", [])),
                        _SETTLE: self._converter(_SETTLE, item.get("settles", [])),
                    }
                else:
                    kind, values = item
                    out[kind].append(convert[kind](values))
            except (ValueError, KeyError, TypeError, IndexError):  # orjson's errors included
                corrupt += 1  # a line cut short by a crash, most likely the last one
        if corrupt:
            log.warning("record_spool_corrupt_lines", file=name, skipped=corrupt)
        return out

    def _converter(self, kind: str, header: list[str] | None) -> Callable[[list[Any]], Row]:
        """A file's row (in its header's column order) as our tuple: values matched by
        column name, None for a column the file lacks; a row of another width is refused
        (it would fail every replay). A payload row's bodies become bytes again."""
        ours = self._columns[kind]
        theirs = ours if header is None else tuple(header)
        picks = [theirs.index(column) if column in theirs else None for column in ours]
        same = theirs == ours

        def convert(values: list[Any]) -> Row:
            if len(values) != len(theirs):
                raise ValueError("a row of another width than its header")
            if same:
                return tuple(values)
            return tuple(None if i is None else values[i] for i in picks)

        if kind != _PAYLOAD:
            return convert

        def convert_payload(values: list[Any]) -> Row:
            return _bytes_in(convert(values))

        return convert_payload

    async def _settle(self, name: str, settles: list[Row]) -> None:
        """A journal file's lease settles, once its records are written (so reconciliation
        can settle from them a reservation the settle finds already closed)."""
        if not settles:
            return
        if self.write_settles is None:
            log.warning("journal_settles_not_written", file=name, settles=len(settles))
            return
        await self.write_settles(settles)

    def _chunks(
        self, rows: dict[str, list[Row]]
    ) -> Iterator[tuple[list[Row], list[Row], list[Row], list[Row]]]:
        size = self._chunk_rows
        records, attempts = rows[_RECORD], rows[_ATTEMPT]
        payloads, hits = rows[_PAYLOAD], rows[_HIT]
        longest = max(len(records), len(attempts), len(payloads), len(hits))
        for start in range(0, longest, size):
            end = start + size
            yield records[start:end], attempts[start:end], payloads[start:end], hits[start:end]


def file_header(
    record_columns: Sequence[str] = RECORD_COLUMNS,
    attempt_columns: Sequence[str] = ATTEMPT_COLUMNS,
    payload_columns: Sequence[str] = PAYLOAD_COLUMNS,
    hit_columns: Sequence[str] = HIT_COLUMNS,
) -> bytes:
    """A spool or journal file's first line: the columns of each kind of row."""
    return orjson.dumps(
        {
            "records": tuple(record_columns),
            "attempts": tuple(attempt_columns),
            "payloads": tuple(payload_columns),
            "hits": tuple(hit_columns),
            "settles": SETTLE_COLUMNS,
        },
        option=orjson.OPT_APPEND_NEWLINE,
    )


def _bytes_out(value: Any) -> Any:
    """orjson's hook for what it cannot write itself: a captured body (bytes)."""
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode("ascii")}
    raise TypeError(f"{type(value).__name__} cannot be spooled")


def _bytes_in(row: Row) -> Row:
    """A payload row with its bodies as bytes again."""
    return tuple(
        base64.b64decode(value["b64"], validate=True) if isinstance(value, dict) else value
        for value in row
    )


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
