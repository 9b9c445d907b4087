"""The data plane's side of prepaid billing: the reservation before a provider call and the
settle after it, never a transaction per request on the request path when it can be helped.

Two ways, chosen per request:
- a request whose id this process minted is admitted in memory against the wallet's
  allowance (a lease reserved in chunks: allowance.py), and settled in batches
  (lease_writer.py);
- a request carrying its own X-Request-ID (which a billed request may have used: 409), a
  durable job's call, or any request when leases are off (LLMRELAY_BILLING_LEASES=false),
  reserves with its own awaited transaction and is settled by the queue below, one
  transaction per request on a background task.

The settle queue is bounded and in memory. While the database is away the task keeps the
settles and retries them with a growing pause; a settle that cannot be queued (the queue is
full) or is still queued when the process stops is not lost: its reservation stays `held`
in the database, and the reconciliation job (billing/reconcile.py) settles it from the
request's record once the longest possible request is over.

A settle that leaves the wallet's available balance under its auto top-up threshold queues
one `billing_auto_topup` job for the wallet (in the settle's transaction; one live job per
wallet by its dedupe key).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Final

import structlog
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.billing import ledger
from llmrelay.billing.allowance import Leases
from llmrelay.billing.charge import charge_of_row
from llmrelay.billing.errors import LedgerUnavailable, RequestIdUsed
from llmrelay.billing.estimate import ReservePolicy
from llmrelay.billing.lease_store import Settle
from llmrelay.billing.lease_writer import LeaseWriter
from llmrelay.billing.settle import AUTO_TOPUP_KIND, SETTLE_RETRY_PAUSES_S, settle_one
from llmrelay.gateway.row_queue import RowQueue
from llmrelay.observability.metrics import Metrics
from llmrelay.store.db import begin_within

log = structlog.get_logger(__name__)

__all__ = ["AUTO_TOPUP_KIND", "Prepaid", "settle_one"]

#: Settles written per round of the task (each its own transaction).
_BATCH: Final = 256
#: Failures that mean "the database is away", worth retrying.
_TRANSIENT: Final = (DBAPIError, OSError, TimeoutError, ConnectionError)


class Prepaid:
    """Reservations and settles of prepaid requests, for one process."""

    def __init__(
        self,
        engine: AsyncEngine,
        policy: ReservePolicy,
        *,
        metrics: Metrics | None = None,
        max_queue: int = 100_000,
        reserve_timeout_s: float = 5.0,
        leases: Leases | None = None,
        gather_s: float = 0.05,
    ) -> None:
        self.engine = engine
        #: Wallet allowances (None: every request reserves with its own transaction).
        self.leases = leases
        self.lease_writer = (
            None if leases is None else LeaseWriter(leases, metrics=metrics, gather_s=gather_s)
        )
        self.policy = policy
        self._metrics = metrics
        self._queue = RowQueue(max_queue)
        self._reserve_timeout_s = reserve_timeout_s
        self._task: asyncio.Task[None] | None = None
        #: Set while nothing is queued or being written (stop() waits for it).
        self._drained = asyncio.Event()
        self._drained.set()
        #: Settles written, and settles that could not be queued (left held).
        self.settled = 0
        self.dropped = 0
        if metrics is not None:
            metrics.watch(metrics.billing_settle_queue_depth, lambda: self.depth)
            self._reserved = metrics.billing_reservations.labels("reserved")

    @property
    def depth(self) -> int:
        """Settles waiting to be written (both ways)."""
        writer = self.lease_writer
        return len(self._queue) + (0 if writer is None else writer.depth)

    # -- reserve: on the request path ------------------------------------------------------

    async def reserve(
        self,
        tenant_id: str,
        request_id: str,
        amount_micros: int,
        *,
        project_id: str | None,
        key_id: str | None,
        minted: bool = False,
    ) -> None:
        """Freeze `amount_micros` of the tenant's wallet for the request. Raises
        InsufficientBalance, NoWallet, RequestIdUsed or LedgerUnavailable. `minted`: this
        process made the request id (it was never used): the wallet's allowance admits it."""
        leases = self.leases
        if minted and leases is not None:
            if not self.admit_quickly(tenant_id, request_id, amount_micros, project_id, key_id):
                try:
                    await leases.admit(tenant_id, request_id, amount_micros, project_id, key_id)
                except LedgerUnavailable:
                    self._count_reserve("unavailable")
                    raise
                if self._metrics is not None:
                    self._reserved.inc()
            return
        try:
            async with begin_within(self.engine, self._reserve_timeout_s) as conn:
                moved = await ledger.reserve(
                    conn,
                    tenant_id,
                    request_id,
                    amount_micros,
                    project_id=project_id,
                    key_id=key_id,
                )
        except (SQLAlchemyError, *_TRANSIENT) as exc:
            self._count_reserve("unavailable")
            log.warning("billing_reserve_failed", request_id=request_id, error=str(exc)[:300])
            raise LedgerUnavailable(
                "the prepaid balance could not be checked (the database is unreachable); "
                "retry shortly"
            ) from exc
        if not moved.applied:
            self._count_reserve("request_id_used")
            raise RequestIdUsed(request_id)
        self._count_reserve("reserved")

    def admit_quickly(
        self,
        tenant_id: str,
        request_id: str,
        amount_micros: int,
        project_id: str | None,
        key_id: str | None,
        recount: Callable[[], int] | None = None,
    ) -> bool:
        """Admit a request whose id this process minted against its wallet's allowance in
        memory, if the allowance has room now (else False: `reserve` waits for a grant).
        `recount`: the exact reservation of an amount made on a bound (allowance.Admitted)."""
        leases = self.leases
        if leases is None or not leases.try_admit(
            tenant_id, request_id, amount_micros, project_id, key_id, recount
        ):
            return False
        if self._metrics is not None:
            self._reserved.inc()
        return True

    async def held(self, request_id: str) -> bool:
        """Whether the request has a reservation still held: a durable job's attempt finds
        the one an earlier attempt made before its worker stopped (gateway/headless.py)."""
        try:
            async with self.engine.connect() as conn:
                status = (
                    await conn.execute(
                        select(ledger.reservations.c.status).where(
                            ledger.reservations.c.request_id == request_id
                        )
                    )
                ).scalar_one_or_none()
        except (SQLAlchemyError, *_TRANSIENT) as exc:
            raise LedgerUnavailable("the prepaid reservation could not be read") from exc
        return status == ledger.HELD

    async def keep_unmetered(self, request_id: str) -> None:
        """Mark a held reservation `metering_failed` (kept until reconciled): the provider
        was called and may have billed, but nobody will ever know its usage."""
        try:
            async with self.engine.begin() as conn:
                await ledger.settle(conn, request_id, None)
        except (SQLAlchemyError, *_TRANSIENT) as exc:
            raise LedgerUnavailable("the prepaid reservation could not be kept") from exc

    def count_refusal(self, outcome: str) -> None:
        self._count_reserve(outcome)

    def _count_reserve(self, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.billing_reservations.labels(outcome).inc()

    # -- settle: queued when the request ends ------------------------------------------------

    def settle(self, row: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """Queue the settle of a finished request, from its record row (RECORD_COLUMNS).
        A settle under a wallet lease is returned as the journal keeps it (spool.py
        SETTLE_COLUMNS): it has no row in the database until the lease writer's next round.
        (A reservation made by its own transaction has its held row: reconciliation settles
        it from the record.)"""
        request_id, tenant_id, charge = charge_of_row(row)
        leases = self.leases
        if leases is not None:
            ended = leases.end(request_id, charge)
            if ended is not None:
                tenant, lease_id, item = ended
                return (tenant, lease_id, item.request_id, item.amount, item.charge, item.over,
                        item.project_id, item.key_id)  # fmt: skip
        if self._queue.put((request_id, tenant_id, charge)):
            self._drained.clear()
        else:
            self.dropped += 1
            self._count_settle("dropped")
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.error("billing_settle_queue_full", dropped=self.dropped)
        return None

    async def write_journaled(self, rows: list[tuple[Any, ...]]) -> None:
        """Lease settles a dead process's journal kept (gateway/journal.py), written as its
        lease writer would have: one transaction per lease, idempotent by request id.
        Raises when the database did not take them (the journal file stays)."""
        writer = self.lease_writer
        if writer is None:  # leases off here now: the same transactions, by a writer made for it
            writer = LeaseWriter(Leases(self.engine, owner="journal"))
        groups: dict[tuple[str, str], list[Settle]] = {}
        for tenant, lease_id, rid, amount, charge, over, project, key in rows:
            item = Settle(rid, amount, charge, over, False, project, key)
            groups.setdefault((tenant, lease_id), []).append(item)
        for (tenant, lease_id), items in groups.items():
            await writer.write(tenant, lease_id, items)
        log.info("journal_settles_written", settles=len(rows), leases=len(groups))

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())
        if self.lease_writer is not None:
            self.lease_writer.start()

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Write what is queued (within `timeout_s`), close the leases, then stop. What is
        left stays held."""
        if self.lease_writer is not None:
            await self.lease_writer.stop(timeout_s)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._drained.wait()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if len(self._queue):
            log.warning("billing_settles_left_held", count=len(self._queue))

    async def _run(self) -> None:
        failures = 0
        while True:
            await self._queue.wait()
            batch = self._queue.take(_BATCH)
            done = await self._write(batch)
            if done < len(batch):
                self._queue.put_back(batch[done:])
                pause = SETTLE_RETRY_PAUSES_S[min(failures, len(SETTLE_RETRY_PAUSES_S) - 1)]
                failures += 1
                await asyncio.sleep(pause)
            else:
                failures = 0
                if not len(self._queue):
                    self._drained.set()

    async def _write(self, batch: list[tuple[Any, ...]]) -> int:
        """Settle each (in its own transaction); how many were done before the database
        failed (the rest are retried)."""
        for done, (request_id, tenant_id, charge) in enumerate(batch):
            try:
                async with self.engine.begin() as conn:
                    outcome = await settle_one(conn, request_id, tenant_id, charge)
            except _TRANSIENT as exc:
                self._count_settle("retried")
                log.warning("billing_settle_retry", request_id=request_id, error=str(exc)[:300])
                return done
            except Exception:  # a bug, not an outage: logged; the reservation stays held
                self._count_settle("failed")
                log.exception("billing_settle_failed", request_id=request_id)
                continue
            self.settled += 1
            self._count_settle(outcome)
        return len(batch)

    def _count_settle(self, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.billing_settlements.labels(outcome).inc()
