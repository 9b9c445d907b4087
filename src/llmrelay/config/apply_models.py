"""Applying the virtual models of a config through the models service the admin API uses:
the model row, its routes (the file lists them completely: routes it leaves out are deleted)
and a new price version when prices changed."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.models import service as models_service
from llmrelay.config.apply_rows import ApplyResult, note
from llmrelay.config.schema import ModelConfig
from llmrelay.store.models import Provider, VirtualModel


async def upsert_model(
    session: AsyncSession,
    tenant_id: str,
    config: ModelConfig,
    existing: dict[str, VirtualModel],
    providers: dict[str, Provider],
    result: ApplyResult,
) -> None:
    outcome = await models_service.upsert_model(
        session, tenant_id, config, existing.get(config.name), providers
    )
    existing[config.name] = outcome.row
    note(result, "model", config.name, outcome.created, outcome.changed)
