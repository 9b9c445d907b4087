"""durable jobs: the job queue, the sparse provider health summary, webhook deliveries, and
each project's webhook signing secret

New tables, and one nullable column on `projects` (an ALTER TABLE on SQLite: no copy).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from llmrelay.store.types import JSONDoc, UTCDateTime

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.add_column(sa.Column("webhook_secret_sealed", sa.Text(), nullable=True))

    op.create_table(
        "jobs",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("tenant_id", sa.String(32), nullable=True),
        sa.Column("project_id", sa.String(32), nullable=True),
        sa.Column("key_id", sa.String(32), nullable=True),
        sa.Column("dedupe_key", sa.String(200), nullable=True),
        sa.Column("payload", JSONDoc, nullable=False),
        sa.Column("payload_sealed", sa.Text(), nullable=True),
        sa.Column("result", JSONDoc, nullable=True),
        sa.Column("result_sealed", sa.Text(), nullable=True),
        sa.Column("checkpoint", JSONDoc, nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("run_at", UTCDateTime(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(100), nullable=True),
        sa.Column("lease_until", UTCDateTime(), nullable=True),
        sa.Column("heartbeat_at", UTCDateTime(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=True),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("dedupe_key", name=op.f("uq_jobs_dedupe_key")),
    )
    op.create_index(op.f("ix_jobs_status_run_at"), "jobs", ["status", "run_at"])
    op.create_index(op.f("ix_jobs_kind_status"), "jobs", ["kind", "status"])
    op.create_index(op.f("ix_jobs_project_id"), "jobs", ["project_id"])

    op.create_table(
        "provider_health",
        sa.Column("provider_id", sa.String(32), nullable=False),
        sa.Column("tenant_id", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(64), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("since", UTCDateTime(), nullable=False),
        sa.Column("checked_at", UTCDateTime(), nullable=False),
        sa.Column("next_probe_at", UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["provider_id"],
            ["providers.id"],
            name=op.f("fk_provider_health_provider_id_providers"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("provider_id", name=op.f("pk_provider_health")),
    )

    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("event_id", sa.String(64), nullable=False),
        sa.Column("event_type", sa.String(64), nullable=False),
        sa.Column("source_job_id", sa.String(32), nullable=True),
        sa.Column("tenant_id", sa.String(32), nullable=True),
        sa.Column("project_id", sa.String(32), nullable=True),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("attempt_log", JSONDoc, nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("delivered_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
        sa.UniqueConstraint("event_id", name=op.f("uq_webhook_deliveries_event_id")),
    )
    op.create_index(
        op.f("ix_webhook_deliveries_source_job_id"), "webhook_deliveries", ["source_job_id"]
    )
    op.create_index(op.f("ix_webhook_deliveries_project_id"), "webhook_deliveries", ["project_id"])


def downgrade() -> None:
    op.drop_table("webhook_deliveries")
    op.drop_table("provider_health")
    op.drop_table("jobs")
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.drop_column("webhook_secret_sealed")
