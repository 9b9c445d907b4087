"""Prepaid admission at data-plane speed: a per-process allowance (a durable lease) per wallet.

A process reserves a chunk of a wallet's available balance in one transaction (a `lease` row
and ledger entry, lease_store.grant) and admits requests against what is left of it in
memory: no transaction on the request path, and never more than the chunk (a request that
does not fit waits for a grant, which refuses it with 402 when the wallet cannot cover it).
A grant is made in the background when the remainder runs low, so a busy wallet's requests
rarely wait for one. When a request ends, the unused part of its reservation goes back to
the remainder at once (in memory) and its settle is queued for the writer
(lease_writer.py), which charges many requests in one transaction.

Only requests whose id this process minted come here: their ids cannot have been used by
another request, so no transaction is needed to prove it. A request carrying its own
X-Request-ID (which may have been used before: 409) reserves with its own transaction, as do
durable jobs (billing/prepaid.py).

The money of requests admitted in memory is in the lease, which the database knows: a
process that dies leaves its lease open; it expires (nobody renews it) and reconciliation
settles what the process wrote of it and gives the rest back (lease_reclaim.py).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final

import structlog
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.billing import lease_store
from llmrelay.billing.errors import InsufficientBalance, LedgerUnavailable, NoWallet
from llmrelay.billing.lease_store import Settle
from llmrelay.store.db import begin_within

log = structlog.get_logger(__name__)

#: Failures that mean "the database is away".
TRANSIENT: Final = (DBAPIError, OSError, TimeoutError, ConnectionError)
#: A grant is made in the background when fewer than this many of the last request's
#: reservations are left.
_LOW_WATER_REQUESTS: Final = 16
#: Slow-path rounds before a request is refused (each one a grant that fell short because
#: concurrent requests took it first).
_ROUNDS: Final = 8
#: A busy wallet's grants grow: each grant asked within _QUICK_S of the last doubles the
#: chunk (and its low water), up to _MAX_SCALE times LLMRELAY_BILLING_LEASE_REQUESTS; one
#: asked after _SLOW_S halves it. At 2,000 requests a second a transaction per 64 would be
#: 30 grants a second; so it is about one, and the remainder covers the second or more a
#: grant can take on SQLite under load (waiting for the write lock). A scaled grant still
#: takes at most half of a short wallet (lease_store.grant), and an idle lease goes back
#: after 2 s.
_QUICK_S: Final = 1.0
_SLOW_S: Final = 10.0
_MAX_SCALE: Final = 128


class Allowance:
    """One wallet's lease in this process: what can still be admitted, in memory."""

    __slots__ = (
        "granted_at",
        "granting",
        "inflight",
        "last_admit",
        "lease_id",
        "low_water",
        "remaining",
        "scale",
        "tenant_id",
        "trued_up",
        "usable_until",
    )

    def __init__(self, tenant_id: str) -> None:
        self.tenant_id = tenant_id
        #: The open lease, None while there is none (not yet, closed, or being closed).
        self.lease_id: str | None = None
        self.remaining = 0
        #: Requests admitted under it and not yet ended.
        self.inflight = 0
        self.last_admit = 0.0
        #: Past this (monotonic) time without a renewal, nothing more is admitted in memory:
        #: the lease may have expired and been closed by reconciliation.
        self.usable_until = 0.0
        self.low_water = 0
        self.granting: asyncio.Future[None] | None = None
        #: True-ups that gave money back (Leases.true_up): a request refused meanwhile
        #: tries once more.
        self.trued_up = 0
        #: The chunk's multiple (_MAX_SCALE), and when the last grant was asked (monotonic).
        self.scale = 1
        self.granted_at = float("-inf")


class Admitted:
    """A request admitted in memory, until it ends."""

    __slots__ = ("allowance", "amount", "at", "key_id", "lease_id", "project_id", "recount")

    def __init__(
        self,
        allowance: Allowance,
        lease_id: str,
        amount: int,
        project_id: str | None,
        key_id: str | None,
        at: float,
        recount: Callable[[], int] | None = None,
    ) -> None:
        self.allowance = allowance
        self.lease_id = lease_id
        self.amount = amount
        self.project_id = project_id
        self.key_id = key_id
        self.at = at
        #: For an amount made on a bound (gateway/prepaid.reserve): the exact reservation,
        #: computed only if a request would otherwise be refused (Leases.true_up).
        self.recount = recount


class Leases:
    """Every wallet's allowance in this process, and the settles waiting for the writer."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        owner: str,
        chunk_requests: int = 64,
        ttl_s: float = 120.0,
        reserve_timeout_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.owner = owner
        self.chunk_requests = chunk_requests
        self.ttl_s = ttl_s
        self._timeout_s = reserve_timeout_s
        self.clock = clock
        self.wallets: dict[str, Allowance] = {}
        self.admitted: dict[str, Admitted] = {}
        #: (admitted at, request id) in admission order: the writer writes a held row for
        #: those still in flight after a moment (lease_writer.HOLD_AFTER_S).
        self.recent: deque[tuple[float, str]] = deque()
        #: Ended requests' settles for the writer: (tenant, lease, settle).
        self.ended: list[tuple[str, str, Settle]] = []
        #: Settles ever queued in `ended` (the journal's mark, gateway/journal.py).
        self.ended_total = 0
        self.wake = asyncio.Event()
        #: Grants made (each one transaction), for the bench and the tests.
        self.grants = 0
        #: Set when the process stops: no grant is started after it (one would open a lease
        #: after the writer closed them all).
        self.stopping = False

    # -- admission --------------------------------------------------------------------------

    def try_admit(
        self,
        tenant_id: str,
        request_id: str,
        amount: int,
        project_id: str | None,
        key_id: str | None,
        recount: Callable[[], int] | None = None,
    ) -> bool:
        """Admit against the wallet's allowance in memory; False when it cannot (no lease,
        too little left, not renewed lately): then `admit` waits for a grant. `recount`:
        see Admitted."""
        allowance = self.wallets.get(tenant_id)
        if allowance is None or self.stopping:
            return False
        lease_id = allowance.lease_id
        now = self.clock()
        if lease_id is None or allowance.remaining < amount or now > allowance.usable_until:
            return False
        allowance.remaining -= amount
        allowance.inflight += 1
        allowance.last_admit = now
        self.admitted[request_id] = Admitted(
            allowance, lease_id, amount, project_id, key_id, now, recount
        )
        self.recent.append((now, request_id))
        if allowance.remaining < allowance.low_water and allowance.granting is None:
            allowance.granting = asyncio.ensure_future(self._grant_quietly(allowance, amount))
        return True

    async def admit(
        self,
        tenant_id: str,
        request_id: str,
        amount: int,
        project_id: str | None,
        key_id: str | None,
    ) -> None:
        """Admit, waiting for a grant when the allowance is short. Raises
        InsufficientBalance (the wallet cannot cover it), NoWallet, LedgerUnavailable."""
        allowance = self.wallets.get(tenant_id)
        if allowance is None:
            allowance = self.wallets[tenant_id] = Allowance(tenant_id)
        trued_up = allowance.trued_up
        try:
            await self._admit(allowance, request_id, amount, project_id, key_id)
        except InsufficientBalance:
            # Bounds in flight may hold what exact reservations would leave (true_up), here
            # or by a request that waited beside this one: then once more.
            if not self.true_up(allowance) and allowance.trued_up == trued_up:
                raise
            await self._admit(allowance, request_id, amount, project_id, key_id)

    async def _admit(
        self,
        allowance: Allowance,
        request_id: str,
        amount: int,
        project_id: str | None,
        key_id: str | None,
    ) -> None:
        tenant_id = allowance.tenant_id
        for _ in range(_ROUNDS):
            if self.try_admit(tenant_id, request_id, amount, project_id, key_id):
                return
            if self.stopping:
                raise LedgerUnavailable("the gateway is stopping; retry on another replica")
            granting = allowance.granting
            if granting is None:
                granting = allowance.granting = asyncio.ensure_future(
                    self._grant(allowance, amount)
                )
            await asyncio.shield(granting)
        if not self.try_admit(tenant_id, request_id, amount, project_id, key_id):
            raise InsufficientBalance(amount, max(allowance.remaining, 0))

    def true_up(self, allowance: Allowance) -> bool:
        """Bring the requests in flight that were admitted on a bound down to their exact
        reservations, the difference back to the allowance; whether any came down.

        A bound (the prompt's characters, not its tokens) saves the count on the request
        path but holds several times what the request needs until it ends: near a wallet's
        end, a request the exact reservations would admit would be refused while they are
        in flight. So before a refusal they are counted after all (once each), and the
        refusal stands only on exact reservations, as it would without the bound."""
        freed = False
        lease_id = allowance.lease_id
        for admitted in self.admitted.values():
            recount = admitted.recount
            if recount is None or admitted.lease_id != lease_id:
                continue  # (a closed lease's requests settle against what it held)
            admitted.recount = None
            exact = recount()
            if exact < admitted.amount:
                allowance.remaining += admitted.amount - exact
                admitted.amount = exact
                freed = True
        if freed:
            allowance.trued_up += 1
        return freed

    async def stop_granting(self) -> None:
        """Start no more grants and wait for those in flight: a grant made ahead of need
        runs in the background, and one still running when the writer closes the leases
        would open a new lease after them (its money held until reclaimed)."""
        self.stopping = True
        while pending := [
            g for a in self.wallets.values() if (g := a.granting) is not None and not g.done()
        ]:
            await asyncio.gather(*(asyncio.shield(g) for g in pending), return_exceptions=True)

    async def _grant_quietly(self, allowance: Allowance, need: int) -> None:
        """A grant ahead of need: a failure is only logged (the next request that does not
        fit asks again, and gets the error)."""
        try:
            await self._grant(allowance, need)
        except (InsufficientBalance, NoWallet):
            pass
        except LedgerUnavailable as exc:
            log.warning("billing_lease_grant_failed", error=str(exc)[:300])

    async def _grant(self, allowance: Allowance, need: int) -> None:
        now = self.clock()
        if now - allowance.granted_at < _QUICK_S:
            allowance.scale = min(allowance.scale * 2, _MAX_SCALE)
        elif now - allowance.granted_at > _SLOW_S:
            allowance.scale = max(allowance.scale // 2, 1)
        allowance.granted_at = now
        try:
            grant = await self._grant_once(allowance, need)
        except InsufficientBalance:
            # A dead process's lease may hold the money: close expired ones, then try again.
            from llmrelay.billing.lease_reclaim import reclaim_expired

            try:
                reclaimed = await reclaim_expired(
                    self.engine, grace_s=self.ttl_s / 2, tenant_id=allowance.tenant_id
                )
            except (SQLAlchemyError, *TRANSIENT):
                reclaimed = 0
            if not reclaimed:
                raise
            grant = await self._grant_once(allowance, need)
        finally:
            allowance.granting = None
        if grant.lease_id != allowance.lease_id:
            allowance.lease_id = grant.lease_id  # a new lease: the old one was closed
            allowance.remaining = grant.amount
        else:
            allowance.remaining += grant.amount
        allowance.usable_until = self.clock() + self.ttl_s / 2
        # A grown chunk's next grant starts when less than one such chunk is left: on SQLite
        # it may wait hundreds of milliseconds for the write lock behind the record
        # writer's and the lease writer's batches, and the requests still coming must not
        # run the remainder dry meanwhile (they would all wait for it).
        scaled = self.chunk_requests * allowance.scale
        allowance.low_water = need * (_LOW_WATER_REQUESTS if allowance.scale == 1 else scaled)
        self.grants += 1

    async def _grant_once(self, allowance: Allowance, need: int) -> lease_store.Grant:
        """One grant: about `chunk_requests` reservations of `need`, at least what `need`
        lacks beyond what the allowance still has (so a small wallet is used to its last
        micro-unit)."""
        target = max(need * self.chunk_requests * allowance.scale, need)
        lacking = max(need - max(allowance.remaining, 0), 1)
        try:
            async with begin_within(self.engine, self._timeout_s) as conn:
                return await lease_store.grant(
                    conn,
                    allowance.tenant_id,
                    allowance.lease_id,
                    owner=self.owner,
                    need=lacking,
                    target=target,
                    ttl_s=self.ttl_s,
                )
        except InsufficientBalance as short:
            # What this process still holds can be admitted too: say it all.
            raise InsufficientBalance(need, short.available + max(allowance.remaining, 0)) from None
        except (SQLAlchemyError, *TRANSIENT) as exc:
            raise LedgerUnavailable(
                "the prepaid balance could not be checked (the database is unreachable); "
                "retry shortly"
            ) from exc

    # -- the end of a request ---------------------------------------------------------------

    def end(self, request_id: str, charge: int | None) -> tuple[str, str, Settle] | None:
        """A request ended: the unused part of its reservation back to the allowance, its
        settle queued, and returned as (tenant, lease, settle). None when it was not
        admitted here (its own transaction reserved)."""
        admitted = self.admitted.pop(request_id, None)
        if admitted is None:
            return None
        allowance = admitted.allowance
        allowance.inflight -= 1
        over = 0
        if charge is not None and admitted.lease_id == allowance.lease_id:
            back = admitted.amount - charge
            if back >= 0:
                allowance.remaining += back
            else:  # it cost more than it reserved: the lease covers what it can
                covered = min(-back, max(allowance.remaining, 0))
                allowance.remaining -= covered
                over = -back - covered
        elif charge is not None:
            over = max(charge - admitted.amount, 0)
        settle = Settle(
            request_id,
            admitted.amount,
            charge,
            over,
            False,
            admitted.project_id,
            admitted.key_id,
        )
        ended = (allowance.tenant_id, admitted.lease_id, settle)
        self.ended.append(ended)
        self.ended_total += 1
        if not self.wake.is_set():
            self.wake.set()
        return ended

    def take_ended(self) -> list[tuple[str, str, Settle]]:
        taken, self.ended = self.ended, []
        return taken

    def due_holds(self, before: float) -> list[tuple[str, str, Settle]]:
        """Requests admitted before `before` and still in flight: their held rows are due."""
        due: list[tuple[str, str, Settle]] = []
        recent, admitted = self.recent, self.admitted
        while recent and recent[0][0] <= before:
            _at, request_id = recent.popleft()
            found = admitted.get(request_id)
            if found is not None:
                due.append(
                    (
                        found.allowance.tenant_id,
                        found.lease_id,
                        Settle(request_id, found.amount, None, 0, True, found.project_id,
                               found.key_id),
                    )
                )  # fmt: skip
        return due

    def snapshot(self) -> dict[str, Any]:
        """For tests and the bench: each wallet's lease and remainder."""
        return {
            t: {"lease_id": a.lease_id, "remaining": a.remaining, "inflight": a.inflight}
            for t, a in self.wallets.items()
        }
