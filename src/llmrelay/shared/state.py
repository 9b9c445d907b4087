"""What a process shares with the other replicas, built at start (stack.py) and closed at
exit: the store (shared/store.py), its write-behind writer, and the two users of both, the
conversation bindings (the executor's `affinity`) and stored responses' homes (the
dispatcher's `homes`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.shared.bindings import ResponseHomes, SharedAffinity
from llmrelay.shared.store import Entries, entries_for
from llmrelay.shared.writer import WriteBehind

if TYPE_CHECKING:
    from llmrelay.gateway.dispatch import Dispatcher
    from llmrelay.gateway.executor import Executor

log = structlog.get_logger("llmrelay.shared")


@dataclass
class SharedState:
    entries: Entries
    writer: WriteBehind

    @classmethod
    def open(cls, redis_url: str | None, engine: AsyncEngine) -> SharedState | None:
        """None for one process on SQLite without Redis (its state stays in memory)."""
        entries = entries_for(redis_url, engine)
        if entries is None:
            return None
        log.info(
            "shared_state",
            store="redis" if redis_url is not None else "database",
            fallback="database" if engine.dialect.name == "postgresql" else "process",
        )
        return cls(entries, WriteBehind(entries))

    def install(self, dispatcher: Dispatcher, executor: Executor) -> None:
        executor.affinity = SharedAffinity(self.entries, self.writer)
        dispatcher.homes = ResponseHomes(self.entries, self.writer)

    async def close(self) -> None:
        await self.writer.close()
        await self.entries.close()
