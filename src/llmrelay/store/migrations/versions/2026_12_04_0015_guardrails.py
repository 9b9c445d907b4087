"""guardrails: content policies, their bindings to projects and keys, the audit records of
their hits

New tables only (the gateway-wide binding is a row of `gateway_settings`).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from llmrelay.store.types import BigIntPK, JSONDoc, UTCDateTime

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "guardrail_policies",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("tenant_id", sa.String(32), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("description", sa.String(500), nullable=True),
        sa.Column("rules", JSONDoc, nullable=False),
        sa.Column("version", sa.Integer(), server_default="1", nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_guardrail_policies_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_guardrail_policies")),
        sa.UniqueConstraint("tenant_id", "name", name=op.f("uq_guardrail_policies_tenant_id_name")),
    )
    op.create_table(
        "guardrail_bindings",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("policy_id", sa.String(32), nullable=False),
        sa.Column("project_id", sa.String(32), nullable=True),
        sa.Column("key_id", sa.String(32), nullable=True),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.CheckConstraint(
            "(project_id IS NULL) <> (key_id IS NULL)",
            name=op.f("ck_guardrail_bindings_one_scope"),
        ),
        sa.ForeignKeyConstraint(
            ["policy_id"],
            ["guardrail_policies.id"],
            name=op.f("fk_guardrail_bindings_policy_id_guardrail_policies"),
        ),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_guardrail_bindings_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["key_id"],
            ["api_keys.id"],
            name=op.f("fk_guardrail_bindings_key_id_api_keys"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_guardrail_bindings")),
        sa.UniqueConstraint(
            "project_id", "policy_id", name=op.f("uq_guardrail_bindings_project_id_policy_id")
        ),
        sa.UniqueConstraint(
            "key_id", "policy_id", name=op.f("uq_guardrail_bindings_key_id_policy_id")
        ),
    )
    op.create_index(op.f("ix_guardrail_bindings_policy_id"), "guardrail_bindings", ["policy_id"])
    op.create_index(op.f("ix_guardrail_bindings_project_id"), "guardrail_bindings", ["project_id"])
    op.create_index(op.f("ix_guardrail_bindings_key_id"), "guardrail_bindings", ["key_id"])
    op.create_table(
        "guardrail_hits",
        sa.Column("id", BigIntPK, autoincrement=True, nullable=False),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("tenant_id", sa.String(32), nullable=False),
        sa.Column("project_id", sa.String(32), nullable=False),
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("policy_id", sa.String(32), nullable=False),
        sa.Column("policy", sa.String(200), nullable=False),
        sa.Column("rule", sa.String(200), nullable=False),
        sa.Column("detector", sa.String(200), nullable=False),
        sa.Column("action", sa.String(8), nullable=False),
        sa.Column("location", sa.String(8), nullable=False),
        sa.Column("field", sa.String(200), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("matched_chars", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_guardrail_hits")),
        sa.UniqueConstraint("request_id", "seq", name=op.f("uq_guardrail_hits_request_id_seq")),
    )
    op.create_index(op.f("ix_guardrail_hits_created_at"), "guardrail_hits", ["created_at"])
    op.create_index(
        op.f("ix_guardrail_hits_tenant_id_created_at"),
        "guardrail_hits",
        ["tenant_id", "created_at"],
    )
    op.create_index(
        op.f("ix_guardrail_hits_policy_id_created_at"),
        "guardrail_hits",
        ["policy_id", "created_at"],
    )


def downgrade() -> None:
    op.drop_table("guardrail_hits")
    op.drop_table("guardrail_bindings")
    op.drop_table("guardrail_policies")
