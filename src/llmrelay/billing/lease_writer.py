"""The background writer of wallet leases (allowance.py): the settles of requests admitted
in memory, many in one transaction per lease (gathered until BATCH of them are queued or
_MAX_GATHER_S passed, in steps of `gather_s`: a round's transaction costs about the same for
5 settles as for 500, so the CPU per settle falls with the batch, and at most one batch is
ever only in memory), the held rows of requests
still in flight after HOLD_AFTER_S (so a process killed under them leaves them to
reconciliation, like any held reservation), the leases' renewals, and the close of a lease
its process no longer uses (its remainder back to available).

While the database is away the settles stay queued and are retried with a growing pause
(at most 5 s: they land within seconds of its return); the process keeps admitting against
its allowances until they run out or go unrenewed for half their TTL, then refuses with 503
(it cannot take more without the database).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, defaultdict
from typing import Final

import structlog
from sqlalchemy.exc import SQLAlchemyError

from llmrelay.billing import lease_store
from llmrelay.billing.allowance import TRANSIENT, Leases
from llmrelay.billing.lease_reclaim import settle_closed
from llmrelay.billing.lease_store import Settle
from llmrelay.billing.settle import SETTLE_RETRY_PAUSES_S, queue_auto_topup
from llmrelay.observability.metrics import Metrics
from llmrelay.store.db import background_begin

log = structlog.get_logger(__name__)

#: A request still in flight this long after its admission gets its held row written (by
#: the next round).
HOLD_AFTER_S: Final = 0.5
#: Settles a round waits for before it writes them, for at most _MAX_GATHER_S.
BATCH: Final = 256
_MAX_GATHER_S: Final = 1.0
#: An allowance unused this long (nothing admitted, nothing in flight) is closed: its money
#: is available to the other processes again (a new one costs one transaction).
IDLE_CLOSE_S: Final = 2.0
#: How often the allowances are looked at (idle ones closed); renewals every TTL/6.
_UPKEEP_S: Final = 1.0

Group = tuple[str, str]  # (tenant, lease)


class LeaseWriter:
    def __init__(
        self, leases: Leases, *, metrics: Metrics | None = None, gather_s: float = 0.05
    ) -> None:
        self.leases = leases
        self._metrics = metrics
        self._gather_s = gather_s
        self._task: asyncio.Task[None] | None = None
        self._next_upkeep = 0.0
        self._next_renewal = 0.0
        #: Settles written, and transactions they took (for the bench and the tests).
        self.settled = 0
        self.rounds = 0
        #: How many of the settles ever queued (`Leases.ended_total`, oldest first) are
        #: written: the journal's mark (gateway/journal.py).
        self.durable_total = 0

    @property
    def depth(self) -> int:
        return len(self.leases.ended)

    def start(self) -> None:
        self.leases.stopping = False
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        failures = 0
        leases = self.leases
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(HOLD_AFTER_S / 2):
                    await leases.wake.wait()
            # Gather a full batch, or for at most _MAX_GATHER_S: a round's transaction costs
            # the same for 5 settles as for 500, so a quiet wallet waits longer per round
            # (and no more than one batch is ever only in memory).
            waited, deadline = 0.0, leases.clock() + max(self._gather_s, _MAX_GATHER_S)
            while not waited or (len(leases.ended) < BATCH and leases.clock() < deadline):
                await asyncio.sleep(self._gather_s)
                waited += self._gather_s
            leases.wake.clear()
            try:
                await self.round()
                if leases.clock() >= self._next_upkeep:
                    await self.upkeep()
            except (SQLAlchemyError, *TRANSIENT) as exc:
                pause = SETTLE_RETRY_PAUSES_S[min(failures, len(SETTLE_RETRY_PAUSES_S) - 1)]
                failures += 1
                log.warning("billing_lease_write_retry", error=str(exc)[:300], pause_s=pause)
                await asyncio.sleep(pause)
            else:
                failures = 0

    async def round(self, *, every_hold: bool = False) -> None:
        """Write the queued settles and the due held rows, one transaction per lease. On a
        database failure what is not written goes back to the queue and the error is
        raised."""
        leases = self.leases
        through = leases.ended_total  # take_ended takes every one queued so far
        settles = leases.take_ended()
        before = float("inf") if every_hold else leases.clock() - HOLD_AFTER_S
        holds = leases.due_holds(before)
        if not settles and not holds:
            self.durable_total = max(self.durable_total, through)
            return
        groups: dict[Group, tuple[list[Settle], list[Settle]]] = defaultdict(lambda: ([], []))
        for tenant, lease_id, item in settles:
            groups[tenant, lease_id][0].append(item)
        for tenant, lease_id, item in holds:
            groups[tenant, lease_id][1].append(item)
        pending = list(groups.items())
        while pending:
            (tenant, lease_id), (ended, held) = pending[0]
            try:
                await self._write(tenant, lease_id, ended, held)
            except (SQLAlchemyError, *TRANSIENT, asyncio.CancelledError):
                # An outage, or the task stopped mid-write: back to the queue, in order
                # (a write that did commit is harmless to repeat: by request id).
                for (t, lid), (e, h) in pending:
                    leases.ended[:0] = [(t, lid, s) for s in e]
                    leases.recent.extendleft((0.0, s.request_id) for s in reversed(h))
                raise
            except Exception:  # a bug, not an outage: logged; reconciliation closes them
                log.exception("billing_lease_write_failed", lease_id=lease_id, count=len(ended))
                self._count("failed", len(ended))
            pending.pop(0)
        self.durable_total = max(self.durable_total, through)

    async def write(self, tenant: str, lease_id: str, ended: list[Settle]) -> None:
        """Settles of another process's lease (its journal, replayed): one transaction."""
        await self._write(tenant, lease_id, ended, [])

    async def _write(
        self, tenant: str, lease_id: str, ended: list[Settle], held: list[Settle]
    ) -> None:
        async with background_begin(self.leases.engine) as conn:
            if await lease_store.is_open(conn, tenant, lease_id):
                await lease_store.write_holds(conn, tenant, lease_id, held)
                done, balance = await lease_store.settle_open(conn, tenant, lease_id, ended)
                if any(item.charge for item, _kind in done):
                    await queue_auto_topup(conn, tenant, balance)
            else:  # closed under us: held rows are not written (the money is not the lease's)
                done = await settle_closed(conn, tenant, lease_id, ended)
        self.rounds += 1
        self.settled += len(done)
        if self._metrics is not None:  # one increment per outcome, not per settle
            counter = self._metrics.billing_settlements
            for kind, count in Counter(kind for _item, kind in done).items():
                counter.labels(_OUTCOMES.get(kind, kind)).inc(count)

    async def upkeep(self) -> None:
        """Close the allowances unused for IDLE_CLOSE_S; renew the others every TTL/6."""
        leases = self.leases
        now = leases.clock()
        self._next_upkeep = now + _UPKEEP_S
        idle = [
            a
            for a in leases.wallets.values()
            if a.lease_id is not None
            and a.inflight == 0
            and a.granting is None
            and now - a.last_admit > IDLE_CLOSE_S
        ]
        for allowance in idle:  # out of service first: nothing is admitted under it now
            lease_id, allowance.lease_id, allowance.remaining = allowance.lease_id, None, 0
            assert lease_id is not None
            await self._close(allowance.tenant_id, lease_id, every_hold=False)
        if now < self._next_renewal:
            return
        live = {a.lease_id: a for a in leases.wallets.values() if a.lease_id is not None}
        if not live:
            return
        async with background_begin(leases.engine) as conn:
            still = await lease_store.renew(conn, list(live), leases.ttl_s)
        self._next_renewal = now + leases.ttl_s / 6
        for lease_id, allowance in live.items():
            if lease_id in still:
                allowance.usable_until = now + leases.ttl_s / 2
            elif allowance.lease_id == lease_id:  # reconciliation closed it: start again
                log.warning("billing_lease_lost", lease_id=lease_id)
                allowance.lease_id, allowance.remaining = None, 0

    async def _close(self, tenant: str, lease_id: str, *, every_hold: bool = True) -> None:
        """Close one lease; a failure leaves it to expire and be reclaimed."""
        await self.round(every_hold=every_hold)  # its settles and held rows first
        try:
            async with background_begin(self.leases.engine) as conn:
                back = await lease_store.close(conn, tenant, lease_id)
        except (SQLAlchemyError, *TRANSIENT) as exc:
            log.warning("billing_lease_close_failed", lease_id=lease_id, error=str(exc)[:300])
            return
        log.info("billing_lease_closed", lease_id=lease_id, returned_micros=back)

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Write what is queued, close every lease (requests still in flight keep their
        held rows, settled later by reconciliation), then stop the task."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        leases = self.leases
        with contextlib.suppress(TimeoutError, SQLAlchemyError, *TRANSIENT):
            async with asyncio.timeout(timeout_s):
                await leases.stop_granting()
                for allowance in list(leases.wallets.values()):
                    lease_id, allowance.lease_id, allowance.remaining = (
                        allowance.lease_id, None, 0
                    )  # fmt: skip
                    if lease_id is not None:
                        await self._close(allowance.tenant_id, lease_id)
                await self.round(every_hold=True)
        if leases.ended:
            log.warning("billing_lease_settles_left", count=len(leases.ended))

    def _count(self, outcome: str, n: int) -> None:
        if self._metrics is not None and n:
            self._metrics.billing_settlements.labels(outcome).inc(n)


#: Entry kinds as the settle metric names them.
_OUTCOMES: Final = {"charge": "charged", "release": "released"}
