"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from llmrelay.store.types import JSONDoc, UTCDateTime

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "config_generation",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_config_generation")),
    )
    op.create_table(
        "gateway_settings",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("value", JSONDoc, nullable=False),
        sa.Column("updated_at", UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_gateway_settings")),
    )
    op.create_table(
        "request_records",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("created_at", UTCDateTime(timezone=True), nullable=False),
        sa.Column("tenant_id", sa.String(length=32), nullable=True),
        sa.Column("project_id", sa.String(length=32), nullable=True),
        sa.Column("key_id", sa.String(length=32), nullable=True),
        sa.Column("endpoint", sa.String(length=64), nullable=False),
        sa.Column("virtual_model", sa.String(length=200), nullable=True),
        sa.Column("provider", sa.String(length=64), nullable=True),
        sa.Column("upstream_model", sa.String(length=200), nullable=True),
        sa.Column("stream", sa.Boolean(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column("error_code", sa.String(length=64), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("ttfb_ms", sa.Float(), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=True),
        sa.Column("completion_tokens", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_request_records")),
        sa.UniqueConstraint("request_id", name=op.f("uq_request_records_request_id")),
    )
    with op.batch_alter_table("request_records", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_request_records_created_at"), ["created_at"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_request_records_project_id_created_at"),
            ["project_id", "created_at"],
            unique=False,
        )

    op.create_table(
        "tenants",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("slug", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("created_at", UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tenants")),
        sa.UniqueConstraint("slug", name=op.f("uq_tenants_slug")),
    )
    op.create_table(
        "projects",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("tenant_id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("allowed_models", JSONDoc, nullable=True),
        sa.Column("rpm", sa.Integer(), nullable=True),
        sa.Column("tpm", sa.Integer(), nullable=True),
        sa.Column("concurrency", sa.Integer(), nullable=True),
        sa.Column("monthly_budget_micros", sa.BigInteger(), nullable=True),
        sa.Column("created_at", UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_projects_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_projects")),
        sa.UniqueConstraint("tenant_id", "name", name=op.f("uq_projects_tenant_id_name")),
    )
    op.create_table(
        "providers",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("tenant_id", sa.String(length=32), nullable=False),
        sa.Column("slug", sa.String(length=64), nullable=False),
        sa.Column("type", sa.String(length=32), nullable=False),
        sa.Column("base_url", sa.String(length=500), nullable=True),
        sa.Column("credentials_sealed", sa.Text(), nullable=True),
        sa.Column("credentials_key_id", sa.String(length=16), nullable=True),
        sa.Column("api_key_last_four", sa.String(length=4), nullable=True),
        sa.Column("timeout_s", sa.Float(), nullable=True),
        sa.Column("connect_timeout_s", sa.Float(), nullable=True),
        sa.Column("first_token_timeout_s", sa.Float(), nullable=True),
        sa.Column("stream_idle_timeout_s", sa.Float(), nullable=True),
        sa.Column("api_version", sa.String(length=32), nullable=True),
        sa.Column("created_at", UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_providers_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_providers")),
        sa.UniqueConstraint("tenant_id", "slug", name=op.f("uq_providers_tenant_id_slug")),
    )
    op.create_table(
        "virtual_models",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("tenant_id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("strategy", sa.String(length=32), nullable=False),
        sa.Column("retry_attempts", sa.Integer(), nullable=False),
        sa.Column("retry_backoff_ms", sa.Integer(), nullable=False),
        sa.Column("deadline_s", sa.Float(), nullable=False),
        sa.Column("fallbacks", JSONDoc, nullable=False),
        sa.Column("context_fallbacks", JSONDoc, nullable=False),
        sa.Column("embedding", sa.Boolean(), nullable=False),
        sa.Column("created_at", UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_virtual_models_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_virtual_models")),
        sa.UniqueConstraint("tenant_id", "name", name=op.f("uq_virtual_models_tenant_id_name")),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("tenant_id", sa.String(length=32), nullable=False),
        sa.Column("project_id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("last_four", sa.String(length=4), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("expires_at", UTCDateTime(timezone=True), nullable=True),
        sa.Column("allowed_models", JSONDoc, nullable=True),
        sa.Column("ip_allowlist", JSONDoc, nullable=False),
        sa.Column("rpm", sa.Integer(), nullable=True),
        sa.Column("tpm", sa.Integer(), nullable=True),
        sa.Column("concurrency", sa.Integer(), nullable=True),
        sa.Column("monthly_budget_micros", sa.BigInteger(), nullable=True),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("last_used_at", UTCDateTime(timezone=True), nullable=True),
        sa.Column("created_at", UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_api_keys_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_api_keys_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("digest", name=op.f("uq_api_keys_digest")),
        sa.UniqueConstraint("project_id", "name", name=op.f("uq_api_keys_project_id_name")),
    )
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_api_keys_project_id"), ["project_id"], unique=False)

    op.create_table(
        "price_versions",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("model_id", sa.String(length=32), nullable=False),
        sa.Column("effective_from", UTCDateTime(timezone=True), nullable=False),
        sa.Column("input_micros_per_mtok", sa.BigInteger(), nullable=True),
        sa.Column("output_micros_per_mtok", sa.BigInteger(), nullable=True),
        sa.Column("cached_input_micros_per_mtok", sa.BigInteger(), nullable=True),
        sa.Column("cache_write_micros_per_mtok", sa.BigInteger(), nullable=True),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("created_at", UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["virtual_models.id"],
            name=op.f("fk_price_versions_model_id_virtual_models"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_price_versions")),
    )
    with op.batch_alter_table("price_versions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_price_versions_model_id_effective_from"),
            ["model_id", "effective_from"],
            unique=False,
        )

    op.create_table(
        "routes",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("model_id", sa.String(length=32), nullable=False),
        sa.Column("provider_id", sa.String(length=32), nullable=False),
        sa.Column("upstream_model", sa.String(length=200), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("tag", sa.String(length=64), nullable=True),
        sa.Column("disabled", sa.Boolean(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["virtual_models.id"],
            name=op.f("fk_routes_model_id_virtual_models"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["provider_id"],
            ["providers.id"],
            name=op.f("fk_routes_provider_id_providers"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_routes")),
        sa.UniqueConstraint(
            "model_id",
            "provider_id",
            "upstream_model",
            name=op.f("uq_routes_model_id_provider_id_upstream_model"),
        ),
    )
    with op.batch_alter_table("routes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_routes_model_id"), ["model_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_routes_provider_id"), ["provider_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("routes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_routes_provider_id"))
        batch_op.drop_index(batch_op.f("ix_routes_model_id"))

    op.drop_table("routes")
    with op.batch_alter_table("price_versions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_price_versions_model_id_effective_from"))

    op.drop_table("price_versions")
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_keys_project_id"))

    op.drop_table("api_keys")
    op.drop_table("virtual_models")
    op.drop_table("providers")
    op.drop_table("projects")
    op.drop_table("tenants")
    with op.batch_alter_table("request_records", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_request_records_project_id_created_at"))
        batch_op.drop_index(batch_op.f("ix_request_records_created_at"))

    op.drop_table("request_records")
    op.drop_table("gateway_settings")
    op.drop_table("config_generation")
