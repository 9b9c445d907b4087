"""Driver-level multi-row INSERTs for the rows a wallet lease's round writes per request (a
reservation row and a ledger entry each: lease_store.settle_open, lease_store.append).

Through SQLAlchemy Core each row costs its parameter dictionary, the compiled statement's
parameter construction and a bind processor per value (about 35 µs of interpreted CPU per
settle in all, measured in-process: most of what a prepaid request cost above an unbilled
one). Here the statement is compiled once per dialect and shape, the values are tuples in
its column order, and the two timestamps of a round are converted once for all its rows
(the column type's own bind processor, so the stored form is the one SQLAlchemy writes and
reads). Rows go in statements of a power of two rows, at most CHUNK_ROWS (well under
SQLite's and asyncpg's limits on parameters): a round of 37 rows is three statements of 32, 4
and 1. So there are nine statement texts per table, each parsed once and then found in the
driver's statement cache (sqlite3's, asyncpg's prepared statements); a text per row count
missed those caches, and SQLite parsed a statement of up to 256 rows for every round.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import chain
from typing import Any, Final

from sqlalchemy import Table
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection

CHUNK_ROWS: Final = 256
_NUMBERED: Final = re.compile(r"\$(\d+)")
#: One row's placeholders (their casts have no parentheses in these tables).
_GROUP: Final = re.compile(r"\([^()]*\)")

Row = tuple[Any, ...]


class MultiRowInsert:
    """`INSERT INTO table (columns) VALUES (...), (...) <suffix>` for one dialect."""

    def __init__(
        self, table: Table, columns: Sequence[str], dialect: Dialect, suffix: str = ""
    ) -> None:
        compiled = table.insert().compile(dialect=dialect, column_keys=list(columns))
        assert tuple(compiled.positiontup or ()) == tuple(columns), compiled.positiontup
        head, _, values = str(compiled).partition(" VALUES ")
        group = _GROUP.match(values)
        # What may follow the group: PostgreSQL's implicit RETURNING of the primary key
        # (not wanted: `suffix` says what is returned).
        assert group is not None, values
        rest = values[group.end() :]
        assert not rest or rest.startswith(" RETURNING "), values
        self._head = head + " VALUES "
        self._group = group.group()  # "(?, ?, ...)" or "($1::VARCHAR, $2::BIGINT, ...)"
        self._suffix = suffix
        self._width = len(columns)
        self._numbered = dialect.paramstyle == "numeric_dollar"
        self._sql: dict[int, str] = {}

    def sql(self, rows: int) -> str:
        found = self._sql.get(rows)
        if found is None:
            groups = [self._group_at(n * self._width) for n in range(rows)]
            found = self._sql[rows] = self._head + ", ".join(groups) + self._suffix
        return found

    def _group_at(self, offset: int) -> str:
        if not self._numbered or not offset:
            return self._group
        return _NUMBERED.sub(lambda m: f"${int(m.group(1)) + offset}", self._group)

    async def run(self, conn: AsyncConnection, rows: Sequence[Row]) -> list[Any]:
        """Insert `rows` (tuples in column order); the first column of what RETURNING gave,
        if the suffix asks for it."""
        returned: list[Any] = []
        start = 0
        for size in chunk_sizes(len(rows)):
            chunk = rows[start : start + size]
            start += size
            result = await conn.exec_driver_sql(self.sql(size), tuple(chain.from_iterable(chunk)))
            if result.returns_rows:
                returned += result.scalars().all()
        return returned


def chunk_sizes(rows: int) -> list[int]:
    """`rows` as statement sizes, each a power of two up to CHUNK_ROWS, largest first."""
    sizes = [CHUNK_ROWS] * (rows // CHUNK_ROWS)
    rest = rows % CHUNK_ROWS
    size = CHUNK_ROWS
    while rest:
        size //= 2
        if rest & size:
            sizes.append(size)
            rest -= size
    return sizes


_CACHE: Final[dict[tuple[str, str, str], MultiRowInsert]] = {}


def insert_for(
    conn: AsyncConnection, table: Table, columns: Sequence[str], suffix: str = ""
) -> MultiRowInsert:
    """The statement for this connection's dialect, made once."""
    dialect = conn.dialect
    key = (dialect.name, table.name, suffix)
    found = _CACHE.get(key)
    if found is None:
        found = _CACHE[key] = MultiRowInsert(table, columns, dialect, suffix)
    return found


def bind_time(conn: AsyncConnection, table: Table, column: str, value: Any) -> Any:
    """`value` as the column's type writes it on this connection's database."""
    dialect = conn.dialect
    processor = table.c[column].type.dialect_impl(dialect).bind_processor(dialect)
    return value if processor is None else processor(value)
