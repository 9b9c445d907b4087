"""`llmrelay worker`: the durable jobs alone, without the HTTP side, for deployments that run
them apart from the serving replicas (then set LLMRELAY_JOBS_IN_PROCESS=false on those).

It builds the same stack as `serve` (stack.py): a job that calls a model is admitted,
routed, metered and recorded as a served request is. SIGTERM or SIGINT stops it gracefully:
no new claims, running jobs get LLMRELAY_DRAIN_TIMEOUT_S to finish, the rest go back to the
queue for another worker, records are flushed.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal

import structlog

from llmrelay.gateway.endpoints import DataPlane
from llmrelay.observability.metrics import Metrics
from llmrelay.settings import Settings
from llmrelay.stack import Stack

log = structlog.get_logger(__name__)


async def run_worker(settings: Settings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    stack = await Stack.open(settings, Metrics(), DataPlane(), jobs=True)
    assert stack.runner is not None
    poller = asyncio.create_task(stack.snapshots.poll(settings.snapshot_poll_s))
    log.info("worker_started", worker=stack.runner.worker, kinds=sorted(stack.runner.kinds))
    try:
        await stop.wait()
        log.info("worker_stopping", running=stack.runner.running)
    finally:
        poller.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await poller
        await stack.close()
    log.info("worker_stopped")
