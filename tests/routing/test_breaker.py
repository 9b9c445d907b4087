"""Breakers trip on repeated or misconfigured failures, probe with one trial, and back off."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from llmrelay.routing.breaker import Breakers, Ticket
from llmrelay.snapshot.model import BreakerSettings

ROUTE = "openai/main/gpt-4o"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _breakers(clock: FakeClock, transitions: list[tuple[str, str, str]] | None = None) -> Breakers:
    hook = None if transitions is None else lambda *t: transitions.append(t)
    return Breakers(BreakerSettings(failures=3, cooldown_s=10.0, max_cooldown_s=60.0), clock, hook)


def _admit(breakers: Breakers, route_id: str = ROUTE) -> Ticket:
    ticket = breakers.admit(route_id)
    assert ticket is not None
    return ticket


def _trip(breakers: Breakers) -> None:
    breakers.failed(_admit(breakers), misconfigured=True)
    assert breakers.state(ROUTE) == "open"


def test_unknown_route_is_closed_and_admitted_with_a_shared_ticket() -> None:
    breakers = _breakers(FakeClock())
    assert breakers.state(ROUTE) == "closed"
    first, second = _admit(breakers), _admit(breakers)
    assert first is second and not first.trial
    assert breakers.retry_after(ROUTE) is None


def test_k_consecutive_failures_open_the_breaker() -> None:
    transitions: list[tuple[str, str, str]] = []
    breakers = _breakers(FakeClock(), transitions)
    for _ in range(2):
        breakers.failed(_admit(breakers))
    assert breakers.state(ROUTE) == "closed"
    breakers.failed(_admit(breakers))
    assert breakers.state(ROUTE) == "open"
    assert breakers.admit(ROUTE) is None
    assert transitions == [(ROUTE, "closed", "open")]


def test_a_success_resets_the_consecutive_failure_count() -> None:
    breakers = _breakers(FakeClock())
    for _ in range(2):
        breakers.failed(_admit(breakers))
    breakers.succeeded(_admit(breakers))
    for _ in range(2):
        breakers.failed(_admit(breakers))
    assert breakers.state(ROUTE) == "closed"
    breakers.failed(_admit(breakers))
    assert breakers.state(ROUTE) == "open"


def test_a_misconfigured_failure_opens_at_once_and_only_that_route() -> None:
    breakers = _breakers(FakeClock())
    breakers.failed(_admit(breakers), misconfigured=True)
    assert breakers.states() == {ROUTE: "open"}
    assert _admit(breakers, "other") is not None
    assert breakers.states() == {ROUTE: "open", "other": "closed"}


def test_cooldown_then_exactly_one_trial_whose_success_closes() -> None:
    clock, transitions = FakeClock(), list[tuple[str, str, str]]()
    breakers = _breakers(clock, transitions)
    _trip(breakers)
    assert breakers.retry_after(ROUTE) == 10.0
    clock.now += 9.99
    assert breakers.admit(ROUTE) is None
    assert breakers.retry_after(ROUTE) == pytest.approx(0.01)
    clock.now += 0.01
    trial = _admit(breakers)
    assert trial.trial and breakers.state(ROUTE) == "half_open"
    assert breakers.admit(ROUTE) is None and breakers.admit(ROUTE) is None
    breakers.succeeded(trial)
    assert breakers.state(ROUTE) == "closed"
    assert not _admit(breakers).trial
    assert [t[1:] for t in transitions] == [
        ("closed", "open"),
        ("open", "half_open"),
        ("half_open", "closed"),
    ]


def test_failed_trials_double_the_cooldown_up_to_the_maximum_and_success_resets_it() -> None:
    clock = FakeClock()
    breakers = _breakers(clock)
    _trip(breakers)
    for window in (10.0, 20.0, 40.0, 60.0, 60.0):
        assert breakers.retry_after(ROUTE) == window
        clock.now += window - 0.5
        assert breakers.admit(ROUTE) is None
        clock.now += 0.5
        breakers.failed(_admit(breakers))
        assert breakers.state(ROUTE) == "open"
    clock.now += 60.0
    breakers.succeeded(_admit(breakers))
    _trip(breakers)
    assert breakers.retry_after(ROUTE) == 10.0


def test_a_ticket_from_before_the_trip_cannot_close_the_breaker() -> None:
    clock = FakeClock()
    breakers = _breakers(clock)
    early = _admit(breakers)
    _trip(breakers)
    breakers.succeeded(early)
    assert breakers.state(ROUTE) == "open"
    clock.now += 10.0
    trial = _admit(breakers)
    breakers.succeeded(early)
    breakers.failed(early)
    assert breakers.state(ROUTE) == "half_open"
    breakers.failed(trial)
    assert breakers.retry_after(ROUTE) == 20.0


def test_abandon_frees_the_half_open_slot_and_silences_the_abandoned_trial() -> None:
    clock = FakeClock()
    breakers = _breakers(clock)
    _trip(breakers)
    clock.now += 10.0
    lost = _admit(breakers)
    assert breakers.admit(ROUTE) is None
    breakers.abandon(lost)
    second = _admit(breakers)
    assert second.trial
    breakers.succeeded(lost)
    assert breakers.state(ROUTE) == "half_open"
    breakers.succeeded(second)
    assert breakers.state(ROUTE) == "closed"


def test_a_trial_that_never_reports_lapses_after_the_cooldown() -> None:
    clock = FakeClock()
    breakers = _breakers(clock)
    _trip(breakers)
    clock.now += 10.0
    lapsed = _admit(breakers)
    clock.now += 9.0
    assert breakers.admit(ROUTE) is None
    clock.now += 1.0
    fresh = _admit(breakers)
    assert fresh.trial and fresh.epoch != lapsed.epoch
    breakers.failed(lapsed)
    assert breakers.state(ROUTE) == "half_open"


def test_abandoning_a_closed_ticket_changes_nothing() -> None:
    breakers = _breakers(FakeClock())
    ticket = _admit(breakers)
    breakers.abandon(ticket)
    assert _admit(breakers) is ticket


def test_update_settings_applies_new_threshold_and_caps_open_windows() -> None:
    clock = FakeClock()
    breakers = _breakers(clock)
    _trip(breakers)
    breakers.update_settings(BreakerSettings(failures=1, cooldown_s=2.0, max_cooldown_s=4.0))
    assert breakers.retry_after(ROUTE) == 4.0
    breakers.failed(_admit(breakers, "other"))
    assert breakers.state("other") == "open"
    assert breakers.retry_after("other") == 2.0


def test_by_default_failed_trials_grow_the_cooldown_to_30_seconds_at_most() -> None:
    clock = FakeClock()
    breakers = Breakers(BreakerSettings(), clock)
    _trip(breakers)
    for window in (10.0, 20.0, 30.0, 30.0):
        assert breakers.retry_after(ROUTE) == window
        clock.now += window
        breakers.failed(_admit(breakers))
    assert breakers.retry_after(ROUTE) == 30.0


def test_a_maximum_under_the_first_cooldown_never_shortens_it() -> None:
    clock = FakeClock()
    breakers = Breakers(BreakerSettings(cooldown_s=45.0, max_cooldown_s=30.0), clock)
    _trip(breakers)
    clock.now += 45.0
    breakers.failed(_admit(breakers))
    assert breakers.retry_after(ROUTE) == 45.0


def test_close_ends_an_open_or_half_open_breaker_and_its_cooldown_starts_over() -> None:
    clock = FakeClock()
    transitions: list[tuple[str, str, str]] = []
    breakers = _breakers(clock, transitions)
    assert not breakers.close(ROUTE)  # never seen: nothing to close
    _trip(breakers)
    clock.now += 10.0
    trial = _admit(breakers)
    breakers.failed(trial)  # open for 20 s now
    clock.now += 20.0
    stale = _admit(breakers)  # half-open: a trial in flight
    assert breakers.close(ROUTE)
    assert breakers.state(ROUTE) == "closed" and not breakers.close(ROUTE)
    breakers.failed(stale)  # the trial from before the close reports: ignored
    assert breakers.state(ROUTE) == "closed"
    _trip(breakers)
    assert breakers.retry_after(ROUTE) == 10.0
    assert [t[1:] for t in transitions] == [
        ("closed", "open"),
        ("open", "half_open"),
        ("half_open", "open"),
        ("open", "half_open"),
        ("half_open", "closed"),
        ("closed", "open"),
    ]


def test_on_open_is_told_every_opening_with_its_cooldown() -> None:
    clock = FakeClock()
    breakers = _breakers(clock)
    told: list[tuple[str, float]] = []
    breakers.on_open = lambda route, cooldown: told.append((route, cooldown))
    for _ in range(2):
        breakers.failed(_admit(breakers))
    assert told == []  # closed: no timer for a route still closed
    breakers.failed(_admit(breakers))
    clock.now += 10.0
    breakers.failed(_admit(breakers))
    assert told == [(ROUTE, 10.0), (ROUTE, 20.0)]
    # A reload that shortens the open cooldown tells it again (the trial is due sooner).
    breakers.update_settings(BreakerSettings(failures=3, cooldown_s=2.0, max_cooldown_s=4.0))
    assert told[-1] == (ROUTE, 4.0) and breakers.retry_after(ROUTE) == 4.0


def test_forget_drops_old_routes_and_their_tickets() -> None:
    breakers = _breakers(FakeClock())
    old = _admit(breakers, "gone")
    _admit(breakers, ROUTE)
    breakers.failed(old, misconfigured=True)
    breakers.forget({ROUTE})
    assert breakers.states() == {ROUTE: "closed"}
    fresh = _admit(breakers, "gone")
    breakers.failed(old, misconfigured=True)
    assert breakers.state("gone") == "closed"
    assert fresh is not old


# --- stateful: random sequences against a reference model ---------------------------------

FAILURES, COOLDOWN, MAX_COOLDOWN = 2, 1.0, 6.0  # windows go 1, 2, 4, 6, 6 ...
ROUTES = ("a", "b", "c")


@dataclass
class Model:
    state: str = "closed"
    failures: int = 0
    window: float = COOLDOWN
    reopen_at: float = 0.0
    trial: Ticket | None = None
    trial_until: float = 0.0
    closed_tickets: set[int] = field(default_factory=set)  # ids of current closed tickets


@dataclass
class Held:
    route_id: str
    ticket: Ticket
    in_flight_until: float  # a trial counts as in flight until then (or until it reports)


class BreakerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.seen: list[tuple[str, str, str]] = []
        self.breakers = Breakers(
            BreakerSettings(FAILURES, COOLDOWN, MAX_COOLDOWN),
            self.clock,
            lambda *t: self.seen.append(t),
        )
        self.model = {route_id: Model() for route_id in ROUTES}
        self.held: list[Held] = []

    def _expect_transition(self, route_id: str, from_state: str, to_state: str) -> None:
        assert self.seen.pop(0) == (route_id, from_state, to_state)
        model = self.model[route_id]
        model.state, model.failures, model.trial = to_state, 0, None
        model.closed_tickets.clear()

    def _open(self, route_id: str, from_state: str, window: float) -> None:
        self._expect_transition(route_id, from_state, "open")
        model = self.model[route_id]
        model.window, model.reopen_at = window, self.clock.now + window

    @rule(route_id=st.sampled_from(ROUTES))
    def admit(self, route_id: str) -> None:
        model, now = self.model[route_id], self.clock.now
        ticket = self.breakers.admit(route_id)
        if model.state == "closed":
            assert ticket is not None and not ticket.trial
            model.closed_tickets.add(id(ticket))
            self.held.append(Held(route_id, ticket, now))
            return
        if model.state == "open" and now < model.reopen_at:
            assert ticket is None, "an open breaker admitted before its reopen time"
            return
        if model.state == "half_open" and model.trial is not None and now < model.trial_until:
            assert ticket is None, "a second trial while one is in flight"
            return
        if model.state == "open":
            self._expect_transition(route_id, "open", "half_open")
        assert ticket is not None and ticket.trial
        model.trial, model.trial_until = ticket, now + model.window
        self.held.append(Held(route_id, ticket, now + model.window))

    @precondition(lambda self: self.held)
    @rule(index=st.integers(0, 50))
    def succeed(self, index: int) -> None:
        held = self.held.pop(index % len(self.held))
        model = self.model[held.route_id]
        self.breakers.succeeded(held.ticket)
        if model.state == "closed" and id(held.ticket) in model.closed_tickets:
            model.failures = 0
        elif model.state == "half_open" and held.ticket is model.trial:
            self._expect_transition(held.route_id, "half_open", "closed")

    @precondition(lambda self: self.held)
    @rule(index=st.integers(0, 50), misconfigured=st.booleans())
    def fail(self, index: int, misconfigured: bool) -> None:
        held = self.held.pop(index % len(self.held))
        model = self.model[held.route_id]
        self.breakers.failed(held.ticket, misconfigured=misconfigured)
        if model.state == "closed" and id(held.ticket) in model.closed_tickets:
            model.failures += 1
            if misconfigured or model.failures >= FAILURES:
                self._open(held.route_id, "closed", COOLDOWN)
        elif model.state == "half_open" and held.ticket is model.trial:
            self._open(held.route_id, "half_open", min(model.window * 2, MAX_COOLDOWN))

    @precondition(lambda self: self.held)
    @rule(index=st.integers(0, 50))
    def abandon(self, index: int) -> None:
        held = self.held.pop(index % len(self.held))
        model = self.model[held.route_id]
        self.breakers.abandon(held.ticket)
        if held.ticket is model.trial:
            model.trial = None

    @rule(route_id=st.sampled_from(ROUTES))
    def close(self, route_id: str) -> None:
        """A health probe found the route's provider online."""
        model = self.model[route_id]
        closed = self.breakers.close(route_id)
        assert closed == (model.state != "closed")
        if closed:
            self._expect_transition(route_id, model.state, "closed")

    @rule(seconds=st.one_of(st.sampled_from([0.5, 1.0, 2.0, 4.0, 6.0]), st.floats(0, 8)))
    def advance(self, seconds: float) -> None:
        self.clock.now += seconds

    @invariant()
    def matches_the_model(self) -> None:
        assert self.seen == [], f"unexpected transitions {self.seen}"
        for route_id, model in self.model.items():
            assert self.breakers.state(route_id) in ("closed", "open", "half_open")
            assert self.breakers.state(route_id) == model.state
            assert model.window <= MAX_COOLDOWN
            retry_after = self.breakers.retry_after(route_id)
            if model.state == "open":
                expected = max(0.0, model.reopen_at - self.clock.now)
                assert retry_after == pytest.approx(expected)
                # (now + window) - now may round a hair above window
                assert retry_after is not None and retry_after <= MAX_COOLDOWN + 1e-9
            else:
                assert retry_after is None

    @invariant()
    def at_most_one_trial_in_flight_per_route(self) -> None:
        for route_id in ROUTES:
            in_flight = [
                held
                for held in self.held
                if held.route_id == route_id
                and held.ticket.trial
                and self.clock.now < held.in_flight_until
                and self.breakers.state(route_id) == "half_open"
            ]
            assert len(in_flight) <= 1


BreakerMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=60, deadline=None)
test_breaker_machine = BreakerMachine.TestCase


def test_an_opening_elsewhere_opens_a_closed_breaker_for_what_is_left_and_is_not_told_back() -> (
    None
):
    clock = FakeClock()
    breakers = _breakers(clock)
    tripped: list[tuple[str, float]] = []
    opened: list[tuple[str, float]] = []
    breakers.on_tripped = lambda route, window: tripped.append((route, window))
    breakers.on_open = lambda route, delay: opened.append((route, delay))
    assert breakers.opened_elsewhere(ROUTE, 4.0)
    assert breakers.state(ROUTE) == "open" and breakers.admit(ROUTE) is None
    assert breakers.retry_after(ROUTE) == 4.0
    assert opened == [(ROUTE, 4.0)] and tripped == []  # the trial timer told; not re-shared
    assert not breakers.opened_elsewhere(ROUTE, 2.0)  # an earlier end changes nothing
    clock.now += 4.0
    trial = _admit(breakers)
    assert trial.trial
    assert not breakers.opened_elsewhere(ROUTE, 5.0)  # a trial is deciding here
    breakers.succeeded(trial)
    assert breakers.state(ROUTE) == "closed"
    assert not breakers.opened_elsewhere(ROUTE, 0.0)  # already over


def test_only_this_replicas_own_failures_are_told_to_the_others() -> None:
    breakers = _breakers(FakeClock())
    tripped: list[tuple[str, float]] = []
    breakers.on_tripped = lambda route, window: tripped.append((route, window))
    _trip(breakers)
    assert tripped == [(ROUTE, 10.0)]


def test_an_opening_elsewhere_adopts_a_longer_cooldown_so_a_failed_trial_here_doubles_it() -> None:
    clock = FakeClock()
    breakers = _breakers(clock)
    assert breakers.opened_elsewhere(ROUTE, 40.0)  # another replica's trial failed: 40 s
    assert breakers.cooldown(ROUTE) == 40.0
    clock.now += 40.0
    breakers.failed(_admit(breakers))  # this replica's trial fails in turn
    assert breakers.retry_after(ROUTE) == 60.0  # doubled from 40, capped at the maximum


def test_a_trials_success_and_a_probes_close_are_told_to_on_closed() -> None:
    clock = FakeClock()
    breakers = _breakers(clock)
    closed: list[str] = []
    breakers.on_closed = closed.append
    breakers.succeeded(_admit(breakers))  # a closed breaker's success tells nothing
    _trip(breakers)
    clock.now += 10.0
    breakers.succeeded(_admit(breakers))
    assert closed == [ROUTE]
    _trip(breakers)
    assert breakers.close(ROUTE) and closed == [ROUTE, ROUTE]
    assert not breakers.close(ROUTE) and closed == [ROUTE, ROUTE]


def test_a_closing_elsewhere_closes_a_breaker_opened_before_it_and_is_not_told_back() -> None:
    clock = FakeClock()
    transitions: list[tuple[str, str, str]] = []
    breakers = _breakers(clock, transitions)
    closed: list[str] = []
    breakers.on_closed = closed.append
    assert not breakers.closed_elsewhere(ROUTE, 0.0)  # never seen here: nothing to close
    _trip(breakers)
    clock.now += 5.0
    # Closed elsewhere 6 s ago, before this replica's own opening: stale, it stays open.
    assert not breakers.closed_elsewhere(ROUTE, 6.0)
    assert breakers.state(ROUTE) == "open"
    assert breakers.closed_elsewhere(ROUTE, 1.0)
    assert breakers.state(ROUTE) == "closed" and closed == []
    assert transitions[-1] == (ROUTE, "open", "closed")
    # Half-open here (a request's trial in flight): the closing elsewhere ends it; the
    # trial's late report changes nothing.
    _trip(breakers)
    clock.now += 10.0
    trial = _admit(breakers)
    assert breakers.state(ROUTE) == "half_open"
    assert breakers.closed_elsewhere(ROUTE, 0.0)
    breakers.failed(trial)
    assert breakers.state(ROUTE) == "closed" and breakers.cooldown(ROUTE) == 10.0
    # An opening told by another replica counts as this one's opening moment.
    assert breakers.opened_elsewhere(ROUTE, 10.0)
    clock.now += 2.0
    assert not breakers.closed_elsewhere(ROUTE, 3.0)
    assert breakers.closed_elsewhere(ROUTE, 1.0)
