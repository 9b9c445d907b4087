"""The monthly partitions of `request_records` on PostgreSQL: created ahead, dropped whole.

Since migration 0009 the table is PARTITION BY RANGE (created_at) on PostgreSQL: one
partition per calendar month in UTC, named request_records_YYYY_MM and holding
[first instant of the month, first instant of the next), and the DEFAULT partition
request_records_default, which takes any row no month covers, so an insert never fails for
want of a partition. SQLite has no partitions; every function here does nothing there.

Ahead: `ensure` creates the partitions of the current month and the next MONTHS_AHEAD when
missing (at `llmrelay migrate`, at start and then daily: `run`), so a month's partition exists
two months before its first record. Replicas take turns (a transaction-level advisory lock:
the later ones wait, then find nothing to do); CREATE TABLE IF NOT EXISTS keeps it idempotent.

The default partition should stay empty; rows land there only when a clock is far off (or a
record from a month whose partition retention already dropped is replayed late). PostgreSQL
refuses to create a partition for a range the default partition holds rows of, so `ensure`
moves them when it creates one: in one transaction, with the table locked, it deletes them
from the default partition into a temporary table, creates the partition and inserts them
back through the table, which routes them to the new partition. Either all of it commits or
none of it does, so no row is lost or doubled, and no insert can slip into the range in
between. (Detaching the default partition instead would leave such inserts nowhere to go.)
Rows left in the default partition (months outside the window) are logged as a warning each
round; retention deletes them like any other once they are older than the retention period.

Dropping: `drop_before` drops the monthly partitions wholly older than a cutoff, for
retention (store/retention.py): a DROP TABLE is instantaneous and leaves nothing to vacuum,
where deleting a month of rows would rewrite it.
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

log = structlog.get_logger(__name__)

TABLE = "request_records"
DEFAULT_PARTITION = f"{TABLE}_default"
#: Months created ahead of the current one.
MONTHS_AHEAD = 2
#: How often `run` makes sure the months ahead exist; after a failure it tries sooner.
INTERVAL_S = 86_400.0
RETRY_S = 600.0
#: The longest partition DDL waits for the table's lock before giving up until the next
#: round: DDL queued behind a long query would queue every insert behind itself.
LOCK_TIMEOUT = "5s"
_PG_PARTITION_LOCK = 7_211_960_130
_MONTHLY = re.compile(rf"^{TABLE}_(\d{{4}})_(\d{{2}})$")


def month_of(moment: datetime) -> datetime:
    """The first instant (UTC) of the month `moment` falls in."""
    return moment.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def add_months(month: datetime, count: int) -> datetime:
    index = month.year * 12 + month.month - 1 + count
    return month.replace(year=index // 12, month=index % 12 + 1)


def partition_name(month: datetime) -> str:
    return f"{TABLE}_{month.year:04d}_{month.month:02d}"


def month_of_partition(name: str) -> datetime | None:
    """The month a monthly partition holds, read from its name; None for any other name."""
    found = _MONTHLY.match(name)
    if found is None:
        return None
    return datetime(int(found[1]), int(found[2]), 1, tzinfo=UTC)


def is_partition(table_name: str) -> bool:
    """A partition of `request_records`: a table the models do not describe."""
    return table_name == DEFAULT_PARTITION or month_of_partition(table_name) is not None


def include_name(name: str | None, type_: str, parent_names: object) -> bool:
    """Alembic's `include_name` hook (migrations/env.py, tests/store/test_migrations.py):
    autogenerate leaves the partitions alone; it would otherwise propose dropping them."""
    return not (type_ == "table" and name is not None and is_partition(name))


async def partitions_of(conn: AsyncConnection) -> set[str] | None:
    """The names of the table's partitions; None when it is not partitioned."""
    partitioned = await conn.execute(
        text("SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass(:t)"),
        {"t": TABLE},
    )
    if partitioned.first() is None:
        return None
    rows = await conn.execute(
        text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = to_regclass(:t)"
        ),
        {"t": TABLE},
    )
    return {row[0] for row in rows}


async def ensure(engine: AsyncEngine, now: datetime | None = None) -> list[str]:
    """Create the partitions of the current month and the next MONTHS_AHEAD that are
    missing, moving any rows of theirs out of the default partition; the names created."""
    if engine.dialect.name != "postgresql":
        return []
    first = month_of(now or datetime.now(UTC))
    created: list[str] = []
    moved: dict[str, int] = {}
    async with engine.begin() as conn:
        await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_PARTITION_LOCK})
        existing = await partitions_of(conn)
        if existing is None:
            return []  # not partitioned: a database downgraded below 0009
        missing = [
            month
            for month in (add_months(first, n) for n in range(MONTHS_AHEAD + 1))
            if partition_name(month) not in existing
        ]
        if missing:
            # CREATE ... PARTITION OF takes this lock anyway; taken first, it comes before
            # the default partition's, the order inserts lock them in: no deadlock.
            await conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
            await conn.execute(text(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE"))
        for month in missing:
            name = partition_name(month)
            count = await _create(conn, month, DEFAULT_PARTITION in existing)
            created.append(name)
            if count:
                moved[name] = count
        stray = 0
        if DEFAULT_PARTITION in existing:
            result = await conn.execute(text(f"SELECT count(*) FROM {DEFAULT_PARTITION}"))
            stray = int(result.scalar_one())
    for name, count in moved.items():
        log.warning("records_moved_out_of_default_partition", partition=name, rows=count)
    if created:
        log.info("record_partitions_created", partitions=created)
    if stray:
        log.warning("records_in_default_partition", partition=DEFAULT_PARTITION, rows=stray)
    return created


async def _create(conn: AsyncConnection, month: datetime, has_default: bool) -> int:
    """Create one month's partition; the rows moved into it from the default partition."""
    bounds = {"lower": month, "upper": add_months(month, 1)}
    in_range = "created_at >= :lower AND created_at < :upper"
    stray = False
    if has_default:
        found = await conn.execute(
            text(f"SELECT 1 FROM {DEFAULT_PARTITION} WHERE {in_range} LIMIT 1"), bounds
        )
        stray = found.first() is not None
    if not stray:
        await conn.execute(text(_create_sql(month)))
        return 0
    await conn.execute(
        text(f"CREATE TEMP TABLE request_records_moving (LIKE {TABLE}) ON COMMIT DROP")
    )
    result = await conn.execute(
        text(
            f"WITH gone AS (DELETE FROM {DEFAULT_PARTITION} WHERE {in_range} RETURNING *)"
            " INSERT INTO request_records_moving SELECT * FROM gone"
        ),
        bounds,
    )
    await conn.execute(text(_create_sql(month)))
    await conn.execute(text(f"INSERT INTO {TABLE} SELECT * FROM request_records_moving"))
    await conn.execute(text("DROP TABLE request_records_moving"))
    return result.rowcount or 0


def _create_sql(month: datetime) -> str:
    lower, upper = month.isoformat(), add_months(month, 1).isoformat()
    return (
        f"CREATE TABLE IF NOT EXISTS {partition_name(month)} PARTITION OF {TABLE}"
        f" FOR VALUES FROM ('{lower}') TO ('{upper}')"
    )


async def drop_before(engine: AsyncEngine, cutoff: datetime) -> list[str]:
    """Drop the monthly partitions whose every row is older than `cutoff` (upper bound at or
    before it); the names dropped, oldest first. Each DROP is its own transaction and waits
    at most LOCK_TIMEOUT for the table; a timeout raises, and the next round tries again."""
    if engine.dialect.name != "postgresql":
        return []
    async with engine.connect() as conn:
        names = await partitions_of(conn) or set()
    months = {name: month_of_partition(name) for name in names}
    doomed = sorted(
        name
        for name, month in months.items()
        if month is not None and add_months(month, 1) <= cutoff
    )
    dropped: list[str] = []
    for name in doomed:
        async with engine.begin() as conn:
            await conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
            await conn.execute(text(f"DROP TABLE {name}"))
        dropped.append(name)
    return dropped


async def run(engine: AsyncEngine, interval_s: float = INTERVAL_S) -> None:
    """`ensure` now, then every `interval_s` (RETRY_S after a failure), until cancelled;
    returns at once on SQLite."""
    if engine.dialect.name != "postgresql":
        return
    while True:
        try:
            await ensure(engine)
            pause = interval_s
        except Exception as exc:  # noqa: BLE001 - a database hiccup must not end the task
            log.warning("record_partitions_failed", error=str(exc))
            pause = min(interval_s, RETRY_S)
        await asyncio.sleep(pause)
