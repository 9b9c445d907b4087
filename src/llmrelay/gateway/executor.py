"""Sending one call to a virtual model's routes, in the order the router gave, until one
answers: retries on the same route, failover to the next, and the circuit breakers.

The contract's rules (docs/api.md, "Failover"):
- connection errors, 429 and 5xx: retried on the same route while `retry.attempts` allows,
  waiting for the provider's `Retry-After` when it fits the request's deadline, else an
  exponential backoff with full jitter (never less than MIN_RETRY_GAP_S: a failing route gets
  a few attempts per second at most); then the next route. The breaker is asked before any
  wait: when the failure opened it (or it was the half-open trial that failed), the next
  route is tried at once, and a `Retry-After` past the deadline is not waited for either;
- timeouts (connect, first byte, first token): the next route at once, never the same one;
- 401/403/404: the route is misconfigured: its breaker opens at once, next route, and never a
  401 to the client; a 401 or 403 also tells `on_credentials_refused` (the process queues
  one health probe of the provider: jobs/probe_trigger.py);
- 400/413/422: about the request itself: returned to the client as they are.

The first attempt costs a breaker admission and a clock read more than a plain call; the
retry machinery runs only once something failed.
"""

from __future__ import annotations

import asyncio
import math
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from email.utils import parsedate_to_datetime
from typing import Any, Final, TypeVar

from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.capabilities import Needs, capable
from llmrelay.gateway.errors import (
    GatewayError,
    InvalidRequest,
    NoCandidate,
    UpstreamFailed,
    UpstreamTimeout,
)
from llmrelay.gateway.resources import ResourcePicker
from llmrelay.gateway.trials import BreakerTrials
from llmrelay.protocols.openai import upstream_error_message
from llmrelay.protocols.translation import TranslationError
from llmrelay.providers.base import Operation, UnsupportedOperation, UpstreamResponse
from llmrelay.providers.bridges import build_request
from llmrelay.providers.errors import (
    UpstreamAddressRefused,
    UpstreamConnectError,
    UpstreamError,
    UpstreamTimeoutError,
    UpstreamUnavailable,
)
from llmrelay.providers.registry import ProviderRegistry, UnsupportedProvider
from llmrelay.routing.affinity import AffinityStore, SessionAffinity
from llmrelay.routing.breaker import Breakers
from llmrelay.routing.strategies import Router
from llmrelay.snapshot.model import ModelSnap, PolicySnap, ProviderSnap, RouteSnap

_CLIENT_FAULT: Final = frozenset({400, 413, 422})
_MISCONFIGURED: Final = frozenset({401, 403, 404})
_CREDENTIALS_REFUSED: Final = frozenset({401, 403})
_SECRETISH: Final = re.compile(
    r"\b((sk|pk|key|token|bearer)[-_ ]?[A-Za-z0-9*._-]{6,}|AIza[A-Za-z0-9_-]{20,})", re.IGNORECASE
)
_MESSAGE_LIMIT: Final = 300
#: The shortest wait between two attempts on one route.
MIN_RETRY_GAP_S: Final = 0.25
#: The error code of a target whose account could not be used (nothing was sent).
ACCOUNT_UNAVAILABLE: Final = "account_unavailable"
#: The longest backoff between two attempts on one route (before the deadline check).
MAX_BACKOFF_S: Final = 10.0


class UpstreamRejected(GatewayError):
    """The provider refused the request itself (400/413/422): the client gets its answer."""

    def __init__(self, status: int, body: bytes, provider: str) -> None:
        super().__init__(
            upstream_error_message(body) or f"provider {provider} rejected the request",
            code="upstream_rejected",
        )
        self.status = status
        self.body = body

    @property
    def context_too_long(self) -> bool:
        """The provider's "context length exceeded" (OpenAI's code, or its message)."""
        text = self.body[:4000].lower()
        return b"context_length_exceeded" in text or b"maximum context length" in text


T = TypeVar("T")
#: Takes over a successful response head: reads the answer (or a stream's first content)
#: and raises providers.errors.UpstreamError when the route should be given up.
Finisher = Callable[[RouteSnap, UpstreamResponse], Awaitable[T]]


def candidates(
    model: ModelSnap,
    pinned_provider: str | None,
    policy: PolicySnap | None = None,
    needs: Needs | None = None,
) -> Sequence[RouteSnap]:
    """The routes that may be tried: enabled ones, only the pinned provider's if pinned,
    only those the key's routing policy allows if it has one, only those not known to lack
    what the request `needs` (CapabilityMissing when that leaves none). Without a pin, a
    policy or a capability left out, this is `model.enabled_routes` itself (the router
    recognises it: no copy, no compare)."""
    routes: Sequence[RouteSnap] = model.enabled_routes
    if pinned_provider is not None:
        routes = [r for r in routes if r.provider.slug == pinned_provider]
    if policy is not None:
        routes = [r for r in routes if policy.allows(r)]
    if needs is not None:
        routes = capable(model, routes, needs)
    return routes


def summarise(text: str) -> str:
    """An upstream message fit to show a client: one line, short, no key-like tokens."""
    text = _SECRETISH.sub("[redacted]", " ".join(text.split()))
    return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 1] + "…"


def backoff_s(attempt: int, base_s: float, rng: random.Random) -> float:
    """Exponential backoff with full jitter (tenacity's `wait_random_exponential` formula:
    uniform between 0 and base * 2^(attempt - 1), capped), never under MIN_RETRY_GAP_S."""
    ceiling = min(MAX_BACKOFF_S, base_s * 2 ** (attempt - 1))
    return max(MIN_RETRY_GAP_S, rng.uniform(0.0, ceiling))


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """An HTTP `Retry-After` (seconds, or an HTTP date) in seconds from now."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if math.isnan(seconds) or seconds < 0:
        return 0.0 if not math.isnan(seconds) else None
    return seconds


def _account_back_in(error: GatewayError) -> int | None:
    """The Retry-After (whole seconds) of an unavailable account's error, if it said one."""
    if error.code != ACCOUNT_UNAVAILABLE or not error.headers:
        return None
    value = error.headers.get("Retry-After")
    return int(value) if value is not None and value.isdigit() else None


def _kind(record: CallRecord, route: RouteSnap) -> str:
    """first, retry (the same route again) or fallback (another route, or model)."""
    if record.attempts == 0:
        return "first"
    return "retry" if record.route_id == route.id else "fallback"


class _Retry(Exception):
    """This attempt failed in a way worth repeating on the same route."""

    def __init__(
        self, error: GatewayError, wait_s: float | None = None, *, status: int | None = None
    ) -> None:
        self.error = error
        self.wait_s = wait_s
        self.status = status


class _NextRoute(Exception):
    """This route is done for this request; try the next one at once."""

    def __init__(self, error: GatewayError, status: int | None = None) -> None:
        self.error = error
        self.status = status


class Executor:
    """Built once per process (the breakers and the router's statistics live here)."""

    def __init__(
        self,
        registry: ProviderRegistry,
        breakers: Breakers,
        router: Router,
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.breakers = breakers
        self.router = router
        #: Conversations' routes (sticky routing); per process for now.
        self.affinity: AffinityStore = SessionAffinity()
        self._rng = rng or random.Random()
        self.clock = clock
        #: Called with a provider's id when it refuses the gateway's credentials (401/403);
        #: it must return at once (it queues a probe off the request path).
        self.on_credentials_refused: Callable[[str], None] | None = None
        #: Sends the breakers' trials when their cooldowns end (stack.py sets it).
        self.trials: BreakerTrials | None = None
        #: Which provider resource each attempt uses, and their quota buckets.
        self.resources = ResourcePicker()

    def usable(self, route_id: str) -> bool:
        """Whether a route's breaker is closed (a session is kept only on a healthy route)."""
        return self.breakers.state(route_id) == "closed"

    async def execute(
        self,
        operation: Operation,
        model: ModelSnap,
        routes: list[RouteSnap],
        payload: dict[str, Any],
        forwarded_headers: Mapping[str, str],
        record: CallRecord,
        finish: Finisher[T],
        *,
        deadline_at: float,
        strategy: str | None = None,
        bound_resource: str | None = None,
    ) -> T:
        """The first route (in `routes` order) that answers and whose answer `finish`
        accepts; else the contract's error for the last failure (502/504), or 503 with
        `Retry-After` when every route was cooling down. `strategy` is the one that ordered
        `routes` when a routing policy replaced the model's (it decides what is measured);
        `bound_resource`, the account the call's conversation is bound to (tried first on
        its route while it is available)."""
        if strategy is None:
            strategy = model.strategy
        last: GatewayError | None = None
        cooling: list[float] = []
        hint: float | None = None  # the last Retry-After a provider sent
        # The soonest an account out of its usage limit is back (Retry-After, seconds): told
        # when the last target was unavailable too but could not say when (an empty resource).
        soonest: int | None = None
        # A provider with resources: its routes' attempts go to its resources in turn
        # (gateway/resources.py), each judged by its resource's breaker (`breaker_key`).
        targets = (
            self.resources.targets(routes, strategy, record, bound_resource)
            if model.resourced
            else routes
        )
        for route in targets:
            ticket = self.breakers.admit(route.breaker_key)
            if ticket is None:
                cooling.append(self.breakers.retry_after(route.breaker_key) or 1.0)
                continue
            attempt = 1
            while True:
                kind = _kind(record, route)
                record.attempts += 1
                record.route_id = route.id
                record.price = route.price or model.price
                started = self.clock()
                try:
                    result, status = await self._call(
                        operation,
                        strategy,
                        route,
                        ticket,
                        payload,
                        forwarded_headers,
                        record,
                        finish,
                    )
                except _NextRoute as failure:
                    self._log(record, kind, failure.status, failure.error.code, started)
                    last = failure.error
                    back = _account_back_in(last)
                    if back is not None and (soonest is None or back < soonest):
                        soonest = back
                    break
                except _Retry as again:
                    self._log(record, kind, again.status, again.error.code, started)
                    last = again.error
                    hint = again.wait_s if again.wait_s is not None else hint
                    if attempt >= model.retry_attempts:
                        break
                    if self.breakers.state(route.breaker_key) != "closed":
                        break  # a failed trial, or the failure that opened it: move on at once
                    wait = again.wait_s
                    if wait is None:
                        wait = backoff_s(attempt, model.retry_backoff_ms / 1000, self._rng)
                    if self.clock() + wait >= deadline_at:
                        break  # a wait past the deadline (a long Retry-After): the next route
                    await asyncio.sleep(wait)
                    ticket = self.breakers.admit(route.breaker_key)  # it may have opened meanwhile
                    if ticket is None:
                        break
                    attempt += 1
                    continue
                except UpstreamRejected as rejected:
                    self._log(record, kind, rejected.status, rejected.code, started)
                    raise
                if record.attempt_log is not None:  # it answered after failed attempts
                    self._log(record, kind, status, "ok", started)
                if strategy == "least_time":
                    now = self.clock()
                    self.router.latency.observe(route.id, now - started, now)
                return result
        if last is None:
            if cooling:
                retry = max(1, math.ceil(min(cooling)))
                raise NoCandidate(
                    "every route of this model is cooling down after failures",
                    code="routes_cooling_down",
                    headers={"Retry-After": str(retry)},
                )
            denied = sorted({r.provider.slug for r in model.routes if r.denied})
            if denied:
                raise NoCandidate(
                    "the providers of this model's routes are unavailable (their health probe "
                    f"failed: {', '.join(denied)}); they are probed again automatically",
                    code="providers_unavailable",
                )
            raise NoCandidate("no enabled route for this model")
        if hint is not None and not last.headers:  # "retry after" where a provider said when
            last.headers = {"Retry-After": str(max(1, math.ceil(hint)))}
        elif soonest is not None and not last.headers and last.code == ACCOUNT_UNAVAILABLE:
            last.headers = {"Retry-After": str(soonest)}
        try:
            raise last
        finally:
            # The traceback keeps this frame: with the error still among its locals, each
            # failed request would be a reference cycle left to the garbage collector.
            del last

    def _log(
        self, record: CallRecord, kind: str, status: int | None, outcome: str, started: float
    ) -> None:
        record.log_attempt(kind, status, outcome, (self.clock() - started) * 1000.0)

    async def _call(
        self,
        operation: Operation,
        strategy: str,
        route: RouteSnap,
        ticket: Any,
        payload: dict[str, Any],
        forwarded_headers: Mapping[str, str],
        record: CallRecord,
        finish: Finisher[T],
    ) -> tuple[T, int]:
        """One upstream call; the finisher's result and the provider's status."""
        provider = route.provider
        slug = provider.slug
        record.provider = slug
        record.provider_type = provider.type
        record.upstream_model = route.upstream_model
        breakers = self.breakers
        try:
            adapter = self.registry.adapter(provider.type)
        except UnsupportedProvider as unsupported:
            breakers.failed(ticket, misconfigured=True)
            error = UpstreamFailed(f"provider {slug}: {unsupported}", code="provider_unsupported")
            raise _NextRoute(error) from None
        try:
            request = build_request(adapter, operation, route, payload, forwarded_headers)
        except TranslationError as untranslatable:
            # What the request asks cannot be said in this provider's protocol.
            breakers.abandon(ticket)
            raise InvalidRequest(
                f"provider {slug} cannot serve this request: {untranslatable.message}",
                param=untranslatable.param,
            ) from None
        except UnsupportedOperation as unserved:
            breakers.abandon(ticket)
            raise _NextRoute(
                UpstreamFailed(f"provider {slug}: {unserved}", code="unsupported")
            ) from None
        record.dropped = request.dropped  # the attempt that answers says what it left out
        # In-flight counts are kept only for the strategy that reads them.
        counted = strategy == "load_balance"
        in_flight = self.router.in_flight
        if counted:
            in_flight.start(route.id)
        committed = False
        try:
            try:
                response = await self.registry.transport(provider.type).send(request, provider)
                if request.translate is not None:
                    response = request.translate(response)
            except UpstreamTimeoutError as timed_out:
                breakers.failed(ticket)
                raise _NextRoute(UpstreamTimeout(f"provider {slug}: {timed_out}")) from None
            except UpstreamAddressRefused as refused:
                # Judged without a connection, at the cost of a dictionary look-up: no breaker
                # to open, and every client is told the rule rather than "cooling down".
                breakers.abandon(ticket)
                error = UpstreamFailed(f"provider {slug}: {refused}", code="address_refused")
                raise _NextRoute(error) from None
            except UpstreamUnavailable as resting:
                # An account out of its usage limit, or none signed in: nothing was sent.
                breakers.abandon(ticket)
                retry = None
                if resting.retry_at is not None:
                    wait = max(1, math.ceil(resting.retry_at - time.time()))
                    retry = {"Retry-After": str(wait)}
                unavailable = NoCandidate(
                    f"provider {slug}: {resting}", code=ACCOUNT_UNAVAILABLE, headers=retry
                )
                raise _NextRoute(unavailable) from None
            except UpstreamError as failed:
                breakers.failed(ticket)
                error = UpstreamFailed(f"provider {slug}: {failed}", code="upstream_unreachable")
                raise _Retry(error) from None
            record.mark_first_byte()
            status = response.status
            if status >= 300:
                await self._refused(response, provider, ticket)
            try:
                result = await finish(route, response)
            except UpstreamTimeoutError as timed_out:
                response.release()
                breakers.failed(ticket)
                timeout = UpstreamTimeout(f"provider {slug}: {timed_out}")
                raise _NextRoute(timeout, status) from None
            except UpstreamConnectError as lost:
                response.release()
                breakers.failed(ticket)
                error = UpstreamFailed(f"provider {slug}: {lost}", code="upstream_error")
                raise _Retry(error, status=status) from None
            except UpstreamError as failed:
                response.release()
                breakers.failed(ticket)
                error = UpstreamFailed(f"provider {slug}: {failed}", code="upstream_error")
                raise _NextRoute(error, status) from None
            breakers.succeeded(ticket)
            if counted:
                record.counted_route = route.id  # ended when the call ends (DataPlane._finish)
            committed = True
            return result, status
        except asyncio.CancelledError:
            breakers.abandon(ticket)  # the client left, or the request's deadline passed
            raise
        finally:
            if counted and not committed:
                in_flight.end(route.id)

    async def _refused(
        self, response: UpstreamResponse, provider_snap: ProviderSnap, ticket: Any
    ) -> None:
        """An error answer: raise what the executor does next (always raises)."""
        status = response.status
        provider = provider_snap.slug
        try:
            body = await response.read()
        except UpstreamError:
            body = b""
        finally:
            response.release()
        # After the body: a translated response may find the hint there (Gemini's RetryInfo).
        wait = retry_after_s(response.header("retry-after"))
        if status in _CLIENT_FAULT:
            self.breakers.succeeded(ticket)  # the provider is fine; the request is not
            raise UpstreamRejected(status, body, provider)
        detail = summarise(upstream_error_message(body) or body.decode("utf-8", "replace")[:200])
        if status in _MISCONFIGURED:
            self.breakers.failed(ticket, misconfigured=True)
            refused = self.on_credentials_refused
            if refused is not None and status in _CREDENTIALS_REFUSED:
                refused(provider_snap.id)
            raise _NextRoute(
                UpstreamFailed(
                    f"provider {provider} refused the gateway's request ({status}): {detail}",
                    code="upstream_refused",
                ),
                status,
            )
        self.breakers.failed(ticket)
        error = UpstreamFailed(
            f"provider {provider} answered {status}: {detail}", code="upstream_error"
        )
        if status == 429 or status >= 500:
            raise _Retry(error, wait, status=status)
        raise _NextRoute(error, status)
