"""Every movement of a wallet's money, each one transaction that changes the wallet and
appends its ledger entry together, made at most once by its idempotency key.

    reserve   available -> reserved      before the provider call (refused: InsufficientBalance)
    settle    reserved -> charged, the rest back to available, by the real cost
    hold      a reservation whose metering failed stays reserved (`metering_failed`)
    credit    + available                a top-up (per order), an adjustment
    refund    + available                money given back (per refund id)
    dispute   available -> reserved      a chargeback opened (per dispute), then reserved ->
                                         available (won) or reserved -> gone (lost)
    card refund  - available             money sent back to the card (per card refund),
                                         given back when Stripe refused it

A wallet row is changed only by single UPDATE statements whose WHERE clause carries the
condition (`balance_micros >= amount`), so concurrent reservations on one wallet are
serialised by the database's row lock (PostgreSQL) or its one writer (SQLite) and can never
overdraw it: 100 requests racing for a balance that covers 10 reserve exactly 10 times.
A repeated call with the same key (a retried settle, a redelivered webhook) finds its entry
and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Table, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from llmrelay.billing.errors import BillingError, InsufficientBalance, NoWallet
from llmrelay.store.models_billing import LedgerEntry, Reservation, Wallet

__all__ = ["BillingError", "InsufficientBalance", "Movement", "NoWallet"]

wallets: Table = Wallet.__table__  # type: ignore[assignment]
entries: Table = LedgerEntry.__table__  # type: ignore[assignment]
reservations: Table = Reservation.__table__  # type: ignore[assignment]

HELD = "held"
SETTLED = "settled"
RELEASED = "released"
METERING_FAILED = "metering_failed"


@dataclass(frozen=True, slots=True)
class Movement:
    """What a movement did: the wallet's balances after it, and whether it was new (False:
    its idempotency key had been used, nothing changed)."""

    balance_micros: int
    reserved_micros: int
    applied: bool


def _now() -> datetime:
    return datetime.now(UTC)


def _insert(conn: AsyncConnection, table: Table) -> Any:
    dialect = conn.dialect.name
    return (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)


async def _already(conn: AsyncConnection, key: str) -> bool:
    found = await conn.execute(select(entries.c.id).where(entries.c.idempotency_key == key))
    return found.first() is not None


async def _balances(conn: AsyncConnection, tenant_id: str) -> tuple[int, int]:
    row = (
        await conn.execute(
            select(wallets.c.balance_micros, wallets.c.reserved_micros).where(
                wallets.c.tenant_id == tenant_id
            )
        )
    ).first()
    if row is None:
        raise NoWallet(f"tenant {tenant_id} has no wallet")
    return int(row[0]), int(row[1])


async def balances(conn: AsyncConnection, tenant_id: str) -> tuple[int, int]:
    """The wallet's (available, reserved) balances; raises NoWallet."""
    return await _balances(conn, tenant_id)


async def _move(
    conn: AsyncConnection,
    tenant_id: str,
    *,
    kind: str,
    available: int,
    reserved: int,
    key: str,
    require_available: int | None = None,
    request_id: str | None = None,
    order_id: str | None = None,
    actor: str | None = None,
    note: str | None = None,
) -> Movement:
    """Change the wallet by (available, reserved) and append the entry, in the caller's
    transaction, which must be rolled back on any exception (`async with engine.begin()`).
    The wallet changes first: its row stays locked until the commit, so the entry's id (taken
    from the sequence under that lock) orders a wallet's entries as they happened, and each
    entry's balances after it are the wallet's (an id taken before the lock let a later
    movement's entry sort first: the last entry by id then did not show the wallet). A key
    used before stops the movement (its unique index is the one arbiter, also between
    concurrent callers): the wallet's change is undone in the same transaction. With
    `require_available`, the wallet changes only while its available balance is at least
    that much."""
    now = _now()
    changed = await change_wallet(conn, tenant_id, available, reserved, require_available, now)
    if changed is None:
        if await _already(conn, key):  # a replay: answered as one, not as a refusal
            balance, held = await _balances(conn, tenant_id)
            return Movement(balance, held, applied=False)
        balance, _held = await _balances(conn, tenant_id)  # raises NoWallet
        raise InsufficientBalance(require_available or 0, balance)
    balance, held = changed
    entry = (
        _insert(conn, entries)
        .values(
            tenant_id=tenant_id,
            kind=kind,
            amount_micros=available,
            reserved_delta_micros=reserved,
            balance_after_micros=balance,
            reserved_after_micros=held,
            request_id=request_id,
            order_id=order_id,
            idempotency_key=key,
            actor=actor,
            note=note,
            created_at=now,
        )
        .on_conflict_do_nothing(index_elements=["idempotency_key"])
        .returning(entries.c.id)
    )
    if (await conn.execute(entry)).scalar() is None:
        undone = await change_wallet(conn, tenant_id, -available, -reserved, None, now)
        assert undone is not None  # the row changed a moment ago, under this transaction
        return Movement(*undone, applied=False)
    return Movement(balance, held, applied=True)


async def change_wallet(
    conn: AsyncConnection,
    tenant_id: str,
    available: int,
    reserved: int,
    floor: int | None,
    now: datetime,
) -> tuple[int, int] | None:
    """One UPDATE of the wallet, only while its available balance is at least `floor` (when
    given): its balances after, or None when it did not change (no wallet, or under the
    floor). The ledger's entries and the leases both move money through it."""
    condition = wallets.c.tenant_id == tenant_id
    if floor is not None:
        condition = condition & (wallets.c.balance_micros >= floor)
    changed = (
        await conn.execute(
            update(wallets)
            .where(condition)
            .values(
                balance_micros=wallets.c.balance_micros + available,
                reserved_micros=wallets.c.reserved_micros + reserved,
                updated_at=now,
            )
            .returning(wallets.c.balance_micros, wallets.c.reserved_micros)
        )
    ).first()
    return None if changed is None else (int(changed[0]), int(changed[1]))


async def reserve(
    conn: AsyncConnection,
    tenant_id: str,
    request_id: str,
    amount_micros: int,
    *,
    project_id: str | None = None,
    key_id: str | None = None,
) -> Movement:
    """Freeze `amount_micros` for a request, or raise InsufficientBalance (and change
    nothing: the caller's transaction is rolled back). Once per request id."""
    if amount_micros < 0:
        raise BillingError("a reservation cannot be negative")
    movement = await _move(
        conn,
        tenant_id,
        kind="reserve",
        available=-amount_micros,
        reserved=amount_micros,
        key=f"reserve:{request_id}",
        require_available=amount_micros,
        request_id=request_id,
    )
    if movement.applied:
        await conn.execute(
            _insert(conn, reservations).values(
                request_id=request_id,
                tenant_id=tenant_id,
                project_id=project_id,
                key_id=key_id,
                amount_micros=amount_micros,
                status=HELD,
                created_at=_now(),
            )
        )
    return movement


async def settle(
    conn: AsyncConnection, request_id: str, cost_micros: int | None
) -> Movement | None:
    """End a request's reservation: charge its cost and give the rest back. A cost above the
    reservation is charged whole (the balance may go below zero by the difference: the
    provider has been paid). `cost_micros` None: metering failed; the reservation stays held,
    marked `metering_failed`, until `reconcile`. None when the request reserved nothing or
    its reservation was closed already."""
    if cost_micros is None:
        found = await _claim(conn, request_id, (HELD,), METERING_FAILED)
        if found is None:
            return None
        tenant_id, _reserved = found
        return await _move(
            conn,
            tenant_id,
            kind=METERING_FAILED,
            available=0,
            reserved=0,
            key=f"metering_failed:{request_id}",
            request_id=request_id,
            note="usage unknown: the reservation stays until reconciled",
        )
    return await _close(conn, request_id, cost_micros, (HELD,), key="settle")


async def reconcile(
    conn: AsyncConnection, request_id: str, cost_micros: int, *, actor: str | None = None
) -> Movement | None:
    """Settle a reservation whose metering failed (or one never settled: its process died),
    once its cost is known from the records or an operator's decision (0 releases it all)."""
    return await _close(
        conn, request_id, cost_micros, (METERING_FAILED, HELD), key="reconcile", actor=actor
    )


async def _claim(
    conn: AsyncConnection, request_id: str, states: tuple[str, ...], to: str, **values: Any
) -> tuple[str, int] | None:
    """Move the reservation from one of `states` to `to`: the one statement that decides
    which of two concurrent closers closes it (the other finds no row). Its tenant and
    reserved amount, or None."""
    row = (
        await conn.execute(
            update(reservations)
            .where(reservations.c.request_id == request_id, reservations.c.status.in_(states))
            .values(status=to, **values)
            .returning(reservations.c.tenant_id, reservations.c.amount_micros)
        )
    ).first()
    return None if row is None else (str(row[0]), int(row[1]))


async def _close(
    conn: AsyncConnection,
    request_id: str,
    cost: int,
    states: tuple[str, ...],
    *,
    key: str,
    actor: str | None = None,
) -> Movement | None:
    cost = max(0, cost)
    found = await _claim(
        conn,
        request_id,
        states,
        SETTLED if cost else RELEASED,
        charged_micros=cost,
        settled_at=_now(),
    )
    if found is None:
        return None
    tenant_id, reserved = found
    # The reserved amount leaves `reserved`; what it did not cost goes back to available
    # (negative when the cost passed the reservation).
    return await _move(
        conn,
        tenant_id,
        kind="charge" if cost else "release",
        available=reserved - cost,
        reserved=-reserved,
        key=f"{key}:{request_id}",
        request_id=request_id,
        actor=actor,
        note=f"charged {cost} of {reserved} reserved",
    )


async def credit(
    conn: AsyncConnection,
    tenant_id: str,
    amount_micros: int,
    *,
    kind: str,
    key: str,
    order_id: str | None = None,
    request_id: str | None = None,
    actor: str | None = None,
    note: str | None = None,
) -> Movement:
    """Add money (a top-up, a refund, a positive adjustment); a negative adjustment takes
    it away, never below zero. Once per `key`. `request_id`, `order_id`: what it is about."""
    if kind not in ("topup", "refund", "adjustment"):
        raise BillingError(f"unknown credit kind {kind!r}")
    if amount_micros < 0 and kind != "adjustment":
        raise BillingError("a top-up or refund cannot be negative")
    return await _move(
        conn,
        tenant_id,
        kind=kind,
        available=amount_micros,
        reserved=0,
        key=key,
        order_id=order_id,
        request_id=request_id,
        actor=actor,
        note=note,
        require_available=-amount_micros if amount_micros < 0 else None,
    )


async def hold_dispute(
    conn: AsyncConnection, tenant_id: str, dispute_id: str, amount_micros: int, *, order_id: str
) -> Movement:
    """Hold a disputed amount: available -> reserved, once per dispute. Never refused: the
    card holder's bank has taken the money back already, so the available balance may go
    below zero (the tenant's requests then get 402 until it is covered)."""
    return await _move(
        conn,
        tenant_id,
        kind="dispute_hold",
        available=-amount_micros,
        reserved=amount_micros,
        key=f"dispute_hold:{dispute_id}",
        order_id=order_id,
        note=f"dispute {dispute_id} opened",
    )


async def close_dispute(
    conn: AsyncConnection,
    tenant_id: str,
    dispute_id: str,
    held_micros: int,
    *,
    lost: bool,
    order_id: str,
) -> Movement:
    """End a dispute's hold, once: won, the held money is available again; lost, it leaves
    the wallet (the debit of the chargeback)."""
    return await _move(
        conn,
        tenant_id,
        kind="dispute_loss" if lost else "dispute_release",
        available=0 if lost else held_micros,
        reserved=-held_micros,
        key=f"dispute_close:{dispute_id}",
        order_id=order_id,
        note=f"dispute {dispute_id} {'lost' if lost else 'won'}",
    )


async def debit_card_refund(
    conn: AsyncConnection,
    tenant_id: str,
    card_refund_id: str,
    amount_micros: int,
    *,
    order_id: str,
    actor: str | None,
    note: str | None,
) -> Movement:
    """Take a refund to the card from the available balance, once per card refund; raises
    InsufficientBalance (nothing changes) when the balance cannot cover it."""
    return await _move(
        conn,
        tenant_id,
        kind="card_refund",
        available=-amount_micros,
        reserved=0,
        key=f"card_refund:{card_refund_id}",
        require_available=amount_micros,
        order_id=order_id,
        actor=actor,
        note=note,
    )


async def reverse_card_refund(
    conn: AsyncConnection, tenant_id: str, card_refund_id: str, amount_micros: int, *, order_id: str
) -> Movement:
    """Give back a card refund's debit that Stripe refused, once."""
    return await _move(
        conn,
        tenant_id,
        kind="card_refund_reversal",
        available=amount_micros,
        reserved=0,
        key=f"card_refund_reversal:{card_refund_id}",
        order_id=order_id,
        note="Stripe refused the refund",
    )


async def ensure_wallet(conn: AsyncConnection, tenant_id: str, *, prepaid: bool = True) -> None:
    """Create the tenant's wallet (empty) unless it has one."""
    now = _now()
    await conn.execute(
        _insert(conn, wallets)
        .values(
            tenant_id=tenant_id,
            prepaid=prepaid,
            balance_micros=0,
            reserved_micros=0,
            currency="usd",
            auto_topup_enabled=False,
            created_at=now,
            updated_at=now,
        )
        .on_conflict_do_nothing(index_elements=["tenant_id"])
    )
