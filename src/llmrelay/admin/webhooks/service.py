"""The rules of a project's webhook secret: made on first use (shown), replaced on rotation
(every event signed from then on uses the new one, retries of earlier events included).
Services flush, never commit: the handler's unit of work does."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.admin_error import AdminError
from llmrelay.store import webhook_secrets
from llmrelay.store.crypto import Sealer


async def secret(session: AsyncSession, sealer: Sealer | None, project_id: str) -> str:
    return await webhook_secrets.project_secret(session, _sealer(sealer), project_id)


async def rotate(session: AsyncSession, sealer: Sealer | None, project_id: str) -> str:
    return await webhook_secrets.rotate(session, _sealer(sealer), project_id)


def _sealer(sealer: Sealer | None) -> Sealer:
    if sealer is None:
        raise AdminError(503, "the secret key is not loaded yet", "unavailable")
    return sealer
