"""Queueing a health probe when the data plane meets a provider that refuses the gateway's
credentials (401/403: gateway/executor.py calls `ProbeTrigger` on that failure path only).

Off the request path: the call only notes the provider and starts a task; the request never
waits for a database write. A burst of refusals (every request to that provider until the
probe marks it unavailable) queues one probe: a provider noted in the last GUARD_S seconds
is not noted again in this process, and the probe's dedupe key holds it to one across
replicas. A failed write is logged and forgotten, so the next refusal tries again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Final

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.jobs import probe

log = structlog.get_logger(__name__)

#: How long a provider that got a probe queued is not queued another by this process.
GUARD_S: Final = 30.0


class ProbeTrigger:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        wake: Callable[[], None] | None = None,
        guard_s: float = GUARD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine = engine
        self._wake = wake
        self._guard_s = guard_s
        self._clock = clock
        #: provider id -> until when further refusals are ignored
        self._pending: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def __call__(self, provider_id: str) -> None:
        now = self._clock()
        if self._pending.get(provider_id, 0.0) > now:
            return
        if len(self._pending) > 1000:  # providers come and go: drop the expired marks
            self._pending = {p: t for p, t in self._pending.items() if t > now}
        self._pending[provider_id] = now + self._guard_s
        task = asyncio.ensure_future(self._enqueue(provider_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _enqueue(self, provider_id: str) -> None:
        try:
            async with self._engine.begin() as conn:
                job_id = await probe.enqueue(conn, provider_id, now=time.time())
        except Exception as exc:  # noqa: BLE001 - a task's boundary: logged, retried next time
            self._pending.pop(provider_id, None)
            log.warning("probe_enqueue_failed", provider_id=provider_id, error=str(exc))
            return
        log.info("provider_credentials_refused", provider_id=provider_id, probe_job=job_id)
        if self._wake is not None:
            self._wake()

    async def close(self) -> None:
        """Let the writes in flight finish (at shutdown, before the engine goes)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
