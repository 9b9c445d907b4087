"""Breakers that see recovery: the half-open trial sent by a timer, and health probes that
close a breaker.

Without this a route's trial waits for the next request to come after its cooldown: a quiet
route stays open however long ago it recovered, and the request that gets the trial pays for
it when it fails. Here, each time a breaker opens (`Breakers.on_open`, called on the failure
path only), one timer is set for the end of its cooldown. When it fires and the breaker is
still open, the timer claims the trial itself (`Breakers.admit`, as a request would) and sends
the route the smallest call its model serves:

    chat model        {"messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
    embedding model   {"input": "ping"}

in the client's chat (or embeddings) form, through the route's adapter (translated like any
request), with the header `x-llmrelay-trial: breaker` so a provider's logs can tell it apart.
It is not a request of any key: no record, no usage, no cost; it is logged (`breaker_trial`).
An answer (2xx, or 400/413/422: the provider read the call and answered it) closes the
breaker; 401/403/404, any other status, a connection error or a timeout (the provider's own
limits) opens it again for twice as long, up to `max_cooldown_s`, and the next timer is set.
A call that cannot be built for the provider gives the trial back to the next request.

`provider_online` closes the breakers of a provider's routes: the provider health probe
(jobs/probe.py) found it online.

With several replicas (`claims` set: shared/breakers.py), a timer that finds the cooldown
over first claims the route's trial for the cluster, for as long as the cooldown; only the
replica that gets the claim sends it. Its outcome reaches the others as a closing (they close
too) or as a longer opening (their timers move on to its end). A trial that decided the
breaker keeps its claim until the claim lapses: a replica whose own timer fires after the
trial ended, before its outcome arrived, then finds the trial claimed instead of sending a
second one (the next trial is due a whole, doubled, cooldown later, after the lapse). A claim
that sent nothing is released at once. A replica that lost the claim and heard nothing when
a trial could have lapsed (the route's cooldown) tries to claim again. A probe's closing
travels the same way.

Nothing here runs while every breaker is closed: no timer, no task, no per-request work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Final, Protocol

import structlog

from llmrelay.protocols.translation import TranslationError
from llmrelay.providers.base import Operation, UnsupportedOperation
from llmrelay.providers.bridges import build_request
from llmrelay.providers.errors import UpstreamError
from llmrelay.providers.registry import ProviderRegistry, UnsupportedProvider
from llmrelay.routing.breaker import OPEN, Breakers, Ticket
from llmrelay.snapshot.model import ModelSnap, RouteSnap, Snapshot

log = structlog.get_logger(__name__)

#: The header a trial call carries upstream.
TRIAL_HEADER: Final = "x-llmrelay-trial"
_TRIAL_HEADERS: Final = {TRIAL_HEADER: "breaker"}
#: Statuses that say the provider read the call and answered it (the call, not the
#: provider, is at fault): the route is up.
_ANSWERED: Final = frozenset({400, 413, 422})
_MISCONFIGURED: Final = frozenset({401, 403, 404})
#: A timer may fire a little before the breaker's own clock says the cooldown is over;
#: it then waits at least this long again.
_EARLY_S: Final = 0.01


class TrialClaims(Protocol):
    """Who sends a route's trial among the replicas (shared/breakers.py)."""

    async def claim(self, route_id: str, ttl_s: float) -> bool: ...

    async def release(self, route_id: str) -> None: ...


class BreakerTrials:
    """One per process, beside its breakers (stack.py)."""

    def __init__(
        self,
        registry: ProviderRegistry,
        breakers: Breakers,
        snapshot: Callable[[], Snapshot],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._registry = registry
        self._breakers = breakers
        self._snapshot = snapshot
        self._loop = loop
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._calls: set[asyncio.Task[object]] = set()
        self._closed = False
        #: Set when replicas share the breakers: a trial is sent only once claimed.
        self.claims: TrialClaims | None = None

    def schedule(self, route_id: str, delay_s: float) -> None:
        """The route opened (or its cooldown was shortened): claim its trial in `delay_s`."""
        if self._closed:
            return
        timer = self._timers.pop(route_id, None)
        if timer is not None:
            timer.cancel()
        self._timers[route_id] = self._loop.call_later(delay_s, self._due, route_id)

    def provider_online(self, provider_id: str) -> None:
        """A health probe found the provider online: its routes' breakers close."""
        for route in self._routes_of(provider_id):
            if self._breakers.close(route.id):
                log.info("breaker_closed_by_probe", route=route.id, provider=route.provider.slug)

    async def close(self) -> None:
        """No more timers; trials in flight are cancelled (their slots given back)."""
        self._closed = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        calls = list(self._calls)
        for call in calls:
            call.cancel()
        if calls:
            await asyncio.gather(*calls, return_exceptions=True)

    # -- the timer ------------------------------------------------------------------------

    def _due(self, route_id: str) -> None:
        self._timers.pop(route_id, None)
        breakers = self._breakers
        if breakers.state(route_id) != OPEN:
            return  # closed meanwhile, or a request holds the trial
        left = breakers.retry_after(route_id)
        if left is not None and left > 0:
            self.schedule(route_id, max(left, _EARLY_S))
            return
        found = self._find(route_id)
        if found is None:
            return  # no longer an enabled route: nothing would be sent to it anyway
        if self.claims is not None:
            self._spawn(self._claimed(self.claims, *found))
            return
        ticket = breakers.admit(route_id)
        if ticket is None or not ticket.trial:
            return
        self._spawn(self._trial(*found, ticket))

    def _spawn(self, work: Coroutine[Any, Any, object]) -> None:
        call = self._loop.create_task(work)
        self._calls.add(call)
        call.add_done_callback(self._calls.discard)

    async def _claimed(self, claims: TrialClaims, model: ModelSnap, route: RouteSnap) -> None:
        """Claim the trial among the replicas; send it if this one got it."""
        breakers = self._breakers
        window = breakers.cooldown(route.id)
        if not await claims.claim(route.id, window):
            slug = route.provider.slug
            log.info("breaker_trial", route=route.id, provider=slug, outcome="claimed elsewhere")
            # Its outcome arrives as a closing or a longer opening (which moves this timer).
            self.schedule(route.id, window)
            return
        decided = False
        try:
            if breakers.state(route.id) != OPEN or (breakers.retry_after(route.id) or 0.0) > 0:
                return  # changed while claiming (closed elsewhere, or a request's trial)
            ticket = breakers.admit(route.id)
            if ticket is not None and ticket.trial:
                decided = await self._trial(model, route, ticket)
        finally:
            if not decided:
                await claims.release(route.id)

    async def _trial(self, model: ModelSnap, route: RouteSnap, ticket: Ticket) -> bool:
        """Send the trial; whether it decided the breaker (closed it, or opened it again)."""
        breakers = self._breakers
        slug = route.provider.slug
        try:
            status = await self._call(model, route)
        except asyncio.CancelledError:
            breakers.abandon(ticket)
            raise
        except (UnsupportedProvider, UnsupportedOperation, TranslationError) as unsendable:
            breakers.abandon(ticket)  # the next request takes the trial, as without a timer
            log.info(
                "breaker_trial", route=route.id, provider=slug, outcome=f"unsent: {unsendable}"
            )
            return False
        except UpstreamError as failed:
            breakers.failed(ticket)
            log.info("breaker_trial", route=route.id, provider=slug, outcome=f"failed: {failed}")
            return True
        if status < 300 or status in _ANSWERED:
            breakers.succeeded(ticket)
            outcome = "ok"
        else:
            breakers.failed(ticket, misconfigured=status in _MISCONFIGURED)
            outcome = "failed"
        log.info("breaker_trial", route=route.id, provider=slug, outcome=outcome, status=status)
        return True

    async def _call(self, model: ModelSnap, route: RouteSnap) -> int:
        """Send the trial call; the provider's status (its body read and dropped)."""
        provider = route.provider
        adapter = self._registry.adapter(provider.type)
        operation, payload = _smallest_call(model)
        request = build_request(adapter, operation, route, payload, _TRIAL_HEADERS)
        response = await self._registry.transport(provider.type).send(request, provider)
        if request.translate is not None:
            response = request.translate(response)
        try:
            await response.read()
        finally:
            response.release()
        return response.status

    # -- the snapshot -----------------------------------------------------------------------

    def _find(self, route_id: str) -> tuple[ModelSnap, RouteSnap] | None:
        """The model and enabled route of that id in the snapshot in use (a scan: it runs
        once per trial, never per request)."""
        for models in self._snapshot().models.values():
            for model in models.values():
                for route in model.enabled_routes:
                    if route.id == route_id:
                        return model, route
        return None

    def _routes_of(self, provider_id: str) -> list[RouteSnap]:
        return [
            route
            for models in self._snapshot().models.values()
            for model in models.values()
            for route in model.routes
            if route.provider.id == provider_id
        ]


def _smallest_call(model: ModelSnap) -> tuple[Operation, dict[str, Any]]:
    if model.embedding:
        return Operation.EMBEDDINGS, {"model": model.name, "input": "ping"}
    return Operation.CHAT, {
        "model": model.name,
        "messages": [{"role": "user", "content": "ping"}],
        "max_tokens": 1,
    }
