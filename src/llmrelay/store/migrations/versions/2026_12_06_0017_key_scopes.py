"""key scopes: the APIs a key may call (`api_keys.scopes`, a JSON list of names from
apikeys.SCOPES); null, every existing key's value, means every API.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from llmrelay.store.types import JSONDoc

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.add_column(sa.Column("scopes", JSONDoc, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_column("scopes")
