"""request records partitioned by month on PostgreSQL (SQLite: nothing changes)

`request_records` becomes PARTITION BY RANGE (created_at): one partition per calendar month
in UTC, request_records_YYYY_MM, and the DEFAULT partition request_records_default, which
takes any row no month covers, so an insert never fails for want of a partition. Retention
then drops whole months (DROP TABLE: instantaneous, nothing left to vacuum) instead of
deleting rows (store/retention.py), and store/partitions.py creates the months ahead. The
naming and bounds here are the ones store/partitions.py uses; this file keeps its own copy so
that it replays the same way whatever that module becomes.

Upgrade, in the one transaction `llmrelay migrate` runs the revisions in. Writes to the table
wait (EXCLUSIVE lock; reads go on until the swap at the end). A partitioned table is created
under a working name with the same columns, in the same order, with the same defaults and
NOT NULLs (LIKE ... INCLUDING ALL EXCLUDING INDEXES), whatever revisions before this one
added. It gets a partition for every month that has rows (found by one index probe per month,
not a scan), for the current month and the next two, and the default partition. Every row is
copied, ids included. The id sequence is handed to the new table (OWNED BY) and goes on from
where it was, so new ids keep increasing past the old ones. The old table is dropped, the new
one takes its name, and the keys and indexes are built on it: the old table's plain indexes
from their own definitions, as partitioned indexes (one per partition, under the parent's
name), and the planner's statistics gathered (ANALYZE samples; it does not scan).

Keys. PostgreSQL requires every unique constraint of a partitioned table to include the
partition key: the primary key becomes (id, created_at), and request ids are unique together
with their created_at, (request_id, created_at). Inserts stay idempotent: the recorder inserts
with ON CONFLICT (request_id, created_at) DO NOTHING on PostgreSQL (gateway/record_writers.py),
and a batch written again, whether retried or replayed from the local spool after an outage,
carries the same request ids and the same created_at: created_at is the record's own time,
taken when the request began and spooled with the row, not the time of the insert. So the
conflict is found and nothing is duplicated. What the new key no longer rejects is two
different requests sharing a request id (a client may send its own X-Request-Id) at different
times: both are kept now, where the second used to be dropped silently. `id` stays unique in
practice (one sequence).

Downgrade: the same copy the other way, to a plain table with the keys of 0001. It refuses,
changing nothing, when a request id occurs more than once: the old unique key could not hold
both rows, and no row may be lost.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from collections.abc import Sequence
from datetime import UTC, datetime

from alembic import op
from sqlalchemy import Connection, text

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "request_records"
DEFAULT_PARTITION = "request_records_default"
MONTHS_AHEAD = 2
_PARTITIONED = "request_records_partitioned"  # the upgrade's working name
_PLAIN = "request_records_plain"  # the downgrade's


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    op.execute(f"LOCK TABLE {TABLE} IN EXCLUSIVE MODE")
    sequence = _id_sequence(bind)
    indexes = _plain_indexes(bind)
    op.execute(
        f"CREATE TABLE {_PARTITIONED} (LIKE {TABLE} INCLUDING ALL EXCLUDING INDEXES)"
        " PARTITION BY RANGE (created_at)"
    )
    this_month = _month_of(datetime.now(UTC))
    ahead = {_add_months(this_month, n) for n in range(MONTHS_AHEAD + 1)}
    for month in sorted(_months_with_rows(bind) | ahead):
        lower, upper = month.isoformat(), _add_months(month, 1).isoformat()
        op.execute(
            f"CREATE TABLE {TABLE}_{month.year:04d}_{month.month:02d} PARTITION OF"
            f" {_PARTITIONED} FOR VALUES FROM ('{lower}') TO ('{upper}')"
        )
    op.execute(f"CREATE TABLE {DEFAULT_PARTITION} PARTITION OF {_PARTITIONED} DEFAULT")
    op.execute(f"INSERT INTO {_PARTITIONED} SELECT * FROM {TABLE}")
    _take_name(_PARTITIONED, sequence)
    op.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT pk_{TABLE} PRIMARY KEY (id, created_at)")
    op.execute(
        f"ALTER TABLE {TABLE} ADD CONSTRAINT uq_{TABLE}_request_id_created_at"
        " UNIQUE (request_id, created_at)"
    )
    for definition in indexes:
        op.execute(definition)
    op.execute(f"ANALYZE {TABLE}")  # a sample: the planner's statistics for the new tables


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    op.execute(f"LOCK TABLE {TABLE} IN EXCLUSIVE MODE")  # and every partition
    repeated = bind.execute(
        text(
            f"SELECT request_id FROM {TABLE} GROUP BY request_id HAVING count(*) > 1"
            " ORDER BY request_id LIMIT 5"
        )
    ).all()
    if repeated:
        raise RuntimeError(
            "cannot downgrade below 0009: request ids occur more than once in request_records"
            f" (for instance {', '.join(row[0] for row in repeated)}), and the unique key on"
            " request_id alone could not keep every row"
        )
    sequence = _id_sequence(bind)
    # A partitioned index's definition says ON ONLY (do not recurse): meaningless here.
    indexes = [d.replace(" ON ONLY ", " ON ", 1) for d in _plain_indexes(bind)]
    op.execute(f"CREATE TABLE {_PLAIN} (LIKE {TABLE} INCLUDING ALL EXCLUDING INDEXES)")
    op.execute(f"INSERT INTO {_PLAIN} SELECT * FROM {TABLE}")
    _take_name(_PLAIN, sequence)  # dropping the partitioned table drops its partitions
    op.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT pk_{TABLE} PRIMARY KEY (id)")
    op.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT uq_{TABLE}_request_id UNIQUE (request_id)")
    for definition in indexes:
        op.execute(definition)
    op.execute(f"ANALYZE {TABLE}")


def _take_name(replacement: str, sequence: str) -> None:
    """The filled-in `replacement` becomes `request_records`: the id sequence moves to it
    (else dropping the old table would drop the sequence), the old table goes."""
    op.execute(f"ALTER SEQUENCE {sequence} OWNED BY {replacement}.id")
    op.execute(f"DROP TABLE {TABLE}")
    op.execute(f"ALTER TABLE {replacement} RENAME TO {TABLE}")


def _id_sequence(bind: Connection) -> str:
    sequence = bind.execute(text(f"SELECT pg_get_serial_sequence('{TABLE}', 'id')")).scalar()
    if not sequence:
        raise RuntimeError(f"{TABLE}.id has no sequence of its own")
    return str(sequence)


def _plain_indexes(bind: Connection) -> list[str]:
    """CREATE INDEX statements of the table's indexes that back no constraint (the primary
    and unique keys are rebuilt with their new columns)."""
    rows = bind.execute(
        text(
            "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i"
            f" WHERE i.indrelid = '{TABLE}'::regclass AND NOT EXISTS"
            " (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)"
            " ORDER BY 1"
        )
    )
    return [row[0] for row in rows]


def _months_with_rows(bind: Connection) -> set[datetime]:
    """Every month some row falls in: the earliest row, then the earliest row past its
    month, and so on (each an index probe on created_at)."""
    months: set[datetime] = set()
    earliest = bind.execute(text(f"SELECT min(created_at) FROM {TABLE}")).scalar()
    after = text(f"SELECT min(created_at) FROM {TABLE} WHERE created_at >= :since")
    while earliest is not None:
        month = _month_of(earliest)
        months.add(month)
        earliest = bind.execute(after, {"since": _add_months(month, 1)}).scalar()
    return months


def _month_of(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def _add_months(month: datetime, count: int) -> datetime:
    index = month.year * 12 + month.month - 1 + count
    return month.replace(year=index // 12, month=index % 12 + 1)
