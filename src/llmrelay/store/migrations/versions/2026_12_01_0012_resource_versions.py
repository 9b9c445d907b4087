"""resource versions for optimistic concurrency, and a provider's model inventory

Every row the admin API edits gets a `version` counter (SQLAlchemy's version_id_col: each
UPDATE checks and moves it), shown as the ETag and required back in If-Match, so two admins
cannot silently overwrite each other. Existing rows start at 1. Providers get
`model_inventory`, the list of upstream models they offer (null: not listed).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from llmrelay.store.types import JSONDoc

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_VERSIONED = (
    "routing_policies",
    "projects",
    "api_keys",
    "providers",
    "virtual_models",
    "routes",
)


def upgrade() -> None:
    for table in _VERSIONED:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(
                sa.Column("version", sa.Integer(), server_default="1", nullable=False)
            )
    with op.batch_alter_table("providers", schema=None) as batch_op:
        batch_op.add_column(sa.Column("model_inventory", JSONDoc, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("providers", schema=None) as batch_op:
        batch_op.drop_column("model_inventory")
    for table in _VERSIONED:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("version")
