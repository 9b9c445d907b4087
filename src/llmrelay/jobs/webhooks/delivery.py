"""The `webhook_delivery` job: POST one event to its URL, signed, and log the attempt.

Each attempt checks the URL again (ssrf.py) and connects only to the addresses that check
judged, with the URL's own host in the Host header and in TLS (SNI and the certificate check),
so DNS that changed since cannot send the request inward. Redirects are never followed; any
answer but a 2xx, or no answer within LLMRELAY_WEBHOOK_TIMEOUT_S, is a failed attempt, retried
after the next wait of LLMRELAY_WEBHOOK_RETRY_SCHEDULE_S until the attempts are spent. Every
attempt is appended to the delivery row (status code, error, latency), in one transaction
with a check that the job is still this worker's (a worker that lost its lease logs nothing).
"""

from __future__ import annotations

import socket
import time
from datetime import UTC, datetime
from typing import Any, Final

import aiohttp
import structlog
from aiohttp.abc import AbstractResolver, ResolveResult
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay import __version__
from llmrelay.jobs import queue
from llmrelay.jobs.kinds import GiveUp, JobContext, JobKind, RetryLater
from llmrelay.jobs.webhooks import signing, ssrf
from llmrelay.jobs.webhooks.events import DELIVERED, FAILED, KIND, PENDING, deliveries
from llmrelay.settings import Settings
from llmrelay.store.webhook_secrets import UnknownProject, project_secret

log = structlog.get_logger(__name__)

USER_AGENT: Final = f"llmrelay-webhooks/{__version__}"
#: The most of a receiver's answer that is read (and then dropped).
_ANSWER_READ_BYTES: Final = 65536


def max_attempts(settings: Settings) -> int:
    return len(settings.webhook_retry_schedule_s) + 1


async def deliver(context: JobContext) -> dict[str, Any] | None:
    settings: Settings = context.services.settings
    engine = context.engine
    row = await _row(engine, str(context.payload["delivery_id"]))
    if row is None:
        raise GiveUp("the delivery's record is gone")
    if row.status != PENDING:
        return {"status": row.status}
    sealer = context.sealer
    if sealer is None or context.job.payload_sealed is None:
        raise GiveUp("this worker cannot open the event (no secret key, or no event)")
    body = sealer.open(context.job.payload_sealed, context=context.id)
    started = time.monotonic()
    try:
        async with engine.begin() as conn:
            secret = await project_secret(conn, sealer, str(row.project_id))
        target = await ssrf.check(row.url, ssrf.WebhookPolicy.from_settings(settings))
    except (ssrf.RefusedUrl, UnknownProject) as refused:
        reason = (
            f"refused: {refused}"
            if isinstance(refused, ssrf.RefusedUrl)
            else "the project no longer exists"
        )
        await _log_attempt(context, row, None, reason, started, final=FAILED)
        raise GiveUp(reason) from None
    timestamp = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Webhook-Id": row.event_id,
        "X-Webhook-Timestamp": str(timestamp),
        "X-Webhook-Signature": signing.signature(secret, row.event_id, timestamp, body),
    }
    status_code: int | None = None
    error: str | None = None
    try:
        status_code = await post(target, headers, body, settings.webhook_timeout_s)
    except TimeoutError:
        error = f"no answer within {settings.webhook_timeout_s:g}s"
    except (aiohttp.ClientError, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}"[:500]
    delivered = status_code is not None and 200 <= status_code < 300
    last = context.is_last_attempt
    final = DELIVERED if delivered else FAILED if last else PENDING
    await _log_attempt(context, row, status_code, error, started, final=final)
    if delivered:
        return {"status": DELIVERED, "status_code": status_code}
    reason = error or f"the receiver answered {status_code}"
    if last:
        raise GiveUp(f"not delivered after {row.attempts + 1} attempts: {reason}")
    schedule = settings.webhook_retry_schedule_s
    raise RetryLater(reason, delay_s=schedule[min(row.attempts, len(schedule) - 1)])


async def _row(engine: AsyncEngine, delivery_id: str) -> Any:
    async with engine.connect() as conn:
        return (
            await conn.execute(select(deliveries).where(deliveries.c.id == delivery_id))
        ).first()


async def _log_attempt(
    context: JobContext,
    row: Any,
    status_code: int | None,
    error: str | None,
    started: float,
    *,
    final: str,
) -> None:
    """Append the attempt to the delivery's log and set where it stands; fenced: raises
    queue.LeaseLost when the job is no longer this worker's."""
    now = time.time()
    entry = {
        "at": datetime.fromtimestamp(now, UTC).isoformat(),
        "status_code": status_code,
        "error": error,
        "latency_ms": round((time.monotonic() - started) * 1000),
    }
    async with context.engine.begin() as conn:
        await queue.fence(conn, context.id, context.job.epoch, now=now)
        current = (
            await conn.execute(
                select(deliveries.c.attempts, deliveries.c.attempt_log).where(
                    deliveries.c.id == row.id
                )
            )
        ).one()
        values: dict[str, Any] = {
            "attempts": current.attempts + 1,
            "attempt_log": [*(current.attempt_log or []), entry],
            "last_status_code": status_code,
            "last_error": error,
            "status": final,
        }
        if final == DELIVERED:
            values["delivered_at"] = queue.utc(now)
        await conn.execute(update(deliveries).where(deliveries.c.id == row.id).values(**values))
    log.info(
        "webhook_attempt",
        event_id=row.event_id,
        status_code=status_code,
        error=error,
        outcome=final,
    )


async def post(target: ssrf.Target, headers: dict[str, str], body: bytes, timeout_s: float) -> int:
    """POST to the checked addresses only; the answer's status (never a redirect's target)."""
    connector = aiohttp.TCPConnector(resolver=_Pinned(target), force_close=True, limit=1)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with (
        aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False) as session,
        session.post(target.url, data=body, headers=headers, allow_redirects=False) as response,
    ):
        await response.content.read(_ANSWER_READ_BYTES)
        return response.status


class _Pinned(AbstractResolver):
    """Resolves the target's host to the addresses the guard judged, and nothing else."""

    def __init__(self, target: ssrf.Target) -> None:
        self._target = target

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if host.rstrip(".").lower() != self._target.host:
            raise OSError(f"{host} is not the checked webhook host")
        found: list[ResolveResult] = []
        for address in self._target.addresses:
            kind = socket.AF_INET6 if ":" in address else socket.AF_INET
            if family not in (socket.AF_UNSPEC, kind):
                continue
            found.append(
                ResolveResult(
                    hostname=host,
                    host=address,
                    port=port,
                    family=kind,
                    proto=socket.IPPROTO_TCP,
                    flags=socket.AI_NUMERICHOST,
                )
            )
        if not found:
            raise OSError(f"no checked address of {host} in the family asked for")
        return found

    async def close(self) -> None:
        return None


WEBHOOK_DELIVERY = JobKind(KIND, deliver, max_attempts=8, timeout_s=120.0)
