"""The transactions of wallet leases (billing/allowance.py keeps them in memory): a grant
moves a chunk of a wallet's available balance into a lease (one `lease` entry), a batch of
settles charges many requests admitted under it in one transaction (still one reservation
row and one ledger entry per request, idempotent by request id), and a close gives back what
is left (one `lease_return` entry). Every function runs in the caller's transaction.

Ledger entries of a batch are appended after one UPDATE of the wallet by their total; each
entry's balances after it are worked out from the wallet's new balances backwards (the row is
locked by that UPDATE until the commit, so no other movement can come between them).

Money of an open lease: `granted - consumed`, in the wallet's `reserved_micros`. A request
admitted under it consumes its cost when it settles (or its whole reservation when metering
failed: the reservation row then holds that amount itself, as any `metering_failed` one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, NamedTuple

from sqlalchemy import Table, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from llmrelay.billing import ledger
from llmrelay.billing.errors import InsufficientBalance, NoWallet
from llmrelay.billing.rows_sql import bind_time, insert_for
from llmrelay.store.models import new_id
from llmrelay.store.models_billing import WalletLease

leases: Table = WalletLease.__table__  # type: ignore[assignment]
wallets, entries, reservations = ledger.wallets, ledger.entries, ledger.reservations

#: The columns of the rows a round writes per request, in their statements' order.
_ENTRY_COLUMNS: Final = (
    "tenant_id",
    "kind",
    "amount_micros",
    "reserved_delta_micros",
    "balance_after_micros",
    "reserved_after_micros",
    "request_id",
    "order_id",
    "idempotency_key",
    "actor",
    "note",
    "created_at",
)
_RESERVATION_COLUMNS: Final = (
    "request_id",
    "tenant_id",
    "project_id",
    "key_id",
    "amount_micros",
    "charged_micros",
    "status",
    "created_at",
    "settled_at",
    "lease_id",
)
#: A request without a row gets its final one; one whose held row was written under this
#: lease has it closed; any other row (a reused id, a request closed by someone else, a
#: settle written before) is left alone, and RETURNING leaves it out: not charged twice.
#: A held row takes the settle's amount too: a request admitted on a bound may have been
#: trued up to its exact reservation since (allowance.Leases.true_up).
_SETTLE_UPSERT: Final = (
    " ON CONFLICT (request_id) DO UPDATE SET status = excluded.status,"
    " amount_micros = excluded.amount_micros,"
    " charged_micros = excluded.charged_micros, settled_at = excluded.settled_at"
    f" WHERE reservations.status = '{ledger.HELD}'"
    " AND reservations.lease_id = excluded.lease_id"
    " RETURNING request_id"
)

OPEN: Final = "open"
CLOSED: Final = "closed"
LEASE: Final = "lease"
LEASE_RETURN: Final = "lease_return"


class Entry(NamedTuple):
    """One ledger entry to append: its kind, the signed changes to available and reserved,
    its idempotency key, the request it is about. (A named tuple: one is made per settle,
    and a frozen dataclass costs several times as much to make.)"""

    kind: str
    available: int
    reserved: int
    key: str
    request_id: str | None = None
    note: str | None = None


@dataclass(frozen=True, slots=True)
class Grant:
    lease_id: str
    amount: int
    balance_micros: int


@dataclass(slots=True)
class Settle:
    """A request admitted under a lease: ended (`charge` None when metering failed; `over`,
    the part of a cost above the reservation the lease could not cover in memory, charged
    from available), or still in flight (`held` True: its held row is to be written)."""

    request_id: str
    amount: int
    charge: int | None
    over: int
    held: bool
    project_id: str | None = None
    key_id: str | None = None


def _now() -> datetime:
    return datetime.now(UTC)


async def append(conn: AsyncConnection, tenant_id: str, moves: Sequence[Entry]) -> tuple[int, int]:
    """Change the wallet by the entries' total and append them, each with its balances after
    it; the wallet's (available, reserved) after all. Raises NoWallet."""
    available = sum(e.available for e in moves)
    reserved = sum(e.reserved for e in moves)
    changed = await ledger.change_wallet(conn, tenant_id, available, reserved, None, _now())
    if changed is None:
        raise NoWallet(f"tenant {tenant_id} has no wallet")
    await _entries(conn, tenant_id, moves, *changed)
    return changed


async def _entries(
    conn: AsyncConnection, tenant_id: str, moves: Sequence[Entry], balance: int, held: int
) -> None:
    """Append entries whose total the wallet just moved to (`balance`, `held`)."""
    if not moves:
        return
    now = bind_time(conn, entries, "created_at", _now())
    running_balance = balance - sum(e.available for e in moves)
    running_held = held - sum(e.reserved for e in moves)
    rows: list[tuple[Any, ...]] = []
    for e in moves:
        running_balance += e.available
        running_held += e.reserved
        rows.append(
            (
                tenant_id,
                e.kind,
                e.available,
                e.reserved,
                running_balance,
                running_held,
                e.request_id,
                None,  # order_id
                e.key,
                None,  # actor
                e.note,
                now,
            )
        )
    await insert_for(conn, entries, _ENTRY_COLUMNS).run(conn, rows)


async def lock_wallet(conn: AsyncConnection, tenant_id: str) -> tuple[int, int]:
    """The wallet's (available, reserved), its row locked for the transaction: every lease
    transaction takes the wallet first, then the lease, so two never wait for each other
    (and on SQLite this first write takes the one write lock at once). Raises NoWallet."""
    row = (
        await conn.execute(
            update(wallets)
            .where(wallets.c.tenant_id == tenant_id)
            .values(updated_at=_now())
            .returning(wallets.c.balance_micros, wallets.c.reserved_micros)
        )
    ).first()
    if row is None:
        raise NoWallet(f"tenant {tenant_id} has no wallet")
    return int(row[0]), int(row[1])


async def grant(
    conn: AsyncConnection,
    tenant_id: str,
    lease_id: str | None,
    *,
    owner: str,
    need: int,
    target: int,
    ttl_s: float,
) -> Grant:
    """Move money from the wallet's available balance into the lease (a new one when
    `lease_id` is None or that lease was closed): `target` when the wallet has it, else half
    of what it has (other processes may want some), never less than `need`. Raises
    InsufficientBalance when the wallet cannot give `need`, NoWallet."""
    available = (await lock_wallet(conn, tenant_id))[0]
    if available < need:
        raise InsufficientBalance(need, max(available, 0))
    take = target if available >= target else min(available, max(need, available // 2))
    changed = await ledger.change_wallet(conn, tenant_id, -take, take, take, _now())
    assert changed is not None  # the row is locked: its balance has not moved
    now = _now()
    expires = now + timedelta(seconds=ttl_s)
    grants: int | None = None
    if lease_id is not None:
        grants = (
            await conn.execute(
                update(leases)
                .where(leases.c.id == lease_id, leases.c.status == OPEN)
                .values(
                    granted_micros=leases.c.granted_micros + take,
                    grants=leases.c.grants + 1,
                    expires_at=expires,
                    updated_at=now,
                )
                .returning(leases.c.grants)
            )
        ).scalar()
    if lease_id is None or grants is None:
        lease_id, grants = new_id(), 1
        await conn.execute(
            leases.insert().values(
                id=lease_id,
                tenant_id=tenant_id,
                owner=owner[:100],
                granted_micros=take,
                consumed_micros=0,
                grants=1,
                status=OPEN,
                expires_at=expires,
                created_at=now,
                updated_at=now,
            )
        )
    key = f"lease:{lease_id}:{grants}"
    await _entries(conn, tenant_id, [Entry(LEASE, -take, take, key, note=f"lease {lease_id}")],
                   *changed)  # fmt: skip
    return Grant(lease_id, take, changed[0])


async def renew(conn: AsyncConnection, lease_ids: Sequence[str], ttl_s: float) -> set[str]:
    """Push the leases' expiry on; those still open (the others were closed by
    reconciliation while this process could not renew them)."""
    if not lease_ids:
        return set()
    now = _now()
    rows = await conn.execute(
        update(leases)
        .where(leases.c.id.in_(list(lease_ids)), leases.c.status == OPEN)
        .values(expires_at=now + timedelta(seconds=ttl_s), updated_at=now)
        .returning(leases.c.id)
    )
    return {str(r[0]) for r in rows}


async def close(conn: AsyncConnection, tenant_id: str, lease_id: str) -> int | None:
    """Close an open lease: the reservations still held under it keep their amounts (they
    are consumed: each row now holds its own), the rest goes back to available. What went
    back, or None when it was not open."""
    await lock_wallet(conn, tenant_id)
    now = _now()
    row = (
        await conn.execute(
            update(leases)
            .where(leases.c.id == lease_id, leases.c.status == OPEN)
            .values(status=CLOSED, closed_at=now, updated_at=now)
            .returning(leases.c.tenant_id, leases.c.granted_micros, leases.c.consumed_micros)
        )
    ).first()
    if row is None:
        return None
    granted, consumed = int(row[1]), int(row[2])
    still_held = (
        await conn.execute(
            select(reservations.c.amount_micros).where(
                reservations.c.lease_id == lease_id, reservations.c.status == ledger.HELD
            )
        )
    ).all()
    consumed += sum(int(r[0]) for r in still_held)
    back = granted - consumed
    await append(conn, tenant_id, [Entry(LEASE_RETURN, back, -back, f"lease_return:{lease_id}")])
    await conn.execute(
        update(leases)
        .where(leases.c.id == lease_id)
        .values(consumed_micros=consumed, returned_micros=back)
    )
    return back


async def is_open(conn: AsyncConnection, tenant_id: str, lease_id: str) -> bool:
    """Lock the wallet, then the lease row, for the transaction (PostgreSQL; SQLite has one
    writer) and say whether the lease is open."""
    await lock_wallet(conn, tenant_id)
    found = (
        await conn.execute(
            update(leases)
            .where(leases.c.id == lease_id, leases.c.status == OPEN)
            .values(updated_at=_now())
            .returning(leases.c.id)
        )
    ).first()
    return found is not None


def settle_entry(item: Settle) -> tuple[str, Entry]:
    """The reservation's final status and the entry of a request settled under an open
    lease: its cost leaves reserved (the part above what the lease covered leaves available);
    a `metering_failed` one moves no money (its amount stays reserved, now its own)."""
    rid = item.request_id
    if item.charge is None:
        note = "usage unknown: the reservation stays until reconciled"
        return ledger.METERING_FAILED, Entry(
            ledger.METERING_FAILED, 0, 0, f"metering_failed:{rid}", rid, note
        )
    cost = item.charge
    kind = "charge" if cost else "release"
    note = f"charged {cost} of {item.amount} reserved (lease)"
    entry = Entry(kind, -item.over, -(cost - item.over), f"settle:{rid}", rid, note)
    return (ledger.SETTLED if cost else ledger.RELEASED), entry


def consumed_by(item: Settle, entry: Entry) -> int:
    """What the settle takes from the lease's money."""
    return item.amount if item.charge is None else -entry.reserved


async def write_holds(
    conn: AsyncConnection, tenant_id: str, lease_id: str, holds: Sequence[Settle]
) -> None:
    """The held rows of requests still in flight (their money stays the lease's)."""
    if not holds:
        return
    now = _now()
    await conn.execute(
        ledger._insert(conn, reservations).on_conflict_do_nothing(index_elements=["request_id"]),
        [
            {
                "request_id": h.request_id,
                "tenant_id": tenant_id,
                "project_id": h.project_id,
                "key_id": h.key_id,
                "amount_micros": h.amount,
                "charged_micros": None,
                "status": ledger.HELD,
                "created_at": now,
                "settled_at": None,
                "lease_id": lease_id,
            }
            for h in holds
        ],
    )


async def settle_open(
    conn: AsyncConnection, tenant_id: str, lease_id: str, items: Sequence[Settle]
) -> tuple[list[tuple[Settle, str]], int]:
    """Settle requests admitted under an open lease (is_open locked it), in one go: the
    settled ones with their entry's kind, and the wallet's available balance after.

    One upsert per request: a request without a row gets its final one; one whose held row
    was written under this lease has it closed; any other row (a reused id, a request closed
    by someone else) is left alone and the request is not charged twice."""
    if not items:
        return [], 0
    now = bind_time(conn, reservations, "created_at", _now())
    finals = {item.request_id: settle_entry(item) for item in items}
    closed = await insert_for(conn, reservations, _RESERVATION_COLUMNS, _SETTLE_UPSERT).run(
        conn,
        [
            (
                i.request_id,
                tenant_id,
                i.project_id,
                i.key_id,
                i.amount,
                i.charge,
                finals[i.request_id][0],
                now,
                None if i.charge is None else now,
                lease_id,
            )
            for i in items
        ],
    )
    done = {str(r) for r in closed}
    applied = [i for i in items if i.request_id in done]
    moves = [finals[i.request_id][1] for i in applied]
    consumed = sum(consumed_by(i, finals[i.request_id][1]) for i in applied)
    balance, _ = await append(conn, tenant_id, moves)
    if consumed:
        await conn.execute(
            update(leases)
            .where(leases.c.id == lease_id)
            .values(consumed_micros=leases.c.consumed_micros + consumed)
        )
    return [(i, finals[i.request_id][1].kind) for i in applied], balance
