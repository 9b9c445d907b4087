"""Live reload in a serving process: the listener, the coalescing refresher and the publisher,
built once at start-up and stopped at shutdown (app.py's lifespan).

    signal (Redis / PG NOTIFY) ──┐
    (re)connection ──────────────┤
    this process's own publish ──┼─> CoalescingRefresher ─> SnapshotHolder.refresh_if_changed
    Snapshot.rebuild_at (timer) ─┘         (one running, one pending at most)
    poll every snapshot_poll_s ────> SnapshotHolder.refresh_if_changed (the backstop)

The timer is for what changes with no change to the config: a scheduled price version
starting (the generation does not move then).

`publisher` is what this process's own control plane (the admin API's services) calls after
committing a change; see signals.py for the exact call.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.observability.metrics import Metrics
from llmrelay.snapshot.holder import SnapshotHolder
from llmrelay.snapshot.listener import ListenerState, SignalListener
from llmrelay.snapshot.model import Snapshot
from llmrelay.snapshot.refresher import CoalescingRefresher
from llmrelay.snapshot.signals import ConfigPublisher

#: A timer may fire a hair early (the loop's clock resolution); the rebuild it asks for must
#: find the moment passed, or it would do nothing and arm no new timer.
_REBUILD_MARGIN_S = 0.01
#: The longest this process's admin API waits for its own rebuild after a change.
OWN_CHANGE_WAIT_S = 2.0


class LiveReload:
    def __init__(
        self,
        snapshots: SnapshotHolder,
        *,
        engine: AsyncEngine,
        database_url: str,
        redis_url: str | None,
        metrics: Metrics,
    ) -> None:
        self._snapshots = snapshots
        self._metrics = metrics
        self.refresher = CoalescingRefresher(snapshots.refresh_if_changed)
        self.listener = SignalListener(
            self._signalled,
            database_url=database_url,
            redis_url=redis_url,
            on_state=self._state_changed,
        )
        self.publisher = ConfigPublisher(
            engine=engine,
            redis_url=redis_url,
            on_failure=lambda transport: metrics.config_signal_publish_failures.labels(
                transport
            ).inc(),
            on_publish=lambda _generation: self.refresher.request(),  # this process's own
            served=self._serving_own_change,
        )
        self._task: asyncio.Task[None] | None = None
        self._rebuild_timer: asyncio.TimerHandle | None = None
        snapshots.listeners.append(self._schedule_rebuild)
        snapshots.failure_listeners.append(
            lambda _generation, _error: metrics.snapshot_build_failures.inc()
        )

    def start(self) -> None:
        self._task = asyncio.create_task(self.listener.run())
        if self._snapshots.loaded:
            self._schedule_rebuild(self._snapshots.current)

    async def stop(self) -> None:
        """Stop listening, let a rebuild in flight finish, close the publisher."""
        if self._rebuild_timer is not None:
            self._rebuild_timer.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.refresher.close()
        await self.publisher.close()

    async def _serving_own_change(self) -> None:
        """Wait (at most OWN_CHANGE_WAIT_S) until the rebuild this process asked for after
        its own change is done, so its admin API answers once it serves the change: a key
        created through it works on the next request, a revoked one is refused. Without
        this, a client could race the rebuild (401 for a key it was just given). A build
        that fails or takes longer does not hold the answer past the bound; polling and
        the next change retry it."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.refresher.idle()), OWN_CHANGE_WAIT_S)

    def describe(self) -> dict[str, object]:
        return self.listener.describe()

    def _signalled(self, generation: int | None) -> None:
        if generation is not None:
            self._metrics.config_signals_received.labels(self.listener.transport).inc()
            snapshots = self._snapshots
            if snapshots.loaded and snapshots.current.generation == generation:
                return  # already serving it (our own publish, or a duplicate)
        self.refresher.request()

    def _schedule_rebuild(self, snapshot: Snapshot) -> None:
        """Ask for a rebuild when `snapshot` falls due (the next scheduled price starts):
        nothing moves the generation at that moment, and the poll may be a minute away. Each
        newly installed snapshot replaces the timer of the one before."""
        if self._rebuild_timer is not None:
            self._rebuild_timer.cancel()
            self._rebuild_timer = None
        if snapshot.rebuild_at is None:
            return
        delay = max(0.0, snapshot.rebuild_at - time.time()) + _REBUILD_MARGIN_S
        loop = asyncio.get_running_loop()
        self._rebuild_timer = loop.call_later(delay, self.refresher.request)

    def _state_changed(self, state: ListenerState) -> None:
        self._metrics.config_signal_listening.set(1 if state is ListenerState.LISTENING else 0)
