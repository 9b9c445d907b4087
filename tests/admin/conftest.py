"""The admin app over a real migrated database (SQLite and PostgreSQL), called through
httpx's ASGI transport with the platform admin token."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.app import create_admin
from llmrelay.admin.state import AdminState
from llmrelay.store.crypto import Sealer

ADMIN_TOKEN = "admin-token-for-resource-tests-0123456789"
SEALER = Sealer("resource-tests-secret-key-0123456789abcdefgh")


@pytest.fixture
def admin_state(engine: AsyncEngine) -> AdminState:
    return AdminState(ADMIN_TOKEN, engine=engine, sealer=SEALER)


@pytest.fixture
async def anonymous(admin_state: AdminState) -> AsyncIterator[httpx.AsyncClient]:
    """The admin app without credentials."""
    transport = httpx.ASGITransport(app=create_admin(admin_state))
    async with httpx.AsyncClient(transport=transport, base_url="http://admin") as client:
        yield client


@pytest.fixture
async def admin(anonymous: httpx.AsyncClient) -> httpx.AsyncClient:
    """The admin app as the platform admin (the LLMRELAY_ADMIN_TOKEN bearer)."""
    anonymous.headers["Authorization"] = f"Bearer {ADMIN_TOKEN}"
    return anonymous
