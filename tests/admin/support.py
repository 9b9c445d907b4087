"""Helpers the resource tests share: the config generation, a snapshot rebuilt from the
database (what a replica would serve), walking a list route's pages, and If-Match headers."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.snapshot.builder import build_snapshot
from llmrelay.snapshot.model import Snapshot
from llmrelay.store.bootstrap import current_generation
from llmrelay.store.db import session_factory
from tests.admin.conftest import SEALER


async def generation(engine: AsyncEngine) -> int:
    async with session_factory(engine)() as session:
        return await current_generation(session)


async def snapshot(engine: AsyncEngine) -> Snapshot:
    async with session_factory(engine)() as session:
        return await build_snapshot(session, SEALER)


async def walk_pages(client: httpx.AsyncClient, url: str, limit: int) -> list[list[dict[str, Any]]]:
    """Every page of a list route, `limit` rows a page, following `next_cursor` to the end."""
    walked: list[list[dict[str, Any]]] = []
    cursor = None
    while True:
        params: dict[str, str | int] = {"limit": limit}
        if cursor:
            params["cursor"] = cursor
        page = (await client.get(url, params=params)).json()
        walked.append(page["data"])
        cursor = page["next_cursor"]
        if cursor is None:
            return walked


def match(response: httpx.Response) -> dict[str, str]:
    """If-Match for the version a response showed."""
    return {"If-Match": response.headers["ETag"]}


async def audit_actions(engine: AsyncEngine) -> list[tuple[str, str | None, int]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT action, target_id, status_code FROM audit_log ORDER BY id")
        )
        return [(r[0], r[1], r[2]) for r in rows]


def assert_error(response: httpx.Response, status: int, field: str | None = None) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"]
    if field is not None:
        assert error.get("field") == field, error
