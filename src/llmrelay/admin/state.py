"""What the admin routers share, filled in by the app's start-up (the engine exists only
once the lifespan has run)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.errors import AdminError


@dataclass(slots=True)
class AdminState:
    admin_token: str | None
    engine: AsyncEngine | None = None

    def database(self) -> AsyncEngine:
        if self.engine is None:
            raise AdminError(503, "the database is not open yet", "unavailable")
        return self.engine
