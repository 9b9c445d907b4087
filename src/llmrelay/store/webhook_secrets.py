"""Each project's webhook signing secret (`projects.webhook_secret_sealed`, sealed with the
project id as context): made on first use, read by the deliveries that sign with it
(jobs/webhooks/), shown and rotated through the admin API (admin/webhooks/).

Written with Core statements on the column alone: the secret is not part of the project's
configuration (no version or config generation moves for it), and a first use racing another
keeps whichever secret was stored first (`WHERE webhook_secret_sealed IS NULL`), so two
deliveries never sign with two different secrets.
"""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy import Table, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from llmrelay.store.crypto import Sealer
from llmrelay.store.models import Project

PREFIX = "whsec_"
projects: Table = Project.__table__  # type: ignore[assignment]


class UnknownProject(LookupError):
    """No project has that id."""


def new_secret() -> str:
    return PREFIX + secrets.token_urlsafe(32)


async def project_secret(
    conn: AsyncConnection | AsyncSession, sealer: Sealer, project_id: str
) -> str:
    """The project's secret, made now if it has none. Raises UnknownProject."""
    sealed = await _sealed(conn, project_id)
    if sealed is None:
        fresh = sealer.seal(new_secret().encode(), context=project_id)
        await conn.execute(
            update(projects)
            .where(projects.c.id == project_id, projects.c.webhook_secret_sealed.is_(None))
            .values(webhook_secret_sealed=fresh)
        )
        sealed = await _sealed(conn, project_id)
        assert sealed is not None
    return sealer.open(sealed, context=project_id).decode()


async def rotate(conn: AsyncConnection | AsyncSession, sealer: Sealer, project_id: str) -> str:
    """A new secret for the project, in force for every event signed from now on (retries of
    earlier events included). Raises UnknownProject."""
    await _sealed(conn, project_id)
    secret = new_secret()
    await conn.execute(
        update(projects)
        .where(projects.c.id == project_id)
        .values(webhook_secret_sealed=sealer.seal(secret.encode(), context=project_id))
    )
    return secret


async def _sealed(conn: AsyncConnection | AsyncSession, project_id: str) -> str | None:
    row: Any = (
        await conn.execute(
            select(projects.c.webhook_secret_sealed).where(projects.c.id == project_id)
        )
    ).first()
    if row is None:
        raise UnknownProject(project_id)
    return None if row[0] is None else str(row[0])
