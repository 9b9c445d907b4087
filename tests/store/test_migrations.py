"""Migrations build the schema the models describe, on SQLite and PostgreSQL."""

from datetime import UTC, datetime, timedelta

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, UniqueConstraint, inspect, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.store import migrate, partitions
from llmrelay.store.db import create_engine
from llmrelay.store.models import Base

#: The differences partitioning request_records on PostgreSQL (0009) makes on purpose: a
#: partitioned table's unique keys must include the partition key, so there request ids are
#: unique together with created_at, where the model has SQLite's key, request_id alone.
#: (The primary key is (id, created_at) there too; autogenerate does not compare primary keys.)
#: The partitions themselves are left out by the same hook as in migrations/env.py.
_PARTITIONED_UNIQUE_KEY = {
    ("remove_constraint", ("request_id", "created_at")),
    ("add_constraint", ("request_id",)),
}


def _diff(connection: Connection) -> list[object]:
    context = MigrationContext.configure(
        connection, opts={"compare_type": True, "include_name": partitions.include_name}
    )
    found = list(compare_metadata(context, Base.metadata))
    # Revisions before 0010 still have two record indexes the models no longer declare
    # (test_fewer_record_indexes_at_head checks that 0010 drops them).
    found = [d for d in found if _dropped_index(d) not in _DROPPED_IN_0010]
    if _is_partitioned(connection):
        found = [d for d in found if _key_of(d) not in _PARTITIONED_UNIQUE_KEY]
    return found


_DROPPED_IN_0010 = {
    "ix_request_records_key_id_created_at",
    "ix_request_records_virtual_model_created_at",
}


#: What revisions after 0010 add: a database stopped at an earlier revision lacks them, and
#: only them, compared with the models (0011 console identity and audit, 0012 resource versions,
#: 0013 durable jobs, 0014 billing and mail, 0015 guardrails, 0016 key predecessors, 0017 key
#: scopes, 0018 disputes and card refunds, 0019 model affinity, 0020 provider declared_by, 0021
#: temporary passwords, 0022 shared entries, 0023 stream rescue, 0024 passkeys, 0025 attempt
#: costs, 0026 codex accounts, 0027 limit counters, 0028 provider resources, 0029 wallet
#: leases, 0030 codex accounts as resources).
_TABLES_ADDED_AFTER_0010 = {
    "users",
    "memberships",
    "console_sessions",
    "recovery_codes",
    "login_failures",
    "audit_log",
    "jobs",
    "provider_health",
    "webhook_deliveries",
    "wallets",
    "ledger_entries",
    "reservations",
    "payment_orders",
    "stripe_events",
    "email_outbox",
    "account_tokens",
    "guardrail_policies",
    "guardrail_bindings",
    "guardrail_hits",
    "disputes",
    "card_refunds",
    "shared_entries",
    "passkeys",
    "passkey_challenges",
    "codex_accounts",
    "limit_windows",
    "limit_leases",
    "limit_spend",
    "limit_replicas",
    "provider_resources",
    "wallet_leases",
}
_COLUMNS_ADDED_AFTER_0010 = {
    ("tenants", "require_2fa"),
    ("tenants", "version"),
    ("providers", "model_inventory"),
    ("projects", "webhook_secret_sealed"),
    ("tenants", "preferences"),
    ("users", "pending"),
    ("users", "email_verified_at"),
    ("api_keys", "rotated_from_id"),
    ("api_keys", "scopes"),
    ("payment_orders", "refunded_micros"),
    ("payment_orders", "disputed_micros"),
    ("virtual_models", "affinity_enabled"),
    ("virtual_models", "affinity_ttl_s"),
    ("virtual_models", "stream_rescue"),
    ("request_attempts", "input_tokens"),
    ("request_attempts", "output_tokens"),
    ("request_attempts", "cost_micros"),
    ("providers", "declared_by"),
    ("users", "password_change_required"),
    ("request_records", "resource_id"),
    ("request_attempts", "resource_id"),
    ("usage_rollups", "resource_id"),
    ("reservations", "lease_id"),
    *(
        (table, "version")
        for table in (
            "routing_policies",
            "projects",
            "api_keys",
            "providers",
            "virtual_models",
            "routes",
        )
    ),
}


#: ... and indexes and foreign keys on older tables.
_CONSTRAINTS_ADDED_AFTER_0010 = {
    "ix_api_keys_rotated_from_id",
    "fk_api_keys_rotated_from_id_api_keys",
}


#: Unique keys that changed after 0010 (0024: the rollups' key gained `resource_id`).
_UNIQUE_KEYS_CHANGED_AFTER_0010 = {"uq_usage_rollups_dimensions"}


def _added_after_0010(difference: object) -> bool:
    if not isinstance(difference, tuple):
        return False
    if (
        difference[0] in ("add_constraint", "remove_constraint")
        and str(difference[1].name) in _UNIQUE_KEYS_CHANGED_AFTER_0010
    ):
        return True
    if difference[0] == "add_table":
        return str(difference[1].name) in _TABLES_ADDED_AFTER_0010
    if (
        difference[0] in ("add_index", "add_fk")
        and str(difference[1].name) in _CONSTRAINTS_ADDED_AFTER_0010
    ):
        return True
    if difference[0] == "add_index":
        return str(difference[1].table.name) in _TABLES_ADDED_AFTER_0010
    if difference[0] == "add_column":
        return (difference[2], difference[3].name) in _COLUMNS_ADDED_AFTER_0010
    return False


def _diff_before_0011(connection: Connection) -> list[object]:
    """_diff for a database stopped at 0010 or earlier."""
    return [d for d in _diff(connection) if not _added_after_0010(d)]


def _dropped_index(difference: object) -> str | None:
    if isinstance(difference, tuple) and len(difference) == 2 and difference[0] == "remove_index":
        return str(difference[1].name)
    return None


async def test_fewer_record_indexes_at_head(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        names = await conn.run_sync(
            lambda sync: {ix["name"] for ix in inspect(sync).get_indexes("request_records")}
        )
    assert not names & _DROPPED_IN_0010
    assert "ix_request_records_project_id_created_at" in names


def _is_partitioned(connection: Connection) -> bool:
    if connection.dialect.name != "postgresql":
        return False
    query = "SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass('request_records')"
    return connection.execute(text(query)).first() is not None


def _key_of(difference: object) -> tuple[str, tuple[str, ...]] | None:
    if not isinstance(difference, tuple) or len(difference) != 2:
        return None
    kind, constraint = difference
    if not isinstance(constraint, UniqueConstraint) or constraint.table.name != "request_records":
        return None
    return kind, tuple(column.name for column in constraint.columns)


async def test_upgrade_from_empty_matches_the_models(engine: AsyncEngine) -> None:
    assert await migrate.is_up_to_date(engine)
    async with engine.connect() as conn:
        assert await conn.run_sync(_diff) == []


async def test_upgrade_twice_is_harmless(engine: AsyncEngine) -> None:
    await migrate.upgrade(engine)
    assert await migrate.current_revision(engine) == migrate.head_revision()
    assert not await migrate.upgrade_if_needed(engine)


def test_the_head_constant_names_the_newest_revision_file() -> None:
    assert migrate.head_revision() == migrate.HEAD_REVISION


async def test_an_empty_database_is_not_up_to_date(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        assert await migrate.current_revision(engine) is None
        assert not await migrate.is_up_to_date(engine)
        assert await migrate.upgrade_if_needed(engine)
        assert await migrate.is_up_to_date(engine)
    finally:
        await engine.dispose()


async def _to(engine: AsyncEngine, revision: str, *, down: bool = False) -> None:
    from alembic import command

    def run(connection: Connection) -> None:
        config = migrate.alembic_config(connection)
        (command.downgrade if down else command.upgrade)(config, revision)

    async with engine.begin() as conn:
        await conn.run_sync(run)


async def test_policy_bindings_come_and_go_without_losing_keys(database_url: str) -> None:
    """0002 adds columns to `projects`, `api_keys` and `providers` (foreign keys on the first
    two). On SQLite a table copy (how SQLite adds a constraint or drops a column in batch
    mode) drops the old table, and with foreign keys enforced that deletes every key of a
    project or route of a provider (ON DELETE CASCADE): neither direction may copy them. 0003
    adds columns to `routes`, the same way."""
    engine = create_engine(database_url)
    now = "CURRENT_TIMESTAMP"
    rows = [
        f"INSERT INTO tenants VALUES ('t', 'default', 'd', {now}, {now})",
        "INSERT INTO projects (id, tenant_id, name, created_at, updated_at)"
        f" VALUES ('p', 't', 'acme', {now}, {now})",
        "INSERT INTO api_keys (id, tenant_id, project_id, name, digest, prefix, last_four,"
        " status, ip_allowlist, source, created_at, updated_at) VALUES"
        f" ('k', 't', 'p', 'ci', 'd', 'x', 'y', 'active', '[]', 'config', {now}, {now})",
        "INSERT INTO providers (id, tenant_id, slug, type, created_at, updated_at)"
        f" VALUES ('v', 't', 'up', 'openai', {now}, {now})",
        "INSERT INTO virtual_models (id, tenant_id, name, strategy, retry_attempts,"
        " retry_backoff_ms, deadline_s, fallbacks, context_fallbacks, embedding, created_at,"
        f" updated_at) VALUES ('m', 't', 'chat', 'priority', 1, 0, 1, '[]', '[]', false, {now},"
        f" {now})",
        "INSERT INTO routes (id, model_id, provider_id, upstream_model, priority, weight,"
        f" disabled, position, created_at, updated_at) VALUES ('r', 'm', 'v', 'x', 0, 1, false,"
        f" 0, {now}, {now})",
    ]
    kept = text("SELECT (SELECT count(*) FROM api_keys), (SELECT count(*) FROM routes)")
    try:
        await _to(engine, "0001")
        async with engine.begin() as conn:
            for row in rows:
                await conn.execute(text(row))
        await _to(engine, "0002")
        async with engine.connect() as conn:
            assert (await conn.execute(kept)).one() == (1, 1)
        # columns added to `routes` (0003), `providers` (0004), `request_records` (0005,
        # 0006); tables for the usage rollups (0007); a key's capture mode, existing keys
        # "off", and the payloads table (0008)
        await _to(engine, "0008")
        async with engine.connect() as conn:
            assert (await conn.execute(kept)).one() == (1, 1)
            assert await conn.run_sync(_diff_before_0011) == []
            assert (await conn.execute(text("SELECT capture FROM api_keys"))).scalar() == "off"
        with pytest.raises(IntegrityError):
            async with engine.begin() as conn:
                await conn.execute(text("UPDATE api_keys SET routing_policy_id = 'nowhere'"))
        await _to(engine, "0001", down=True)
        async with engine.connect() as conn:
            assert (await conn.execute(kept)).one() == (1, 1)
    finally:
        await engine.dispose()


_RECORD = (
    "INSERT INTO request_records (request_id, created_at, endpoint, stream, status_code,"
    " latency_ms) VALUES (:r, :at, 'chat.completions', false, 200, 1.0)"
)
_ROWS = text("SELECT id, request_id, created_at FROM request_records ORDER BY id")
_PARTITIONS = text(
    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
    " WHERE i.inhparent = 'request_records'::regclass"
)
_INDEXES = text(
    "SELECT c.relname, c.relkind::text, pg_get_indexdef(i.indexrelid) FROM pg_index i"
    " JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'request_records'::regclass"
)
_TABLES_LIKE_PARTITIONS = text(
    "SELECT relname FROM pg_class WHERE relname LIKE 'request\\_records\\_%' AND relkind = 'r'"
)


@pytest.mark.postgres
async def test_records_are_partitioned_by_month_and_back_without_losing_a_row(
    postgres_url: str,
) -> None:
    """0009 turns request_records into monthly partitions on PostgreSQL: every row kept with
    its id, a partition per month with rows plus the months ahead, partitioned keys and
    indexes, ids going on increasing; the downgrade turns it back into the plain table."""
    engine = create_engine(postgres_url)
    now = datetime.now(UTC)
    this_month = partitions.month_of(now)
    moments = [
        partitions.add_months(this_month, -14) + timedelta(days=3),
        partitions.add_months(this_month, -3) + timedelta(days=27, hours=23),
        partitions.add_months(this_month, -2),  # the first instant of a month
        partitions.add_months(this_month, -1) + timedelta(days=1),
        partitions.add_months(this_month, -1) + timedelta(days=9),
        now,
        partitions.add_months(this_month, 6) + timedelta(days=2),  # a clock far ahead
    ]
    try:
        await _to(engine, "0008")
        async with engine.begin() as conn:
            for n, moment in enumerate(moments):
                await conn.execute(text(_RECORD), {"r": f"r{n}", "at": moment})
            rows = (await conn.execute(_ROWS)).all()
        assert len(rows) == len(moments)

        await _to(engine, "0009")
        months = {partitions.month_of(m) for m in moments} | {
            partitions.add_months(this_month, n) for n in range(3)
        }
        async with engine.connect() as conn:
            assert (await conn.execute(_ROWS)).all() == rows
            placed = await conn.execute(
                text("SELECT request_id, tableoid::regclass::text FROM request_records")
            )
            assert dict(placed.all()) == {
                f"r{n}": partitions.partition_name(partitions.month_of(m))
                for n, m in enumerate(moments)
            }
            assert {row[0] for row in await conn.execute(_PARTITIONS)} == {
                *(partitions.partition_name(m) for m in months),
                "request_records_default",
            }
            strategy = await conn.execute(
                text(
                    "SELECT partstrat::text, pg_get_partkeydef(partrelid) FROM pg_partitioned_table"
                    " WHERE partrelid = 'request_records'::regclass"
                )
            )
            assert strategy.one() == ("r", "RANGE (created_at)")
            indexes = {row[0]: row[1:] for row in await conn.execute(_INDEXES)}
            assert {name: kind for name, (kind, _) in indexes.items()} == {
                "pk_request_records": "I",  # partitioned indexes, one per partition below
                "uq_request_records_request_id_created_at": "I",
                "ix_request_records_created_at": "I",
                "ix_request_records_project_id_created_at": "I",
                "ix_request_records_key_id_created_at": "I",
                "ix_request_records_virtual_model_created_at": "I",
            }
            assert indexes["pk_request_records"][1].endswith("(id, created_at)")
            assert indexes["uq_request_records_request_id_created_at"][1].endswith(
                "(request_id, created_at)"
            )
            per_partition = await conn.execute(
                text(
                    "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                    " WHERE i.inhparent = 'pk_request_records'::regclass"
                )
            )
            assert per_partition.scalar_one() == len(months) + 1
            assert await conn.run_sync(_diff_before_0011) == []
        async with engine.begin() as conn:  # ids go on past the copied ones
            await conn.execute(text(_RECORD), {"r": "after-upgrade", "at": now})
            await conn.execute(text(_RECORD), {"r": "r5", "at": now + timedelta(seconds=1)})
            rows = (await conn.execute(_ROWS)).all()
        assert [row[1] for row in rows[-2:]] == ["after-upgrade", "r5"]
        assert rows[-2][0] > max(row[0] for row in rows[:-2])

        # A request id twice (at two moments) cannot go back under the old unique key.
        with pytest.raises(RuntimeError, match="request ids occur more than once"):
            await _to(engine, "0008", down=True)
        async with engine.begin() as conn:
            await conn.execute(
                text("DELETE FROM request_records WHERE id = :i"), {"i": rows[-1][0]}
            )
        rows = rows[:-1]

        await _to(engine, "0008", down=True)
        async with engine.connect() as conn:
            assert (await conn.execute(_ROWS)).all() == rows
            assert not await conn.run_sync(_is_partitioned)
            assert (await conn.execute(_TABLES_LIKE_PARTITIONS)).all() == []
            definitions = {row[0]: row[2] for row in await conn.execute(_INDEXES)}
            assert set(definitions) == {
                "pk_request_records",
                "uq_request_records_request_id",
                "ix_request_records_created_at",
                "ix_request_records_project_id_created_at",
                "ix_request_records_key_id_created_at",
                "ix_request_records_virtual_model_created_at",
            }
            assert definitions["pk_request_records"].endswith("(id)")
            assert await conn.run_sync(_diff_before_0011) == []
        async with engine.begin() as conn:
            await conn.execute(text(_RECORD), {"r": "after-downgrade", "at": now})
            last = (await conn.execute(_ROWS)).all()[-1]
        assert last[1] == "after-downgrade" and last[0] > rows[-1][0]
        with pytest.raises(IntegrityError):  # request_id alone is unique again
            async with engine.begin() as conn:
                await conn.execute(text(_RECORD), {"r": "r0", "at": now})

        await _to(engine, "0009")  # and up again
        async with engine.connect() as conn:
            assert await conn.run_sync(_is_partitioned)
            assert len((await conn.execute(_ROWS)).all()) == len(rows) + 1
    finally:
        await engine.dispose()


async def test_sqlite_records_stay_a_plain_table(engine: AsyncEngine) -> None:
    if engine.dialect.name != "sqlite":
        return
    async with engine.connect() as conn:
        sql = await conn.execute(
            text("SELECT sql FROM sqlite_master WHERE name = 'request_records'")
        )
        assert "UNIQUE (request_id)" in sql.scalar_one()


async def test_existing_providers_are_the_operators_in_the_default_tenant_only(
    database_url: str,
) -> None:
    """0020 adds `providers.declared_by`: the default tenant's providers (the YAML's and the
    admin token's) stay the operator's, every other tenant's become the tenant's (the outbound
    address policy's stricter rules); no route is lost to a table copy."""
    engine = create_engine(database_url)
    now = "CURRENT_TIMESTAMP"
    try:
        await _to(engine, "0019")
        async with engine.begin() as conn:
            for tenant, slug in (("t1", "default"), ("t2", "acme")):
                await conn.execute(
                    text(
                        "INSERT INTO tenants (id, slug, name, created_at, updated_at)"
                        f" VALUES ('{tenant}', '{slug}', '{slug}', {now}, {now})"
                    )
                )
                await conn.execute(
                    text(
                        "INSERT INTO providers (id, tenant_id, slug, type, created_at,"
                        f" updated_at) VALUES ('p-{tenant}', '{tenant}', 'up', 'openai', {now},"
                        f" {now})"
                    )
                )
            await conn.execute(
                text(
                    "INSERT INTO virtual_models (id, tenant_id, name, strategy, retry_attempts,"
                    " retry_backoff_ms, deadline_s, fallbacks, context_fallbacks, embedding,"
                    f" created_at, updated_at) VALUES ('m', 't2', 'chat', 'priority', 1, 0, 1,"
                    f" '[]', '[]', false, {now}, {now})"
                )
            )
            await conn.execute(
                text(
                    "INSERT INTO routes (id, model_id, provider_id, upstream_model, priority,"
                    " weight, disabled, position, created_at, updated_at) VALUES ('r', 'm',"
                    f" 'p-t2', 'x', 0, 1, false, 0, {now}, {now})"
                )
            )
        await _to(engine, "0020")
        async with engine.connect() as conn:
            found = await conn.execute(text("SELECT id, declared_by FROM providers ORDER BY id"))
            assert [tuple(row) for row in found] == [("p-t1", "operator"), ("p-t2", "tenant")]
            routes = await conn.execute(text("SELECT count(*) FROM routes"))
            assert routes.scalar() == 1
        await _to(engine, "0019", down=True)
    finally:
        await engine.dispose()
