"""Durable jobs and what they keep (migration 0013): the job queue, the sparse provider
health summary the probes write, and webhook deliveries. On store/models.py's `Base`, so one
metadata holds the whole schema.

Job payloads and results that carry a client's request or a model's answer are sealed
(store/crypto.py, context = the job id): a copy of the database does not show them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, ForeignKey, Index, Integer, String, Text, false
from sqlalchemy.orm import Mapped, mapped_column

from llmrelay.store.models import Base, new_id
from llmrelay.store.types import JSONDoc, utcnow

#: Job states. queued -> running -> succeeded | failed | cancelled; running -> queued again
#: when an attempt fails with attempts left, or when its lease ran out (the worker died).
QUEUED = "queued"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
FINISHED = (SUCCEEDED, FAILED, CANCELLED)

#: A provider's health as its probes find it (`ProviderHealth.status`; online has no row).
ONLINE = "online"
DEGRADED = "degraded"
UNAVAILABLE = "unavailable"


class Job(Base):
    """One unit of background work, claimed by one worker at a time under a lease.

    `epoch` is the fencing token: every claim moves it, and every write a worker makes about
    its job names the epoch it claimed (UPDATE ... WHERE id = ? AND epoch = ?), so a worker
    whose lease ran out and whose job another worker claimed can no longer change it.
    `dedupe_key` is unique: one live probe per provider, one periodic job per time slot."""

    __tablename__ = "jobs"
    __table_args__ = (
        Index(None, "status", "run_at"),
        Index(None, "kind", "status"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    kind: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), default=QUEUED)
    tenant_id: Mapped[str | None] = mapped_column(String(32))
    project_id: Mapped[str | None] = mapped_column(String(32), index=True)
    key_id: Mapped[str | None] = mapped_column(String(32))
    dedupe_key: Mapped[str | None] = mapped_column(String(200), unique=True)
    #: Parameters that are not secret (ids, names, options).
    payload: Mapped[dict[str, Any]] = mapped_column(JSONDoc, default=dict)
    #: Parameters that are (a client's request body): sealed JSON, context = the job id.
    payload_sealed: Mapped[str | None] = mapped_column(Text)
    #: What a finished job produced, in the clear or sealed (a model's answer).
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc, nullable=True)
    result_sealed: Mapped[str | None] = mapped_column(Text)
    #: Progress an attempt saved for the next one (fenced like every other write).
    checkpoint: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc, nullable=True)
    error: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=5)
    #: Not claimed before this time (a retry's backoff, a periodic job's slot).
    run_at: Mapped[datetime] = mapped_column(default=utcnow)
    epoch: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str | None] = mapped_column(String(100))
    lease_until: Mapped[datetime | None]
    heartbeat_at: Mapped[datetime | None]
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    #: A finished job is deleted after this time (the TTL of a background response).
    expires_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]


class ProviderHealth(Base):
    """A provider that is not healthy, as its probes found it: sparse, a row only while it
    is degraded or unavailable (no row: online). Providers marked unavailable are left out
    of routing (the snapshot's denylist) until a probe succeeds."""

    __tablename__ = "provider_health"

    provider_id: Mapped[str] = mapped_column(
        ForeignKey("providers.id", ondelete="CASCADE"), primary_key=True
    )
    tenant_id: Mapped[str] = mapped_column(String(32))
    #: "degraded" (transient failures) or "unavailable" (refused credentials, unreachable).
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(String(64))
    detail: Mapped[str | None] = mapped_column(Text)
    failures: Mapped[int] = mapped_column(Integer, default=1)
    since: Mapped[datetime] = mapped_column(default=utcnow)
    checked_at: Mapped[datetime] = mapped_column(default=utcnow)
    next_probe_at: Mapped[datetime | None]


class WebhookDelivery(Base):
    """One event sent to a client's webhook URL: its attempts, and how it ended."""

    __tablename__ = "webhook_deliveries"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    #: The event id the receiver sees (X-Webhook-Id): stable across retries.
    event_id: Mapped[str] = mapped_column(String(64), unique=True)
    event_type: Mapped[str] = mapped_column(String(64))
    #: The job the event is about (a generation), and the delivery job sending it.
    source_job_id: Mapped[str | None] = mapped_column(String(32), index=True)
    tenant_id: Mapped[str | None] = mapped_column(String(32))
    project_id: Mapped[str | None] = mapped_column(String(32), index=True)
    url: Mapped[str] = mapped_column(Text)
    #: "pending", "delivered" or "failed" (retries exhausted, or the URL refused).
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    #: [{"at", "status_code", "error", "latency_ms"}], one per attempt.
    attempt_log: Mapped[list[dict[str, Any]]] = mapped_column(JSONDoc, default=list)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    delivered_at: Mapped[datetime | None]
