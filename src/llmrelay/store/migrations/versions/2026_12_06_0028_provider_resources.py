"""provider resources: several accounts or credentials under one provider
(`provider_resources`, credentials sealed under the resource's id like a provider's), the
resource that served in request records, attempts and usage rollups (`resource_id`; '' in
the rollups, whose unique key gains it), and nothing else: a provider without resources
behaves as before.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from llmrelay.store.types import UTCDateTime

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD_DIMENSIONS = ["hour", "tenant_id", "project_id", "key_id", "virtual_model", "provider"]


def upgrade() -> None:
    op.create_table(
        "provider_resources",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("provider_id", sa.String(32), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("credentials_sealed", sa.Text(), nullable=True),
        sa.Column("credentials_key_id", sa.String(16), nullable=True),
        sa.Column("api_key_last_four", sa.String(4), nullable=True),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("disabled", sa.Boolean(), nullable=False),
        sa.Column("rpm", sa.Integer(), nullable=True),
        sa.Column("tpm", sa.Integer(), nullable=True),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), server_default="1", nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["provider_id"],
            ["providers.id"],
            name=op.f("fk_provider_resources_provider_id_providers"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_provider_resources")),
        sa.UniqueConstraint(
            "provider_id", "name", name=op.f("uq_provider_resources_provider_id_name")
        ),
    )
    op.create_index(
        op.f("ix_provider_resources_provider_id"), "provider_resources", ["provider_id"]
    )
    for table in ("request_records", "request_attempts"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("resource_id", sa.String(32), nullable=True))
    with op.batch_alter_table("usage_rollups", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("resource_id", sa.String(32), server_default="", nullable=False)
        )
        batch_op.drop_constraint("uq_usage_rollups_dimensions", type_="unique")
        batch_op.create_unique_constraint(
            "uq_usage_rollups_dimensions", [*_OLD_DIMENSIONS, "resource_id"]
        )


def downgrade() -> None:
    # Rollup rows that differ only by resource would break the old key: their hours are
    # marked dirty (recomputed from the records by the rollup task) and the rows dropped.
    op.execute(
        "INSERT INTO usage_rollup_dirty (hour, version) SELECT DISTINCT hour, 1"
        " FROM usage_rollups WHERE resource_id <> ''"
        " AND hour NOT IN (SELECT hour FROM usage_rollup_dirty)"
    )
    op.execute(
        "DELETE FROM usage_rollups WHERE hour IN"
        " (SELECT DISTINCT hour FROM usage_rollups WHERE resource_id <> '')"
    )
    with op.batch_alter_table("usage_rollups", schema=None) as batch_op:
        batch_op.drop_constraint("uq_usage_rollups_dimensions", type_="unique")
        batch_op.create_unique_constraint("uq_usage_rollups_dimensions", _OLD_DIMENSIONS)
        batch_op.drop_column("resource_id")
    for table in ("request_records", "request_attempts"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("resource_id")
    op.drop_index(op.f("ix_provider_resources_provider_id"), table_name="provider_resources")
    op.drop_table("provider_resources")
