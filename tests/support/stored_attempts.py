"""A request's record and its attempt rows from a SQLite gateway's database, once the record
is written (records are written in batches after the answer: the test waits for the row,
not for a fixed time)."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

#: The attempt columns most tests compare: which try, why, how it ended, and where it went.
ATTEMPT_COLUMNS = "attempt, kind, status_code, outcome, provider"
#: The record columns the routing and rescue tests compare.
RECORD_COLUMNS = "status_code, error_code, input_tokens, output_tokens"


def stored_attempts(
    database_url: str,
    request_id: str,
    *,
    record_columns: str = RECORD_COLUMNS,
    timeout_s: float = 30,
) -> tuple[Any, list[tuple[Any, ...]]]:
    """(the record's `record_columns`, or None if it was not written within `timeout_s`;
    the attempt rows' ATTEMPT_COLUMNS in order)."""
    path = database_url.removeprefix("sqlite:///")
    deadline = time.monotonic() + timeout_s
    while True:
        with sqlite3.connect(path) as conn:
            record = conn.execute(
                f"SELECT {record_columns} FROM request_records WHERE request_id = ?",
                (request_id,),
            ).fetchone()
            attempts = conn.execute(
                f"SELECT {ATTEMPT_COLUMNS} FROM request_attempts"
                " WHERE request_id = ? ORDER BY attempt",
                (request_id,),
            ).fetchall()
        conn.close()
        if record is not None or time.monotonic() > deadline:
            return record, [tuple(a) for a in attempts]
        time.sleep(0.1)
