"""What a lease outliving its process leaves, closed exactly.

- `reclaim_expired`: a lease nobody renewed for its TTL plus a grace (its process died, or
  lost the database that long and stopped admitting under it) is closed by reconciliation:
  each request whose held row its process wrote is settled from its record by the one rule
  (charge.py; no record: `metering_failed`, its amount kept), and the rest goes back to
  available. What the process settled before it died stays settled. Run by the periodic
  `billing_reconcile` job, and by a grant that finds the wallet short (so a small wallet is
  not blocked by a dead process's lease until the next run).
- `settle_closed`: a live process's settles under a lease that was closed meanwhile (it
  could not renew it in time): each request is settled on its own, its cost charged from
  available (the lease's money went back there), or through its held row.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import structlog
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from llmrelay.billing import lease_store, ledger
from llmrelay.billing.charge import charge_of
from llmrelay.billing.lease_store import Entry, Settle
from llmrelay.billing.settle import settle_one
from llmrelay.store.models import RequestRecord

log = structlog.get_logger(__name__)
records = RequestRecord.__table__
leases, reservations = lease_store.leases, ledger.reservations


async def _charges(conn: AsyncConnection, request_ids: Sequence[str]) -> dict[str, int | None]:
    """What each request is charged, from its record (absent: unknown)."""
    found: dict[str, int | None] = dict.fromkeys(request_ids)
    if not request_ids:
        return found
    rows = await conn.execute(
        select(
            records.c.request_id,
            records.c.status_code,
            records.c.attempts,
            records.c.usage_source,
            records.c.cost_micros,
            records.c.price_source,
        ).where(records.c.request_id.in_(list(request_ids)))
    )
    for r in rows:
        found[str(r[0])] = charge_of(int(r[1]), int(r[2] or 0), r[3], r[4], r[5])
    return found


async def reclaim_expired(
    engine: AsyncEngine, *, grace_s: float, tenant_id: str | None = None
) -> int:
    """Close the leases expired more than `grace_s` ago (one transaction each); how many."""
    cutoff = datetime.now(UTC) - timedelta(seconds=grace_s)
    query = select(leases.c.id, leases.c.tenant_id).where(
        leases.c.status == lease_store.OPEN, leases.c.expires_at < cutoff
    )
    if tenant_id is not None:
        query = query.where(leases.c.tenant_id == tenant_id)
    async with engine.connect() as conn:
        expired = (await conn.execute(query.limit(500))).all()
    closed = 0
    for lease_id, tenant in expired:
        async with engine.begin() as conn:
            await lease_store.lock_wallet(conn, str(tenant))
            claimed = (
                await conn.execute(
                    update(leases)
                    .where(
                        leases.c.id == lease_id,
                        leases.c.status == lease_store.OPEN,
                        leases.c.expires_at < cutoff,
                    )
                    .values(updated_at=datetime.now(UTC))
                    .returning(leases.c.id)
                )
            ).first()
            if claimed is None:
                continue  # renewed or closed meanwhile
            held = (
                await conn.execute(
                    select(reservations.c.request_id, reservations.c.amount_micros).where(
                        reservations.c.lease_id == lease_id,
                        reservations.c.status == ledger.HELD,
                    )
                )
            ).all()
            charges = await _charges(conn, [str(h[0]) for h in held])
            items = [Settle(str(h[0]), int(h[1]), charges[str(h[0])], 0, True) for h in held]
            settled, _ = await lease_store.settle_open(conn, str(tenant), str(lease_id), items)
            back = await lease_store.close(conn, str(tenant), str(lease_id))
        closed += 1
        outcomes = Counter(kind for _item, kind in settled)
        log.warning(
            "billing_lease_reclaimed",
            lease_id=lease_id,
            tenant_id=tenant,
            returned_micros=back,
            **outcomes,
        )
    return closed


async def settle_closed(
    conn: AsyncConnection, tenant_id: str, lease_id: str, items: Sequence[Settle]
) -> list[tuple[Settle, str]]:
    """Settle requests of a lease closed before their settles were written."""
    done: list[tuple[Settle, str]] = []
    for item in items:
        rid = item.request_id
        status = (
            await conn.execute(
                select(reservations.c.status).where(reservations.c.request_id == rid)
            )
        ).scalar_one_or_none()
        if status is not None:  # its held row holds its own amount since the close
            done.append((item, await settle_one(conn, rid, tenant_id, item.charge)))
            continue
        final, _entry = lease_store.settle_entry(item)
        await conn.execute(
            reservations.insert().values(
                request_id=rid,
                tenant_id=tenant_id,
                project_id=item.project_id,
                key_id=item.key_id,
                amount_micros=item.amount,
                charged_micros=item.charge,
                status=final,
                created_at=datetime.now(UTC),
                settled_at=None if item.charge is None else datetime.now(UTC),
                lease_id=lease_id,
            )
        )
        if item.charge is None:  # kept: its amount is held again, from available
            note = "usage unknown (lease closed)"
            key = f"metering_failed:{rid}"
            entry = Entry(ledger.METERING_FAILED, -item.amount, item.amount, key, rid, note)
        else:
            kind = "charge" if item.charge else "release"
            note = f"charged {item.charge} (lease closed before the settle)"
            entry = Entry(kind, -item.charge, 0, f"settle:{rid}", rid, note)
        await lease_store.append(conn, tenant_id, [entry])
        done.append((item, entry.kind))
    return done
