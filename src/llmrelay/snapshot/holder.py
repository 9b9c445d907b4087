"""Holding the current snapshot and replacing it when the config generation moves.

Readers take `holder.current` once per request and keep that object: a swap is one
attribute assignment, so requests in flight finish on the snapshot they started with.
A build that fails (the builder validates before anything is installed) keeps the last good
snapshot, logs and counts the failure. Refreshes are serialised: two builds racing could
otherwise install the older generation last.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from llmrelay.snapshot.builder import build_snapshot
from llmrelay.snapshot.model import Snapshot
from llmrelay.store.bootstrap import current_generation
from llmrelay.store.crypto import Sealer
from llmrelay.store.db import background_connect

log = structlog.get_logger(__name__)


class SnapshotHolder:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], sealer: Sealer) -> None:
        self._sessions = sessions
        #: The poll reads the generation through a plain connection: a session costs the loop
        #: twice the CPU for one scalar (store/db.background_connect).
        self._engine: AsyncEngine = sessions.kw["bind"]
        self._sealer = sealer
        self._current: Snapshot | None = None
        #: Generations that failed to build (retrying one with the same error counts once).
        self.failed_builds = 0
        #: Why the newest generation could not be built; None once a build succeeds.
        self.last_error: str | None = None
        #: The generation `last_error` is about.
        self.failed_generation: int | None = None
        #: Called with each newly installed snapshot (state keyed by route follows config).
        self.listeners: list[Callable[[Snapshot], None]] = []
        #: Called with (generation, error) for each failure counted in `failed_builds`.
        self.failure_listeners: list[Callable[[int, str], None]] = []
        self._refreshing = asyncio.Lock()

    @property
    def loaded(self) -> bool:
        return self._current is not None

    @property
    def current(self) -> Snapshot:
        snapshot = self._current
        if snapshot is None:
            raise RuntimeError("no config snapshot loaded yet")
        return snapshot

    def age_s(self) -> float:
        return time.time() - self._current.built_at if self._current else float("inf")

    async def load(self) -> Snapshot:
        """Build and install a snapshot now; raises when the build fails."""
        async with self._sessions() as session:
            snapshot = await build_snapshot(session, self._sealer)
        self._current = snapshot
        self.last_error = self.failed_generation = None
        log.info("snapshot_loaded", generation=snapshot.generation)
        for listener in self.listeners:
            listener(snapshot)
        return snapshot

    async def refresh_if_changed(self) -> bool:
        """Rebuild when the stored generation differs from ours, or when ours is due for a
        rebuild (a scheduled price started: `Snapshot.rebuild_at`); False when unchanged or
        when the build failed (the last good snapshot stays)."""
        async with self._refreshing:
            async with background_connect(self._engine) as conn:
                generation = await current_generation(conn)
            current = self._current
            if (
                current is not None
                and generation == current.generation
                and not due(current, time.time())
            ):
                return False
            try:
                await self.load()
            except Exception as exc:  # noqa: BLE001 - a failed build keeps the last good one
                self._failed(generation, f"{type(exc).__name__}: {exc}")
                return False
            return True

    def _failed(self, generation: int, error: str) -> None:
        # A broken generation is retried at every poll and signal (the failure may have been
        # the database's); only a new generation or a new error is logged and counted again.
        repeated = generation == self.failed_generation and error == self.last_error
        self.failed_generation, self.last_error = generation, error
        if repeated:
            log.debug("snapshot_build_failed_again", generation=generation)
            return
        self.failed_builds += 1
        log.error("snapshot_build_failed", generation=generation, error=error)
        for listener in self.failure_listeners:
            listener(generation, error)

    async def poll(self, interval_s: float) -> None:
        """Backstop for missed change signals: check the generation about every `interval_s`
        (each wait drawn within +-10 %, so this timer drifts apart from the process's other
        periodic work instead of landing on the same turn of the event loop as it)."""
        while True:
            await asyncio.sleep(interval_s * random.uniform(0.9, 1.1))
            # Shielded: cancelled in the middle of a query (at shutdown), the query still ends
            # and its connection goes back to the pool; a connection left checked out keeps
            # the driver's thread (aiosqlite's is not a daemon) and the process alive.
            refresh = asyncio.ensure_future(self.refresh_if_changed())
            try:
                await asyncio.shield(refresh)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    await refresh
                raise
            except Exception as exc:  # noqa: BLE001 - the database may be briefly unreachable
                log.warning("snapshot_poll_failed", error=f"{type(exc).__name__}: {exc}")


def due(snapshot: Snapshot, now: float) -> bool:
    """Whether `snapshot` must be rebuilt although the generation has not moved."""
    return snapshot.rebuild_at is not None and now >= snapshot.rebuild_at
