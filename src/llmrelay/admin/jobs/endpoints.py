"""/api/admin/jobs: HTTP only; the rules are in service.py."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request

from llmrelay.admin import audit
from llmrelay.admin.access import Actor, require
from llmrelay.admin.jobs import repository, service
from llmrelay.admin.jobs.schemas import JobOut, JobPage, job_out
from llmrelay.admin.kit.http import Cursor, Limit, Session
from llmrelay.admin.kit.scope import visible
from llmrelay.store.models_jobs import Job

router = APIRouter(tags=["jobs"])
Reader = Annotated[Actor, Depends(require("jobs:read"))]
Writer = Annotated[Actor, Depends(require("jobs:write"))]
Status = Literal["queued", "running", "succeeded", "failed", "cancelled"]


@router.get("/jobs")
async def list_jobs(
    session: Session,
    actor: Reader,
    limit: Limit = 50,
    cursor: Cursor = None,
    kind: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
    status: Status | None = None,
    tenant_id: Annotated[str | None, Query(max_length=32)] = None,
) -> JobPage:
    """Jobs of the caller's tenants (and the platform-wide ones, for a platform admin),
    newest first."""
    where = visible(actor, "jobs:read", Job.tenant_id, Job.project_id)  # type: ignore[arg-type]
    if tenant_id is not None:
        scoped = Job.tenant_id == tenant_id
        where = scoped if where is None else where & scoped
    rows, next_cursor = await repository.page(
        session, where=where, kind=kind, status=status, limit=limit, cursor=cursor
    )
    return JobPage(data=[job_out(r) for r in rows], next_cursor=next_cursor)


@router.get("/jobs/{job_id}")
async def get_job(session: Session, actor: Reader, job_id: str) -> JobOut:
    return job_out(await service.load(session, actor, "jobs:read", job_id))


@router.post("/jobs/{job_id}/cancel")
async def cancel_job(request: Request, session: Session, actor: Writer, job_id: str) -> JobOut:
    """A queued job ends cancelled at once; a running one is asked to stop (409 when the job
    has finished already)."""
    row = await service.load(session, actor, "jobs:write", job_id)
    before = {"status": row.status, "cancel_requested": row.cancel_requested}
    audit.note(request, "job.cancel", "job", row.id, before, None, row.tenant_id)
    await service.cancel(session, row)
    await session.commit()
    await session.refresh(row)
    after = {"status": row.status, "cancel_requested": row.cancel_requested}
    audit.note(request, "job.cancel", "job", row.id, before, after, row.tenant_id)
    return job_out(row)
