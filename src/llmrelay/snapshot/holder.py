"""Holding the current snapshot and replacing it when the config generation moves.

Readers take `holder.current` once per request and keep that object: a swap is one
attribute assignment, so requests in flight finish on the snapshot they started with.
A build that fails keeps the last good snapshot, logs and counts the failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from llmrelay.snapshot.builder import build_snapshot
from llmrelay.snapshot.model import Snapshot
from llmrelay.store.bootstrap import current_generation
from llmrelay.store.crypto import Sealer

log = structlog.get_logger(__name__)


class SnapshotHolder:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], sealer: Sealer) -> None:
        self._sessions = sessions
        self._sealer = sealer
        self._current: Snapshot | None = None
        self.failed_builds = 0
        self.last_error: str | None = None
        #: Called with each newly installed snapshot (state keyed by route follows config).
        self.listeners: list[Callable[[Snapshot], None]] = []

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
        self.last_error = None
        log.info("snapshot_loaded", generation=snapshot.generation)
        for listener in self.listeners:
            listener(snapshot)
        return snapshot

    async def refresh_if_changed(self) -> bool:
        """Rebuild when the stored generation differs from ours; False when unchanged."""
        async with self._sessions() as session:
            generation = await current_generation(session)
        if self._current is not None and generation == self._current.generation:
            return False
        try:
            await self.load()
        except Exception as exc:  # noqa: BLE001 - any failed build keeps the last good snapshot
            self.failed_builds += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.error("snapshot_build_failed", generation=generation, error=self.last_error)
            return False
        return True

    async def poll(self, interval_s: float) -> None:
        """Backstop for missed change signals: check the generation every `interval_s`."""
        while True:
            await asyncio.sleep(interval_s)
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
