"""request attempts and routing policies: attempt count, final route and policy on records,
a table of attempts, routing policies with their project and key bindings, provider regions

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from llmrelay.store.types import JSONDoc, UTCDateTime

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("request_records", schema=None) as batch_op:
        batch_op.add_column(sa.Column("attempts", sa.Integer(), server_default="1", nullable=False))
        batch_op.add_column(sa.Column("route_id", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("policy_id", sa.String(length=32), nullable=True))
    op.create_table(
        "request_attempts",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(timezone=True), nullable=False),
        sa.Column("route_id", sa.String(length=32), nullable=True),
        sa.Column("provider", sa.String(length=64), nullable=True),
        sa.Column("upstream_model", sa.String(length=200), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("outcome", sa.String(length=64), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_request_attempts")),
        sa.UniqueConstraint(
            "request_id", "attempt", name=op.f("uq_request_attempts_request_id_attempt")
        ),
    )
    with op.batch_alter_table("request_attempts", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_request_attempts_request_id"), ["request_id"], unique=False
        )

    op.create_table(
        "routing_policies",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("tenant_id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("providers", JSONDoc, nullable=True),
        sa.Column("tags", JSONDoc, nullable=True),
        sa.Column("regions", JSONDoc, nullable=True),
        sa.Column("strategy", sa.String(length=32), nullable=True),
        sa.Column("created_at", UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_routing_policies_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_routing_policies")),
        sa.UniqueConstraint("tenant_id", "name", name=op.f("uq_routing_policies_tenant_id_name")),
    )
    with op.batch_alter_table("providers", schema=None) as batch_op:
        batch_op.add_column(sa.Column("region", sa.String(length=64), nullable=True))
    for table in ("projects", "api_keys"):
        _add_policy_binding(table)


def _add_policy_binding(table: str) -> None:
    name = op.f(f"fk_{table}_routing_policy_id_routing_policies")
    if op.get_bind().dialect.name == "sqlite":
        # SQLite adds a constraint only by copying the table, and dropping the old
        # `projects` with foreign keys enforced would delete every key (ON DELETE CASCADE).
        # A new column may carry its REFERENCES clause inline, without a copy.
        column = sa.Column(
            "routing_policy_id",
            sa.String(length=32),
            sa.ForeignKey("routing_policies.id", name=name),
            nullable=True,
        )
        op.add_column(table, column, inline_references=True)
        return
    op.add_column(table, sa.Column("routing_policy_id", sa.String(length=32), nullable=True))
    op.create_foreign_key(name, table, "routing_policies", ["routing_policy_id"], ["id"])


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for table in ("api_keys", "projects"):
        if sqlite:  # ALTER TABLE DROP COLUMN (SQLite >= 3.35), no copy (see the upgrade)
            op.drop_column(table, "routing_policy_id")
            continue
        op.drop_constraint(
            op.f(f"fk_{table}_routing_policy_id_routing_policies"), table, type_="foreignkey"
        )
        op.drop_column(table, "routing_policy_id")
    op.drop_column("providers", "region")  # not in batch: a copy would cascade to `routes`
    op.drop_table("routing_policies")
    with op.batch_alter_table("request_attempts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_request_attempts_request_id"))
    op.drop_table("request_attempts")
    with op.batch_alter_table("request_records", schema=None) as batch_op:
        batch_op.drop_column("policy_id")
        batch_op.drop_column("route_id")
        batch_op.drop_column("attempts")
