"""The SQL of the billing routes: wallets, ledger entries, reservations and orders of one
tenant, newest first, with keyset cursors (an entry's id; a (time, id) pair for the rest),
so a page boundary stays put while new rows arrive."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Select, func, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.kit.problems import Invalid
from llmrelay.store.models_billing import LedgerEntry, PaymentOrder, Reservation, Wallet


def _encode(*parts: str) -> str:
    return base64.urlsafe_b64encode("|".join(parts).encode()).decode().rstrip("=")


def _decode(cursor: str, parts: int) -> list[str]:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise Invalid("cursor: not a cursor this API gave", "cursor") from None
    found = text.split("|")
    if len(found) != parts or not all(found):
        raise Invalid("cursor: not a cursor this API gave", "cursor")
    return found


def _time(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise Invalid("cursor: not a cursor this API gave", "cursor") from None


async def wallet(session: AsyncSession, tenant_id: str) -> Wallet | None:
    return await session.get(Wallet, tenant_id, populate_existing=True)


async def ledger_page(
    session: AsyncSession,
    tenant_id: str,
    *,
    kind: str | None,
    request_id: str | None,
    order_id: str | None,
    since: datetime | None,
    until: datetime | None,
    limit: int,
    cursor: str | None,
) -> tuple[Sequence[LedgerEntry], str | None]:
    query = select(LedgerEntry).where(LedgerEntry.tenant_id == tenant_id)
    if kind is not None:
        query = query.where(LedgerEntry.kind == kind)
    if request_id is not None:
        query = query.where(LedgerEntry.request_id == request_id)
    if order_id is not None:
        query = query.where(LedgerEntry.order_id == order_id)
    if since is not None:
        query = query.where(LedgerEntry.created_at >= since)
    if until is not None:
        query = query.where(LedgerEntry.created_at < until)
    if cursor is not None:
        (last,) = _decode(cursor, 1)
        if not last.isdigit():
            raise Invalid("cursor: not a cursor this API gave", "cursor")
        query = query.where(LedgerEntry.id < int(last))
    rows = (await session.scalars(query.order_by(LedgerEntry.id.desc()).limit(limit + 1))).all()
    if len(rows) <= limit:
        return rows, None
    return rows[:limit], _encode(str(rows[limit - 1].id))


async def _timed_page(
    session: AsyncSession,
    query: Select[Any],
    time_column: Any,
    id_column: Any,
    limit: int,
    cursor: str | None,
) -> tuple[Sequence[Any], str | None]:
    if cursor is not None:
        at, last = _decode(cursor, 2)
        query = query.where(tuple_(time_column, id_column) < tuple_(_time(at), last))
    query = query.order_by(time_column.desc(), id_column.desc()).limit(limit + 1)
    rows = (await session.scalars(query)).all()
    if len(rows) <= limit:
        return rows, None
    edge = rows[limit - 1]
    key = edge.request_id if isinstance(edge, Reservation) else edge.id
    return rows[:limit], _encode(edge.created_at.isoformat(), str(key))


async def reservation_page(
    session: AsyncSession, tenant_id: str, status: str | None, limit: int, cursor: str | None
) -> tuple[Sequence[Reservation], str | None]:
    query = select(Reservation).where(Reservation.tenant_id == tenant_id)
    if status is not None:
        query = query.where(Reservation.status == status)
    return await _timed_page(
        session, query, Reservation.created_at, Reservation.request_id, limit, cursor
    )


async def reservation(session: AsyncSession, request_id: str) -> Reservation | None:
    return await session.get(Reservation, request_id, populate_existing=True)


async def order_page(
    session: AsyncSession, tenant_id: str, status: str | None, limit: int, cursor: str | None
) -> tuple[Sequence[PaymentOrder], str | None]:
    query = select(PaymentOrder).where(PaymentOrder.tenant_id == tenant_id)
    if status is not None:
        query = query.where(PaymentOrder.status == status)
    return await _timed_page(
        session, query, PaymentOrder.created_at, PaymentOrder.id, limit, cursor
    )


async def order(session: AsyncSession, order_id: str) -> PaymentOrder | None:
    return await session.get(PaymentOrder, order_id, populate_existing=True)


async def refunded_for_request(session: AsyncSession, tenant_id: str, request_id: str) -> int:
    """Micro-USD refunded so far against one request."""
    total = await session.scalar(
        select(func.coalesce(func.sum(LedgerEntry.amount_micros), 0)).where(
            LedgerEntry.tenant_id == tenant_id,
            LedgerEntry.kind == "refund",
            LedgerEntry.request_id == request_id,
        )
    )
    return int(total or 0)
