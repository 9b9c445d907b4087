"""The journal of ended requests (gateway/journal.py): real files and locks, replayed by a
real spool, its rows handed to real write functions that keep them."""

from __future__ import annotations

import asyncio
import fcntl
import os
from pathlib import Path

import pytest

from llmrelay.gateway.call import ATTEMPT_COLUMNS, HIT_COLUMNS, RECORD_COLUMNS
from llmrelay.gateway.journal import Journal, Marks, release
from llmrelay.gateway.spool import SETTLE_COLUMNS, Row, Spool
from tests.gateway.test_spool import Sink


class Counts:
    """The two writers' marks, moved by the test as a writer would move them."""

    def __init__(self) -> None:
        self.queued_records = self.durable_records = 0
        self.queued_settles = self.durable_settles = 0

    def marks(self) -> Marks:
        return Marks(
            queued_records=lambda: self.queued_records,
            durable_records=lambda: self.durable_records,
            queued_settles=lambda: self.queued_settles,
            durable_settles=lambda: self.durable_settles,
        )


def _record(n: int) -> Row:
    return tuple(f"req-{n}" if c == "request_id" else n for c in RECORD_COLUMNS)


def _attempt(n: int) -> Row:
    return tuple(f"req-{n}" if c == "request_id" else 1 for c in ATTEMPT_COLUMNS)


def _hit(n: int) -> Row:
    return tuple(f"req-{n}" if c == "request_id" else "x" for c in HIT_COLUMNS)


def _settle(n: int) -> Row:
    values = {"tenant_id": "t", "lease_id": "lease-1", "request_id": f"req-{n}", "charge": n}
    return tuple(values.get(c, 0) for c in SETTLE_COLUMNS)


def _keep(journal: Journal, counts: Counts, n: int, *, settle: bool = True) -> None:
    """What end_call does: the writers are handed the rows first, then the journal."""
    counts.queued_records += 1
    counts.queued_settles += settle
    journal.keep(_record(n), [_attempt(n)], [_hit(n)], _settle(n) if settle else None)


def _journals(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("journal-*.jsonl"))


def test_a_file_goes_once_both_writers_hold_its_rows(tmp_path: Path) -> None:
    counts = Counts()
    journal = Journal(tmp_path, counts.marks(), rotate_s=0.0)
    for n in range(3):
        _keep(journal, counts, n)
    assert len(_journals(tmp_path)) == 1
    journal.tidy()  # closed for appends (rotate_s 0), but nothing durable yet
    assert len(_journals(tmp_path)) == 1
    _keep(journal, counts, 3)  # a new file
    assert len(_journals(tmp_path)) == 2
    counts.durable_records = 3  # the recorder wrote the first three
    journal.tidy()
    assert len(_journals(tmp_path)) == 2, "its settles are not written yet"
    counts.durable_settles = 3
    journal.tidy()
    assert len(_journals(tmp_path)) == 1, "the first file's rows are all durable"
    counts.durable_records = counts.durable_settles = 4
    journal.tidy()
    assert _journals(tmp_path) == []


def test_a_live_journal_is_never_replayed(tmp_path: Path) -> None:
    counts = Counts()
    journal = Journal(tmp_path, counts.marks())
    _keep(journal, counts, 1)
    sink = Sink()
    spool = Spool(tmp_path)
    assert asyncio.run(spool.replay(sink)) is True
    assert sink.records == [] and len(_journals(tmp_path)) == 1
    journal.close()  # shut down with nothing durable: kept for the next start


def test_a_dead_process_journal_is_replayed_records_then_settles(tmp_path: Path) -> None:
    counts = Counts()
    journal = Journal(tmp_path, counts.marks())
    for n in range(5):
        _keep(journal, counts, n, settle=n % 2 == 0)
    counts.durable_records = counts.durable_settles = 0
    journal.close()  # as a kill leaves it: the file stays, its lock released
    [name] = _journals(tmp_path)

    order: list[str] = []
    sink = Sink()
    settles: list[Row] = []

    async def write(records: list[Row], a: list[Row], p: list[Row], h: list[Row]) -> None:
        order.append("records")
        await sink(records, a, p, h)

    async def write_settles(rows: list[Row]) -> None:
        order.append("settles")
        settles.extend(rows)

    spool = Spool(tmp_path)
    spool.write_settles = write_settles
    assert asyncio.run(spool.replay(write)) is True
    assert sink.records == [_record(n) for n in range(5)]
    assert sink.attempts == [_attempt(n) for n in range(5)]
    assert sink.hits == [_hit(n) for n in range(5)]
    assert settles == [_settle(n) for n in (0, 2, 4)]
    assert order == ["records", "settles"]
    assert name not in _journals(tmp_path)


def test_a_failed_settle_write_keeps_the_file_for_the_next_replay(tmp_path: Path) -> None:
    counts = Counts()
    journal = Journal(tmp_path, counts.marks())
    _keep(journal, counts, 7)
    journal.close()
    sink = Sink()
    written: list[Row] = []

    async def failing(rows: list[Row]) -> None:
        raise ConnectionRefusedError("database away")

    async def working(rows: list[Row]) -> None:
        written.extend(rows)

    spool = Spool(tmp_path)
    spool.write_settles = failing
    try:
        asyncio.run(spool.replay(sink))
    except ConnectionRefusedError:
        pass
    else:
        raise AssertionError("the failed settle write was not raised")
    assert len(_journals(tmp_path)) == 1
    spool.write_settles = working
    assert asyncio.run(spool.replay(sink)) is True
    assert written == [_settle(7)]
    assert sink.records == [_record(7), _record(7)]  # written twice: idempotent by request id
    assert _journals(tmp_path) == []


def test_a_journal_holds_its_files_locks_until_it_deletes_them(tmp_path: Path) -> None:
    counts = Counts()
    journal = Journal(tmp_path, counts.marks(), rotate_s=0.0)
    _keep(journal, counts, 1)
    journal.tidy()  # closed for appends, not durable: still locked
    [name] = _journals(tmp_path)
    fd = os.open(tmp_path / name, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass
        else:
            raise AssertionError("a closed journal file was not locked")
    finally:
        os.close(fd)
    counts.durable_records = counts.durable_settles = 1
    journal.close()
    assert _journals(tmp_path) == []


def _locked(path: Path) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


async def test_sort_out_hands_over_what_release_then_deletes_on_a_thread(tmp_path: Path) -> None:
    """The serving process decides on the loop and deletes on a thread (stack._tidy): a file
    handed over is the journal's no longer, yet still locked (no replayer takes it) until
    `release` has unlinked it."""
    counts = Counts()
    journal = Journal(tmp_path, counts.marks(), rotate_s=0.0)
    _keep(journal, counts, 1)
    assert journal.sort_out() == []  # closed for appends, not durable yet
    counts.durable_records = counts.durable_settles = 1
    done = journal.sort_out()
    [name] = _journals(tmp_path)
    assert [f.name for f in done] == [name]
    assert journal.sort_out() == []  # handed over once
    assert _locked(tmp_path / name)
    await asyncio.to_thread(release, tmp_path, done)
    assert _journals(tmp_path) == []
    journal.close()  # nothing left to release twice


def test_an_unwritable_directory_counts_failures_and_never_raises(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    counts = Counts()
    journal = Journal(blocked / "spool", counts.marks())
    _keep(journal, counts, 1)
    _keep(journal, counts, 2)
    assert journal.failures == 2


def test_a_long_outage_keeps_its_files_but_not_their_descriptors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("llmrelay.gateway.journal.MAX_LOCKED", 3)
    counts = Counts()
    journal = Journal(tmp_path, counts.marks(), rotate_s=0.0)
    for n in range(6):  # nothing durable: the settles wait for the database
        _keep(journal, counts, n)
        journal.tidy()
    names = _journals(tmp_path)
    assert len(names) == 6
    locked = []
    for name in names:
        fd = os.open(tmp_path / name, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            locked.append(False)
        except BlockingIOError:
            locked.append(True)
        finally:
            os.close(fd)
    assert locked.count(True) == 3 and locked.count(False) == 3
    counts.durable_records = counts.durable_settles = 6
    journal.close()
    assert _journals(tmp_path) == []
