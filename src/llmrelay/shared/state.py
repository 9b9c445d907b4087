"""What a process shares with the other replicas, built at start (stack.py) and closed at
exit: the store (shared/store.py), its write-behind writer, and the two users of both, the
conversation bindings (the executor's `affinity`) and stored responses' homes (the
dispatcher's `homes`), and the breakers' openings, closings and trial claims
(shared/breakers.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.shared.bindings import ResponseHomes, SharedAffinity
from llmrelay.shared.breakers import SharedBreakers
from llmrelay.shared.conversations import SharedConversations
from llmrelay.shared.store import DatabaseEntries, Entries, entries_for
from llmrelay.shared.writer import WriteBehind
from llmrelay.store.crypto import Sealer

if TYPE_CHECKING:
    from llmrelay.gateway.dispatch import Dispatcher
    from llmrelay.gateway.executor import Executor

log = structlog.get_logger("llmrelay.shared")


@dataclass
class SharedState:
    entries: Entries
    writer: WriteBehind
    breakers: SharedBreakers | None = None
    redis_url: str | None = None
    database: DatabaseEntries | None = None

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
        database = DatabaseEntries(engine) if engine.dialect.name == "postgresql" else None
        return cls(entries, WriteBehind(entries), redis_url=redis_url, database=database)

    def install(self, dispatcher: Dispatcher, executor: Executor, sealer: Sealer) -> None:
        executor.affinity = SharedAffinity(self.entries, self.writer)
        dispatcher.homes = ResponseHomes(self.entries, self.writer)
        dispatcher.conversations = SharedConversations(self.entries, self.writer, sealer)
        self.breakers = SharedBreakers(executor.breakers, self.redis_url, self.database)
        self.breakers.start()
        if executor.trials is not None:  # one replica sends each trial (gateway/trials.py)
            executor.trials.claims = self.breakers

    async def close(self) -> None:
        if self.breakers is not None:
            await self.breakers.close()
        await self.writer.close()
        await self.entries.close()
