"""What the jobs API answers with. A job's sealed parts (a client's request, a model's
answer) and its checkpoint are never shown: only whether it has them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from llmrelay.store.models_jobs import Job


class JobOut(BaseModel):
    id: str
    kind: str
    #: queued, running, succeeded, failed or cancelled
    status: str
    #: None: a platform-wide job (price sync, retention), shown to platform admins only
    tenant_id: str | None
    project_id: str | None
    key_id: str | None
    dedupe_key: str | None
    #: The parameters that are not secret (ids, names, options).
    payload: dict[str, Any]
    #: Whether it has a sealed payload (never shown).
    sealed_payload: bool
    #: What it produced, when that is not sealed.
    result: dict[str, Any] | None
    #: Whether it has a sealed result (never shown).
    sealed_result: bool
    #: Whether an attempt saved progress for the next one (never shown).
    has_checkpoint: bool
    error: str | None
    attempts: int
    max_attempts: int
    #: Not run before this time (a retry's backoff, a probe's next round, a periodic slot).
    run_at: datetime
    #: The fencing token: moves with every claim.
    epoch: int
    #: The worker holding it while it runs, and until when its lease lasts.
    lease_owner: str | None
    lease_until: datetime | None
    heartbeat_at: datetime | None
    cancel_requested: bool
    #: Deleted after this time once finished.
    expires_at: datetime | None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class JobPage(BaseModel):
    data: list[JobOut]
    next_cursor: str | None


def job_out(row: Job) -> JobOut:
    return JobOut(
        id=row.id,
        kind=row.kind,
        status=row.status,
        tenant_id=row.tenant_id,
        project_id=row.project_id,
        key_id=row.key_id,
        dedupe_key=row.dedupe_key,
        payload=row.payload or {},
        sealed_payload=row.payload_sealed is not None,
        result=row.result,
        sealed_result=row.result_sealed is not None,
        has_checkpoint=row.checkpoint is not None,
        error=row.error,
        attempts=row.attempts,
        max_attempts=row.max_attempts,
        run_at=row.run_at,
        epoch=row.epoch,
        lease_owner=row.lease_owner,
        lease_until=row.lease_until,
        heartbeat_at=row.heartbeat_at,
        cancel_requested=row.cancel_requested,
        expires_at=row.expires_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
    )
