"""The local spool of request records: real files, real locks, a real write function."""

from __future__ import annotations

import fcntl
import math
import os
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from llmrelay.gateway.spool import Row, Spool


class Sink:
    """Collects what replay writes; fails while `failing` is set."""

    def __init__(self) -> None:
        self.records: list[Row] = []
        self.attempts: list[Row] = []
        self.payloads: list[Row] = []
        self.hits: list[Row] = []
        self.calls = 0
        self.failing = False

    async def __call__(
        self, records: list[Row], attempts: list[Row], payloads: list[Row], hits: list[Row]
    ) -> None:
        self.calls += 1
        if self.failing:
            raise ConnectionRefusedError("database away")
        self.records += records
        self.attempts += attempts
        self.payloads += payloads
        self.hits += hits


def _files(spool: Spool) -> list[str]:
    return _listing(spool.directory)


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def _same(got: list[Row], want: list[Row]) -> None:
    """Equal, value by value and type by type (1 is not 1.0, True is not 1)."""
    assert got == want
    for got_row, want_row in zip(got, want, strict=True):
        assert [type(v) for v in got_row] == [type(v) for v in want_row], got_row


ROWS: list[Row] = [
    ("req-1", 1_733_000_000.123456, None, True, False, 0, 0.0, 1.0, "plain"),
    ("req-2", 1_733_000_001.5, "tenant", False, None, 2**53 + 1, 0.1, 1e-300, 'é 漢字 🎉 \n"q"'),
    ("req-3", 1_733_000_002.0, "", None, True, -7, -2.5e10, math.pi, "\u2028\x00"),
]
ATTEMPTS: list[Row] = [
    (
        "req-2",
        1,
        1_733_000_001.25,
        None,
        "up",
        "m",
        "first",
        503,
        "err",
        3.5,
        None,
        None,
        None,
        "resource-1",
    ),
    ("req-2", 2, 1_733_000_002.5, None, "up", "m", "fallback", 200, "ok", 1.5, 7, 2, 15, None),
]


async def test_rows_round_trip_exactly_and_files_go_once_written(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool", record_columns=[str(i) for i in range(9)])
    spool.append(ROWS[:2], ATTEMPTS)
    spool.append(ROWS[2:], [])
    assert len(_files(spool)) == 1
    spool.rotate()
    later: list[Row] = [(f"req-{i}", 1.0, None, True, None, i, 0.5, 2.0, "x") for i in range(4, 7)]
    spool.append(later, [])
    assert len(_files(spool)) == 2
    assert spool.pending_rows == 3 + 3 + len(ATTEMPTS)
    assert spool.size_bytes == sum(p.stat().st_size for p in spool.directory.iterdir())

    sink = Sink()
    assert await spool.replay(sink) is True
    _same(sorted(sink.records), sorted(ROWS + later))
    _same(sink.attempts, ATTEMPTS)
    assert _files(spool) == []
    assert (spool.pending_rows, spool.size_bytes) == (0, 0)

    spool.append(ROWS[:1], [])  # our current file was replayed: appends begin another
    assert len(_files(spool)) == 1 and spool.pending_rows == 1


async def test_replay_hands_over_chunks(tmp_path: Path) -> None:
    spool = Spool(tmp_path, chunk_rows=3, record_columns=["id"], attempt_columns=["id"])
    spool.append([(f"r{i}",) for i in range(10)], [("a0",), ("a1",)])
    sink = Sink()
    await spool.replay(sink)
    assert sink.calls == 4
    assert len(sink.records) == 10 and len(sink.attempts) == 2


async def test_a_file_locked_by_a_live_writer_is_left_alone(tmp_path: Path) -> None:
    """flock locks belong to an open file description: a second open() of the same file,
    even in this process, conflicts exactly as another process's would."""
    spool = Spool(tmp_path, record_columns=["id"])
    spool.append([("mine",)], [])
    spool.rotate()
    theirs = tmp_path / "records-999999-1.jsonl"
    theirs.write_bytes(b'{"records":["id"],"attempts":[]}\n["r",["theirs"]]\n')
    holder = os.open(theirs, os.O_RDONLY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        sink = Sink()
        assert await spool.replay(sink) is True
        assert sink.records == [("mine",)]
        assert _listing(tmp_path) == [theirs.name]
    finally:
        os.close(holder)  # the writer is gone: its file is anyone's to replay
    sink = Sink()
    await spool.replay(sink)
    assert sink.records == [("theirs",)]
    assert _listing(tmp_path) == []


async def test_our_current_file_is_closed_and_replayed_not_skipped(tmp_path: Path) -> None:
    spool = Spool(tmp_path, record_columns=["id"])
    spool.append([("a",)], [])
    first = _files(spool)
    sink = Sink()
    await spool.replay(sink)
    assert sink.records == [("a",)]
    spool.append([("b",)], [])
    assert _files(spool) != first  # the next file, not the deleted one reopened


async def test_a_line_cut_short_by_a_crash_is_skipped(tmp_path: Path) -> None:
    spool = Spool(tmp_path, record_columns=["id", "n"])
    spool.append([("a", 1), ("b", 2), ("c", 3)], [])
    spool.rotate()
    (name,) = _listing(tmp_path)
    path = tmp_path / name
    path.write_bytes(path.read_bytes()[:-5])  # the last line loses its end
    sink = Sink()
    with capture_logs() as logs:
        assert await spool.replay(sink) is True
    assert sink.records == [("a", 1), ("b", 2)]
    assert [(e["event"], e["skipped"]) for e in logs if e["log_level"] == "warning"] == [
        ("record_spool_corrupt_lines", 1)
    ]
    assert _listing(tmp_path) == []


async def test_a_failed_replay_keeps_the_file_for_the_next(tmp_path: Path) -> None:
    spool = Spool(tmp_path, chunk_rows=2, record_columns=["id"])
    spool.append([("a",), ("b",), ("c",)], [])
    sink = Sink()
    sink.failing = True
    with pytest.raises(ConnectionRefusedError):
        await spool.replay(sink)
    assert len(_listing(tmp_path)) == 1 and spool.pending_rows == 3
    sink.failing = False
    assert await spool.replay(sink) is True
    assert sink.records == [("a",), ("b",), ("c",)]
    assert _listing(tmp_path) == [] and spool.pending_rows == 0


async def test_max_files_replays_one_file_per_call(tmp_path: Path) -> None:
    spool = Spool(tmp_path, record_columns=["id"])
    for name in ("a", "b"):
        spool.append([(name,)], [])
        spool.rotate()
    sink = Sink()
    assert await spool.replay(sink, max_files=1) is False
    assert await spool.replay(sink, max_files=1) is True
    assert sorted(sink.records) == [("a",), ("b",)]


async def test_a_file_of_an_older_version_is_read_by_column_name(tmp_path: Path) -> None:
    older = Spool(tmp_path, record_columns=["id", "old", "n"])
    older.append([("a", "gone", 1)], [])
    older.close()
    newer = Spool(tmp_path, record_columns=["n", "id", "added"])
    sink = Sink()
    await newer.replay(sink)
    assert sink.records == [(1, "a", None)]


async def test_an_earlier_process_with_our_pid_keeps_its_file(tmp_path: Path) -> None:
    """Containers restart with the same pid: its leftover file is not appended to."""
    leftover = tmp_path / f"records-{os.getpid()}-1.jsonl"
    leftover.write_bytes(b'["r",["old"]]\n')
    spool = Spool(tmp_path, record_columns=["id"])
    spool.append([("new",)], [])
    assert leftover.read_bytes() == b'["r",["old"]]\n'
    sink = Sink()
    await spool.replay(sink)
    assert sorted(sink.records) == [("new",), ("old",)]


async def test_nothing_to_replay_without_a_directory(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "never-created")
    assert await spool.replay(Sink()) is True
    assert not spool.directory.exists()


def test_a_big_file_is_closed_and_the_next_begun(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_file_bytes=200, record_columns=["id"])
    rows: list[Any] = [("x" * 50,)] * 3
    spool.append(rows, [])
    spool.append(rows, [])
    assert len(_listing(tmp_path)) == 2


PAYLOADS: list[Row] = [
    # bodies as bytes, one not UTF-8 at all, one cut inside a character; sizes and flags
    ("req-1", 1_733_000_000.5, b'{"model":"m"}', b"\xff\xfe\x00binary", False, False, 13, 9),
    ("req-2", 1_733_000_001.0, "é".encode()[:1], None, True, False, 2_000_000, None),
    ("req-3", 1_733_000_002.0, None, b"", False, False, None, 0),
]


async def test_payload_rows_round_trip_byte_for_byte(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append([], [], PAYLOADS[:2])
    spool.append([], [], PAYLOADS[2:])
    assert spool.pending_rows == 3
    (name,) = _listing(tmp_path)
    path = tmp_path / name
    text = path.read_bytes()
    assert b'"payloads":["request_id"' in text and b'{"b64":' in text

    sink = Sink()
    assert await spool.replay(sink) is True
    _same(sink.payloads, PAYLOADS)
    assert sink.records == [] and sink.attempts == []
    assert _listing(tmp_path) == [] and spool.pending_rows == 0


async def test_guardrail_hit_rows_round_trip(tmp_path: Path) -> None:
    hits: list[Row] = [
        ("req-1", 0, 1_733_000_000.5, "t", "p", "k", "pol", "pii", "pii", "email", "mask",
         "request", "messages[0].content", 2, 31),
        ("req-1", 1, 1_733_000_000.5, None, None, None, "pol", "pii", "pii", "card", "block",
         "response", "choices[0].message.content", 1, 19),
    ]  # fmt: skip
    spool = Spool(tmp_path)
    spool.append([("req-1",)], [], [], hits)
    (name,) = _listing(tmp_path)
    assert b'"hits":["request_id","seq"' in (tmp_path / name).read_bytes()
    sink = Sink()
    assert await spool.replay(sink) is True
    _same(sink.hits, hits)


async def test_a_file_written_before_payloads_existed_still_replays(tmp_path: Path) -> None:
    older = tmp_path / "records-999999-1.jsonl"
    older.write_bytes(b'{"records":["id"],"attempts":["id"]}\n["r",["old"]]\n["a",["try"]]\n')
    sink = Sink()
    await Spool(tmp_path, record_columns=["id"], attempt_columns=["id"]).replay(sink)
    assert (sink.records, sink.attempts, sink.payloads) == ([("old",)], [("try",)], [])
    assert sink.hits == []


async def test_a_payload_line_that_cannot_be_decoded_is_skipped_not_fatal(tmp_path: Path) -> None:
    spool = Spool(tmp_path, record_columns=["id"])
    spool.append([("kept",)], [], PAYLOADS[:1])
    spool.rotate()
    (name,) = _listing(tmp_path)
    path = tmp_path / name
    path.write_bytes(path.read_bytes().replace(b'{"b64":"', b'{"b64":"%', 1))
    sink = Sink()
    with capture_logs():
        assert await spool.replay(sink) is True
    assert sink.records == [("kept",)] and sink.payloads == []
