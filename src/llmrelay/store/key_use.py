"""API keys' `last_used_at`, kept from the request records without a write per request.

The recorder hands each batch of records it wrote to `KeyUse.statements`, which finds the
newest record of each key in it and returns one UPDATE per key, run in a transaction of its
own after the records' commit. The UPDATE only moves the time forward (`WHERE last_used_at
IS NULL OR last_used_at < :at`), so batches written out of order (a spool replayed after an
outage, two replicas) can never move it back. It is best effort: a failed write keeps its
times for the next batch, and a record batch is never retried or spooled because of it.

`last_used_at` is the start of the key's newest recorded request, so it trails real use by
the recorder's batching (a fraction of a second) plus the request's own length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import BindParameter, bindparam, column, or_, table, update
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.store.models import ApiKey

Statement = tuple[str, Any]

#: PostgreSQL: how long the UPDATE waits for a key row an admin transaction holds before it
#: gives up (the times wait for the next batch) rather than delay or deadlock that change.
_PG_LOCK_TIMEOUT = "SET LOCAL lock_timeout = '200ms'"


class KeyUse:
    """Per-key times still to write, and the SQL that writes them.

    `key_at` and `time_at` are the positions of the key id and the created-at Unix timestamp
    in a record row; `convert_time` turns a timestamp into the database's form (the
    recorder's, so SQLite stores the text the ORM reads back)."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        key_at: int,
        time_at: int,
        convert_time: Callable[[float], Any],
    ) -> None:
        # The bare table, without the model's `updated_at` on-update: a key's use is not a
        # change to it (nor is its version moved: no admin's If-Match goes stale by it).
        keys = table(ApiKey.__tablename__, column("id"), column("last_used_at"))
        at: BindParameter[Any] = bindparam("at")
        statement = (
            update(keys)
            .where(
                keys.c.id == bindparam("key_id"),
                or_(keys.c.last_used_at.is_(None), keys.c.last_used_at < at),
            )
            .values(last_used_at=at)
        )
        compiled = statement.compile(dialect=engine.dialect)
        self.sql = str(compiled)
        self._order = tuple(compiled.positiontup or ())
        self._postgres = engine.dialect.name == "postgresql"
        self._key_at, self._time_at = key_at, time_at
        self._convert = convert_time
        #: key id -> the newest created-at not yet written (a failed write leaves them here).
        self.pending: dict[str, float] = {}

    def note(self, rows: Sequence[Sequence[Any]]) -> None:
        """Take the newest record time of each key in `rows` (a part of a batch: the recorder
        notes a batch piece by piece as it writes it, never all at once on the event loop)."""
        newest: dict[Any, float] = self.pending
        key_at, time_at = self._key_at, self._time_at
        for row in rows:
            key, at = row[key_at], row[time_at]
            if at > newest.get(key, 0.0):
                newest[key] = at

    def statements(self, batch: Sequence[Sequence[Any]] = ()) -> list[Statement]:
        """Note `batch`; the UPDATEs for every key with a time to write, in key order (two
        replicas lock the rows in the same order)."""
        self.note(batch)
        newest: dict[Any, float] = self.pending
        newest.pop(None, None)  # records of requests no key was found for
        if not newest:
            return []
        params = [self._params(key, newest[key]) for key in sorted(newest)]
        if self._postgres:
            return [(_PG_LOCK_TIMEOUT, None), (self.sql, params)]
        return [(self.sql, one) for one in params]

    def written(self) -> None:
        """The last `statements` were committed."""
        self.pending = {}

    def _params(self, key: str, at: float) -> tuple[Any, ...]:
        values = {"key_id": key, "at": self._convert(at)}
        return tuple(values[name] for name in self._order)
