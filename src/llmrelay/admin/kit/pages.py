"""Cursor pagination over a select: rows in id order after an opaque cursor (the last id a
page showed), one extra row fetched to know whether another page follows. Ids never change,
so a page boundary stays put while rows are added or removed."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from llmrelay.admin.kit.problems import Invalid

MAX_LIMIT = 500


def encode(last_id: str) -> str:
    return base64.urlsafe_b64encode(last_id.encode()).decode().rstrip("=")


def decode(cursor: str) -> str:
    try:
        value = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise Invalid("cursor: not a cursor this API gave", "cursor") from None
    if not value or len(value) > 64:
        raise Invalid("cursor: not a cursor this API gave", "cursor")
    return value


async def page(
    session: AsyncSession,
    query: Select[Any],
    id_column: InstrumentedAttribute[str],
    limit: int,
    cursor: str | None,
) -> tuple[Sequence[Any], str | None]:
    if cursor is not None:
        query = query.where(id_column > decode(cursor))
    rows = (await session.scalars(query.order_by(id_column).limit(limit + 1))).all()
    if len(rows) <= limit:
        return rows, None
    last: Any = rows[limit - 1]
    return rows[:limit], encode(str(last.id))
