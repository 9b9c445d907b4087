"""Each finished request's record and wallet-lease settle, in a local file the moment the call
ends, until the batches that carry them to the database have committed.

The recorder gathers records for a fifth of a second and the lease writer gathers settles
for up to a second (one transaction per few hundred: what keeps them cheap). A process killed
in between (`kill -9`, the OOM killer, a crashed host process) would lose what it gathered:
answers served with no usage record, and under a wallet lease no charge either. So
`end_call` appends both here first, with one `write` to a file of this process: no fsync,
which survives the death of the process (the kernel holds the page), not of the machine (the
spool, which does fsync, keeps what an outage leaves). It costs about 2 us per request.

The files are spool files (gateway/spool.py: its header, its line format, its `flock`), named
`journal-<pid>-<n>-<token>.jsonl` in the spool directory, and this process holds each one's
lock until it deletes it. A file is closed for appends after ROTATE_S and deleted once
both writers report everything it holds durable (`Marks`); so on a healthy database there are
one or two small files. When the process dies, the kernel releases its locks and the next
process to replay the spool on that directory (a restarted replica, another worker of
`serve --workers N`) writes the records (idempotent, by request id) and then the settles
(idempotent too: a settle finds its reservation closed if it was written before), exactly as
a spooled batch.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson
import structlog

from llmrelay.gateway.spool import file_header

log = structlog.get_logger(__name__)

Row = tuple[Any, ...]
#: How long a file takes appends before the next one begins (so a file's rows are soon all
#: durable and it can go).
ROTATE_S: Final = 1.0
#: Files kept locked at most (one a second while the database is away): past it the oldest
#: are unlocked, not deleted, so a long outage cannot use up the descriptors. An unlocked
#: file may be replayed by a spool meanwhile: harmless, every row of it is idempotent.
MAX_LOCKED: Final = 64
_NEWLINE: Final = orjson.OPT_APPEND_NEWLINE


@dataclass(slots=True)
class _File:
    fd: int
    name: str
    opened: float
    #: The recorder's and the lease writer's counts (Marks) once its last row was appended.
    records: int = 0
    settles: int = 0
    lines: int = 0


@dataclass(slots=True)
class Marks:
    """How far each writer has made its rows durable, as counts of rows it was handed:
    `queued` after the row was handed over, `durable` once every row up to that count is in
    the database (or the spool)."""

    queued_records: Callable[[], int]
    durable_records: Callable[[], int]
    queued_settles: Callable[[], int]
    durable_settles: Callable[[], int]


class Journal:
    def __init__(self, directory: Path, marks: Marks, *, rotate_s: float = ROTATE_S) -> None:
        self.directory = directory.absolute()
        self.marks = marks
        self._rotate_s = rotate_s
        self._header = file_header()
        self._token = secrets.token_hex(4)
        self._seq = 0
        self._current: _File | None = None
        #: Closed for appends, still locked, waiting for their rows to be durable.
        self._closed: list[_File] = []
        #: Appends that failed (a full disk): those requests are only in the writers' memory.
        self.failures = 0

    def keep(
        self,
        record: Row | None,
        attempts: Sequence[Row] | None,
        hits: Sequence[Row] | None,
        settle: Row | None,
    ) -> None:
        """Append one request's rows, at its end (after the writers were handed them, so
        the marks count them). Never raises: a request is not failed for its journal."""
        dump = orjson.dumps
        parts: list[bytes] = []
        if record is not None:
            parts.append(dump(("r", record), option=_NEWLINE))
            for row in attempts or ():
                parts.append(dump(("a", row), option=_NEWLINE))
            for row in hits or ():
                parts.append(dump(("h", row), option=_NEWLINE))
        if settle is not None:
            parts.append(dump(("s", settle), option=_NEWLINE))
        if not parts:
            return
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        try:
            file = self._current or self._open()
            _write_all(file.fd, data)
        except (OSError, TypeError) as exc:
            self.failures += 1
            if self.failures == 1 or self.failures % 1000 == 0:
                log.error("journal_write_failed", error=str(exc), failures=self.failures)
            return
        marks = self.marks
        if record is not None:
            file.records = marks.queued_records()
        if settle is not None:
            file.settles = marks.queued_settles()
        file.lines += len(parts)

    def tidy(self) -> None:
        """Close the current file for appends once it is ROTATE_S old, and delete the files
        whose rows are all durable (at shutdown, and in tests: the serving process runs
        `sort_out` on the loop and `release` on a thread)."""
        release(self.directory, self.sort_out())

    def sort_out(self) -> list[_File]:
        """Close the current file for appends once it is ROTATE_S old; the files whose rows
        are all durable, taken out of the journal's hands, for `release` to delete."""
        done: list[_File] = []
        current = self._current
        if current is not None and time.monotonic() - current.opened >= self._rotate_s:
            self._current = None
            (self._closed if current.lines else done).append(current)
        if not self._closed:
            return done
        records, settles = self.marks.durable_records(), self.marks.durable_settles()
        kept = []
        for file in self._closed:
            if file.records <= records and file.settles <= settles:
                done.append(file)
            else:
                kept.append(file)
        self._closed = kept
        for file in kept[: max(len(kept) - MAX_LOCKED, 0)]:
            if file.fd >= 0:
                os.close(file.fd)
                file.fd = -1
        return done

    def close(self) -> None:
        """At shutdown, after the writers stopped: what is durable goes, the rest stays for
        the next start to replay (its lock released with the descriptor)."""
        if self._current is not None:
            self._current.opened = float("-inf")
        self.tidy()
        for file in self._closed:
            if file.fd >= 0:
                os.close(file.fd)
            log.warning("journal_left_for_replay", file=file.name, lines=file.lines)
        self._closed = []

    def _open(self) -> _File:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._seq += 1
        name = f"journal-{os.getpid()}-{self._seq}-{self._token}.jsonl"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND
        fd = os.open(self.directory / name, flags, 0o600)  # records: tenants, addresses
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _write_all(fd, self._header)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(self.directory / name)
            raise
        self._current = _File(fd, name, time.monotonic())
        return self._current


def release(directory: Path, files: Sequence[_File]) -> None:
    """Delete files the journal no longer holds (`sort_out`): each unlinked under its lock,
    then the lock released: a replayer that opened the name before finds it unlinked
    (spool.py checks st_nlink) and leaves it. Blocking: a second's file at thousands of
    requests a second is megabytes, and the kernel frees its pages in these calls (0.45-1.3
    ms of the caller's CPU, measured by bench.stalls): the serving process runs it on a thread,
    where the system calls do not hold the interpreter."""
    for file in files:
        with contextlib.suppress(OSError):  # gone already if a spool replayed it unlocked
            os.unlink(directory / file.name)
        if file.fd >= 0:
            os.close(file.fd)
            file.fd = -1


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
