"""provider declared_by: who set a provider's base URL, "operator" (the YAML config, the
admin token, a platform admin) or "tenant" (a tenant's admin), which chooses the outbound
address policy its connections are judged by (outbound/policy.py).

Existing rows: the default tenant's providers (where the YAML config and the admin token
put them) are the operator's; every other tenant's are the tenant's, the safe side: a
platform admin who saved one of them at an internal address saves it again to keep it.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("providers", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("declared_by", sa.String(16), nullable=False, server_default="operator")
        )
    op.execute(
        "UPDATE providers SET declared_by = 'tenant' WHERE tenant_id NOT IN "
        "(SELECT id FROM tenants WHERE slug = 'default')"
    )


def downgrade() -> None:
    with op.batch_alter_table("providers", schema=None) as batch_op:
        batch_op.drop_column("declared_by")
