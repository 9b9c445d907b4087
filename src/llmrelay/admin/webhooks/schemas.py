"""Webhook bodies of the admin API."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from llmrelay.store.models_jobs import WebhookDelivery


class WebhookSecretOut(BaseModel):
    project_id: str
    #: `whsec_...`: receivers check X-Webhook-Signature with it (docs/api.md, "Webhooks").
    secret: str


class DeliveryOut(BaseModel):
    id: str
    event_id: str
    event_type: str
    project_id: str | None
    #: The job the event is about (a generation: its id is `gen_` + this).
    source_job_id: str | None
    url: str
    #: pending (attempts left), delivered, failed (attempts spent, or the URL refused)
    status: str
    attempts: int
    last_status_code: int | None
    last_error: str | None
    #: One entry per attempt: {"at", "status_code", "error", "latency_ms"}.
    attempt_log: list[dict[str, Any]]
    created_at: datetime
    delivered_at: datetime | None


class DeliveryPage(BaseModel):
    data: list[DeliveryOut]
    next_cursor: str | None


def delivery_out(row: WebhookDelivery) -> DeliveryOut:
    return DeliveryOut.model_validate(row, from_attributes=True)
