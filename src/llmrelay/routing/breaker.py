"""Per-route circuit breakers: stop sending attempts to a route that keeps failing.

A route (provider + credential + upstream model) is named by an opaque route id. Each breaker is
*closed* (attempts flow), *open* (attempts skip the route until a cooldown ends) or *half_open*
(one trial attempt probes the route; everyone else skips it until the trial reports).

- closed -> open after `failures` consecutive retryable failures, or at once on a misconfigured
  failure (the provider answered 401/403/404: retrying the same credential cannot help).
- open -> half_open on the first `admit` after the cooldown; that caller gets the trial. The
  caller is whoever comes first: a request, or the process's trial timer (gateway/trials.py),
  which `on_open` tells when each cooldown ends, so a route recovers with no request paying.
- half_open -> closed when the trial succeeds (the cooldown resets to `cooldown_s`);
  half_open -> open when it fails, with the cooldown doubled up to `max_cooldown_s` (never
  under `cooldown_s`).
- open or half_open -> closed by `close`: a health probe found the route's provider online.
- closed -> open by `opened_elsewhere`: another replica opened the route's breaker
  (shared/breakers.py), for what is left of its cooldown (a longer cooldown is adopted, so a
  failed trial elsewhere doubles it here too); the trial timer is told as for its own opens.
- open or half_open -> closed by `closed_elsewhere`: another replica's trial or probe closed
  the route, and this breaker opened before that (a close older than this replica's own
  opening is stale). Closings by a trial or by `close` are told to `on_closed` (to share
  them); closings from elsewhere are not told again.

Every admission returns a `Ticket` carrying the breaker's epoch. The epoch moves on every
transition and on every trial claim, and a report whose ticket is from another epoch is ignored:
a request admitted before the trip cannot close the breaker by succeeding late, and a trial
superseded after it went quiet cannot decide the route's fate. A trial that never reports (its
task was cancelled) frees the slot when its caller calls `abandon`, or by itself once the current
cooldown has passed again, so a lost trial never blocks a route for good.

The breaker holds no "disabled" state and offers nothing that enables a route: administrator-
disabled routes are filtered out before the breaker is asked, so it can never readmit them.

Why the shape: `admit` runs for every candidate of every request. For a closed breaker it is one
dict lookup and one comparison, returning a ticket cached per breaker epoch (no allocation).
Methods never await, so under asyncio each call is atomic; breakers are not thread-safe.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final, Literal

import structlog

from llmrelay.snapshot.model import BreakerSettings

log = structlog.get_logger(__name__)

State = Literal["closed", "open", "half_open"]
CLOSED: Final[State] = "closed"
OPEN: Final[State] = "open"
HALF_OPEN: Final[State] = "half_open"

#: `on_transition(route_id, from_state, to_state)`; called after the state has changed.
TransitionHook = Callable[[str, str, str], None]
#: `on_open(route_id, cooldown_s)`: the route just opened; a trial may be claimed after that.
OpenHook = Callable[[str, float], None]
#: `on_closed(route_id)`: this process's trial or a probe closed the route.
CloseHook = Callable[[str], None]

_NEVER: Final = float("-inf")


@dataclass(frozen=True, slots=True)
class Ticket:
    """Permission for one attempt on one route; hand it back to `succeeded`/`failed`/`abandon`."""

    route_id: str
    epoch: int
    trial: bool
    _breaker: _Breaker = field(repr=False, compare=False)


class _Breaker:
    __slots__ = (
        "epoch",
        "failures",
        "opened_at",
        "reopen_at",
        "route_id",
        "state",
        "ticket",
        "trial_until",
        "window",
    )

    def __init__(self, route_id: str, window: float) -> None:
        self.route_id = route_id
        self.state: State = CLOSED
        self.epoch = 0
        self.ticket = Ticket(route_id, 0, False, self)  # shared by all closed-state admissions
        self.failures = 0  # consecutive, while closed
        self.window = window  # current cooldown length, while open or half-open
        self.reopen_at = _NEVER  # while open: when a trial may be claimed
        self.opened_at = _NEVER  # while open or half-open: when it last opened (or was told so)
        self.trial_until = _NEVER  # while half-open: when an unreported trial stops counting


class Breakers:
    """The breakers of all routes, created closed on first sight of a route id."""

    def __init__(
        self,
        settings: BreakerSettings,
        clock: Callable[[], float] = time.monotonic,
        on_transition: TransitionHook | None = None,
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._on_transition = on_transition
        self._breakers: dict[str, _Breaker] = {}
        #: Told each time a route opens (the trial timer); called on failures only.
        self.on_open: OpenHook | None = None
        #: Told when this replica's own failures opened a route (to tell the others).
        self.on_tripped: OpenHook | None = None
        #: Told when this replica's trial or a probe closed a route (to tell the others).
        self.on_closed: CloseHook | None = None

    def admit(self, route_id: str) -> Ticket | None:
        """A ticket for one attempt on the route, or None: skip the route for now."""
        breaker = self._breakers.get(route_id)
        if breaker is not None and breaker.state is CLOSED:  # states are the module constants
            return breaker.ticket
        return self._admit_slow(route_id, breaker)

    def succeeded(self, ticket: Ticket) -> None:
        breaker = ticket._breaker
        if ticket.epoch != breaker.epoch:
            return
        if breaker.state is CLOSED:
            breaker.failures = 0
        elif breaker.state is HALF_OPEN:
            breaker.window = self._settings.cooldown_s
            self._move(breaker, CLOSED)
            if self.on_closed is not None:
                self.on_closed(breaker.route_id)

    def failed(self, ticket: Ticket, *, misconfigured: bool = False) -> None:
        """Report a retryable failure, or with `misconfigured` a 401/403/404 from the provider."""
        breaker = ticket._breaker
        if ticket.epoch != breaker.epoch:
            return
        if breaker.state is CLOSED:
            breaker.failures += 1
            if misconfigured or breaker.failures >= self._settings.failures:
                self._open(breaker, self._settings.cooldown_s)
        elif breaker.state is HALF_OPEN:
            settings = self._settings
            longest = max(settings.max_cooldown_s, settings.cooldown_s)
            self._open(breaker, min(breaker.window * 2, longest))

    def close(self, route_id: str) -> bool:
        """Close an open or half-open breaker (its provider's health probe succeeded); its
        cooldown starts again from `cooldown_s`. Whether it was not closed."""
        breaker = self._breakers.get(route_id)
        if breaker is None or breaker.state is CLOSED:
            return False
        breaker.window = self._settings.cooldown_s
        self._move(breaker, CLOSED)
        if self.on_closed is not None:
            self.on_closed(route_id)
        return True

    def closed_elsewhere(self, route_id: str, ago_s: float) -> bool:
        """Another replica closed this route's breaker `ago_s` ago (its trial succeeded, or a
        probe found the provider online): an open or half-open breaker here that opened
        before then closes too (its cooldown starts again from `cooldown_s`); one that opened
        since, on failures seen after that close, stays open. Whether it closed."""
        breaker = self._breakers.get(route_id)
        if breaker is None or breaker.state is CLOSED:
            return False
        if breaker.opened_at > self._clock() - max(ago_s, 0.0):
            return False
        breaker.window = self._settings.cooldown_s
        self._move(breaker, CLOSED)
        return True

    def opened_elsewhere(self, route_id: str, remaining_s: float) -> bool:
        """Another replica opened this route's breaker `remaining_s` ago: a closed breaker
        here opens for that long (its trial timer told); an open one stays open at least
        that long. Whether it changed anything."""
        if remaining_s <= 0:
            return False
        breaker = self._breakers.get(route_id)
        if breaker is None:
            breaker = self._breakers[route_id] = _Breaker(route_id, self._settings.cooldown_s)
        now = self._clock()
        until = now + remaining_s
        if breaker.state is OPEN:
            if until <= breaker.reopen_at:
                return False
            breaker.reopen_at = until
            breaker.opened_at = now
        elif breaker.state is CLOSED:
            breaker.reopen_at = until
            self._move(breaker, OPEN)
        else:
            return False  # a trial is deciding here already
        settings = self._settings
        longest = max(settings.max_cooldown_s, settings.cooldown_s)
        # What is left of a cooldown the other replica doubled (its trial failed): a trial
        # failing here next doubles that, not this replica's first cooldown.
        breaker.window = max(breaker.window, min(remaining_s, longest))
        if self.on_open is not None:
            self.on_open(route_id, remaining_s)
        return True

    def abandon(self, ticket: Ticket) -> None:
        """The attempt will never report (cancelled); a trial's slot goes to the next caller."""
        breaker = ticket._breaker
        if ticket.epoch == breaker.epoch and breaker.state is HALF_OPEN:
            breaker.epoch += 1
            breaker.trial_until = _NEVER

    def cooldown(self, route_id: str) -> float:
        """The route's current cooldown length (how long a trial may take before it lapses)."""
        breaker = self._breakers.get(route_id)
        return self._settings.cooldown_s if breaker is None else breaker.window

    def state(self, route_id: str) -> State:
        breaker = self._breakers.get(route_id)
        return CLOSED if breaker is None else breaker.state

    def retry_after(self, route_id: str) -> float | None:
        """Seconds until an open breaker lets a trial through; None unless open."""
        breaker = self._breakers.get(route_id)
        if breaker is None or breaker.state is not OPEN:
            return None
        return max(0.0, breaker.reopen_at - self._clock())

    def states(self) -> dict[str, State]:
        return {route_id: breaker.state for route_id, breaker in self._breakers.items()}

    def update_settings(self, settings: BreakerSettings) -> None:
        """Apply reloaded settings; open windows longer than the new maximum are shortened."""
        self._settings = settings
        now = self._clock()
        longest = max(settings.max_cooldown_s, settings.cooldown_s)
        latest = now + longest
        for breaker in self._breakers.values():
            breaker.window = min(breaker.window, longest)
            if breaker.state is OPEN and breaker.reopen_at > latest:
                breaker.reopen_at = latest
                if self.on_open is not None:  # its trial is due sooner than it was told
                    self.on_open(breaker.route_id, longest)
            breaker.trial_until = min(breaker.trial_until, latest)

    def forget(self, keep: Iterable[str]) -> None:
        """Drop the breakers of routes not in `keep` (after a config reload); their tickets die."""
        keep = set(keep)
        for route_id in [route_id for route_id in self._breakers if route_id not in keep]:
            self._breakers.pop(route_id).epoch = -1  # epochs are never negative: reports ignored

    def _admit_slow(self, route_id: str, breaker: _Breaker | None) -> Ticket | None:
        if breaker is None:
            breaker = self._breakers[route_id] = _Breaker(route_id, self._settings.cooldown_s)
            return breaker.ticket
        now = self._clock()
        if breaker.state is OPEN:
            if now < breaker.reopen_at:
                return None
            self._move(breaker, HALF_OPEN)
        elif now < breaker.trial_until:
            return None  # a trial is in flight
        breaker.epoch += 1  # a fresh epoch per trial: an earlier, lapsed trial cannot report
        breaker.trial_until = now + breaker.window
        return Ticket(route_id, breaker.epoch, True, breaker)

    def _open(self, breaker: _Breaker, window: float) -> None:
        breaker.window = window
        breaker.reopen_at = self._clock() + window
        self._move(breaker, OPEN)
        if self.on_open is not None:
            self.on_open(breaker.route_id, window)
        if self.on_tripped is not None:
            self.on_tripped(breaker.route_id, window)

    def _move(self, breaker: _Breaker, to_state: State) -> None:
        from_state = breaker.state
        breaker.state = to_state
        breaker.epoch += 1
        breaker.failures = 0
        breaker.trial_until = _NEVER
        if to_state is OPEN:
            breaker.opened_at = self._clock()
        if to_state is CLOSED:
            breaker.ticket = Ticket(breaker.route_id, breaker.epoch, False, breaker)
        log.info(
            "breaker_transition", route=breaker.route_id, from_state=from_state, to_state=to_state
        )
        if self._on_transition is not None:
            self._on_transition(breaker.route_id, from_state, to_state)
