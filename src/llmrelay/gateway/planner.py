"""Which virtual models may serve a request, in order.

The model asked for first. When every route of it failed, its `fallbacks` are tried in
order, each with its own routes and strategy; when a provider said the prompt is too long
for it ("context length exceeded", a 400 that is never resent unchanged), its
`context_fallbacks` are tried instead, and if none serves, the provider's own error is
returned. A pinned request (`MODEL:PROVIDER`) never leaves that provider, so it has no
fallbacks. A key's routing policy narrows the routes of every model tried, and so do the
request's needs (capabilities.py); a fallback model either leaves no route to is skipped (the
model asked for answers 403 or 400 instead). The answer names the model that served.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Final, TypeVar

from llmrelay.gateway.capabilities import CapabilityMissing, Needs
from llmrelay.gateway.errors import GatewayError, NoCandidate, UpstreamFailed, UpstreamTimeout
from llmrelay.gateway.executor import UpstreamRejected, candidates
from llmrelay.snapshot.model import ModelSnap, PolicySnap, RouteSnap, Snapshot

T = TypeVar("T")
#: Serves the request from one model's candidate routes (raises the executor's errors).
Attempt = Callable[[ModelSnap, Sequence[RouteSnap]], Awaitable[T]]

_ALL_FAILED: Final = (UpstreamFailed, UpstreamTimeout, NoCandidate)


async def serve(
    snapshot: Snapshot,
    tenant_id: str,
    model: ModelSnap,
    pinned: str | None,
    attempt: Attempt[T],
    policy: PolicySnap | None = None,
    needs: Needs | None = None,
) -> tuple[ModelSnap, T]:
    """The model that served, and what `attempt` returned for it."""
    fallback = partial(_fall_back, snapshot, tenant_id, model, attempt=attempt, policy=policy)
    try:
        return model, await attempt(model, candidates(model, pinned, policy, needs))
    except UpstreamRejected as rejected:
        if pinned is not None or not rejected.context_too_long or not model.context_fallbacks:
            raise
        return await fallback(model.context_fallbacks, rejected, needs=needs)
    except _ALL_FAILED as failed:
        if pinned is not None or not model.fallbacks:
            raise
        return await fallback(model.fallbacks, failed, needs=needs)


async def _fall_back(
    snapshot: Snapshot,
    tenant_id: str,
    model: ModelSnap,
    names: tuple[str, ...],
    first: GatewayError,
    *,
    attempt: Attempt[T],
    policy: PolicySnap | None,
    needs: Needs | None,
) -> tuple[ModelSnap, T]:
    context = isinstance(first, UpstreamRejected)
    last = first
    for name in names:
        other = snapshot.model(tenant_id, name)
        if other is None or other.embedding != model.embedding or other is model:
            continue
        try:
            routes = candidates(other, None, policy, needs)
        except CapabilityMissing:
            continue  # it cannot serve this request: not a failure of its own
        if policy is not None and not routes:
            continue  # the policy leaves it nothing to try: not a failure of its own
        try:
            return other, await attempt(other, routes)
        except UpstreamRejected as rejected:
            if not (context and rejected.context_too_long):
                raise
        except _ALL_FAILED as failed:
            last = failed
    raise first if context else last
