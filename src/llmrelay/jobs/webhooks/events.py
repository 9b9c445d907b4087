"""Queuing a webhook event: one `webhook_deliveries` row (what the operator sees: the URL, each
attempt, how it ended) and one `webhook_delivery` job that sends it, in the caller's
transaction.

The event's body is fixed here, once: `{"id", "type", "created", "data"}` as bytes, sealed in
the job's payload (it carries a model's answer; context = the job id). Every attempt sends
these same bytes under the same event id; only the timestamp and the signature over them are
new. An event id is given once: queuing it again (a job's second attempt) adds nothing.
"""

from __future__ import annotations

from typing import Any, Final

import orjson
from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from llmrelay.jobs import queue
from llmrelay.store.crypto import Sealer
from llmrelay.store.models import new_id
from llmrelay.store.models_jobs import WebhookDelivery

KIND: Final = "webhook_delivery"
PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
deliveries: Table = WebhookDelivery.__table__  # type: ignore[assignment]


def event_body(event_id: str, event_type: str, created: int, data: dict[str, Any]) -> bytes:
    return orjson.dumps({"id": event_id, "type": event_type, "created": created, "data": data})


async def enqueue_event(
    conn: AsyncConnection,
    sealer: Sealer,
    *,
    event_id: str,
    event_type: str,
    data: dict[str, Any],
    url: str,
    project_id: str | None,
    tenant_id: str | None,
    source_job_id: str | None,
    now: float,
    max_attempts: int,
) -> str | None:
    """Queue the event for delivery; the delivery's id, or None when this event id was
    queued already."""
    delivery_id = new_id()
    insert = (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(deliveries)
    inserted = await conn.execute(
        insert.values(
            id=delivery_id,
            event_id=event_id,
            event_type=event_type,
            source_job_id=source_job_id,
            tenant_id=tenant_id,
            project_id=project_id,
            url=url,
            status=PENDING,
            attempts=0,
            attempt_log=[],
            created_at=queue.utc(now),
        )
        .on_conflict_do_nothing(index_elements=["event_id"])
        .returning(deliveries.c.id)
    )
    if inserted.first() is None:
        return None
    job_id = new_id()
    body = event_body(event_id, event_type, int(now), data)
    await queue.enqueue(
        conn,
        KIND,
        {"delivery_id": delivery_id},
        now=now,
        job_id=job_id,
        dedupe_key=f"webhook:{event_id}",
        max_attempts=max_attempts,
        tenant_id=tenant_id,
        project_id=project_id,
        payload_sealed=sealer.seal(body, context=job_id),
    )
    return delivery_id
