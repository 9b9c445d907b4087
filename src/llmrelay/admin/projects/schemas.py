"""What the projects API answers with (requests are the config schema's ProjectConfig)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from llmrelay.store.models import ApiKey, Project


class Limits(BaseModel):
    rpm: int | None = None
    tpm: int | None = None
    concurrency: int | None = None


class LimitsOut(BaseModel):
    """A project's or key's limits and monthly budget (USD; micro-USD exactly)."""

    limits: Limits
    monthly_budget_usd: float | None
    monthly_budget_micros: int | None


class ProjectOut(LimitsOut):
    id: str
    tenant_id: str
    name: str
    #: Allowlisted virtual models; null = every model.
    models: list[str] | None
    routing_policy: str | None
    #: Guardrail policies bound to the project, in order.
    guardrails: list[str]
    version: int
    created_at: datetime
    updated_at: datetime


class ProjectPage(BaseModel):
    data: list[ProjectOut]
    next_cursor: str | None


def limits_out(row: Project | ApiKey) -> dict[str, object]:
    micros = row.monthly_budget_micros
    return {
        "limits": Limits(rpm=row.rpm, tpm=row.tpm, concurrency=row.concurrency),
        "monthly_budget_usd": None if micros is None else micros / 1_000_000,
        "monthly_budget_micros": micros,
    }


def project_out(
    row: Project, policy: str | None, guardrails: list[str] | None = None
) -> ProjectOut:
    return ProjectOut(
        id=row.id,
        tenant_id=row.tenant_id,
        name=row.name,
        models=row.allowed_models,
        routing_policy=policy,
        guardrails=guardrails or [],
        version=row.version,
        created_at=row.created_at,
        updated_at=row.updated_at,
        **limits_out(row),
    )
