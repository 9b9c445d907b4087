"""The rules of jobs an operator may apply: who sees a job, and cancelling one.

A job of a tenant is that tenant's (its members with `jobs:read` see it; one limited to some
projects sees only those projects' jobs); a platform-wide job (no tenant: price sync,
retention) is shown to platform admins only. Cancelling ends a queued job at once and asks a
running one to stop (its worker sees it at its next heartbeat, within seconds); a finished
job cannot be cancelled (409)."""

from __future__ import annotations

import time

from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.access import Actor
from llmrelay.admin.jobs import repository
from llmrelay.admin.kit.problems import Conflict, NotFound
from llmrelay.jobs import queue
from llmrelay.store.models_jobs import FINISHED, Job


async def load(session: AsyncSession, actor: Actor, permission: str, job_id: str) -> Job:
    row = await repository.get(session, job_id)
    if row is None or (row.tenant_id is None and not actor.platform_admin):
        raise NotFound(f"no job {job_id!r}")
    if row.tenant_id is not None:
        actor.ensure_project(permission, row.tenant_id, row.project_id)
    return row


async def cancel(session: AsyncSession, row: Job) -> str:
    """Cancel the job; its state afterwards (cancelled, or running until it stops)."""
    if row.status in FINISHED:
        raise Conflict(f"the job has finished ({row.status}): nothing to cancel")
    state = await queue.request_cancel(session, row.id, now=time.time())
    if state in FINISHED and state != "cancelled":
        raise Conflict(f"the job has finished ({state}): nothing to cancel")
    return state
