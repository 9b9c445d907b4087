"""Sending a call to the model's routes until one answers.

For now routes are tried in priority order (then declaration order); the routing issue
replaces `candidates` with the strategies and adds retries and breakers. The rules for
what moves on to the next route are the contract's, so they stay:
- transport errors, timeouts, 429 and 5xx: next route;
- 401/403/404: the route is misconfigured: next route, and never a 401 to the client;
- 400/413/422: about the request itself: returned to the client as they are.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.errors import (
    GatewayError,
    NoCandidate,
    UpstreamFailed,
    UpstreamTimeout,
)
from llmrelay.protocols.openai import upstream_error_message
from llmrelay.providers.base import Operation, UpstreamResponse
from llmrelay.providers.errors import UpstreamError, UpstreamTimeoutError
from llmrelay.providers.registry import ProviderRegistry, UnsupportedProvider
from llmrelay.snapshot.model import ModelSnap, RouteSnap

_CLIENT_FAULT = frozenset({400, 413, 422})
_MISCONFIGURED = frozenset({401, 403, 404})
_SECRETISH = re.compile(r"\b(sk|pk|key|token|bearer)[-_ ]?[A-Za-z0-9*._-]{6,}", re.IGNORECASE)
_MESSAGE_LIMIT = 300


class UpstreamRejected(GatewayError):
    """The provider refused the request itself (400/413/422): the client gets its answer."""

    def __init__(self, status: int, body: bytes, provider: str) -> None:
        super().__init__(
            upstream_error_message(body) or f"provider {provider} rejected the request",
            code="upstream_rejected",
        )
        self.status = status
        self.body = body


T = TypeVar("T")
#: Takes over a successful response head: reads the answer (or a stream's first content)
#: and raises providers.errors.UpstreamError when the route should be given up.
Finisher = Callable[[RouteSnap, UpstreamResponse], Awaitable[T]]


def candidates(model: ModelSnap, pinned_provider: str | None) -> list[RouteSnap]:
    routes = [r for r in model.routes if not r.disabled]
    if pinned_provider is not None:
        routes = [r for r in routes if r.provider.slug == pinned_provider]
    return routes


def summarise(text: str) -> str:
    """An upstream message fit to show a client: one line, short, no key-like tokens."""
    text = _SECRETISH.sub("[redacted]", " ".join(text.split()))
    return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 1] + "…"


async def execute(
    registry: ProviderRegistry,
    operation: Operation,
    routes: list[RouteSnap],
    payload: dict[str, Any],
    forwarded_headers: Mapping[str, str],
    record: CallRecord,
    finish: Finisher[T],
) -> T:
    """The first route that answers and whose answer `finish` accepts; else the contract's
    error for the last failure."""
    last: GatewayError | None = None
    for route in routes:
        provider = route.provider
        record.provider = provider.slug
        record.upstream_model = route.upstream_model
        try:
            adapter = registry.adapter(provider.type)
        except UnsupportedProvider as exc:
            last = UpstreamFailed(f"provider {provider.slug}: {exc}", code="provider_unsupported")
            continue
        request = adapter.build_request(operation, route, payload, forwarded_headers)
        try:
            response = await registry.transport(provider.type).send(request, provider)
        except UpstreamTimeoutError as exc:
            last = UpstreamTimeout(f"provider {provider.slug}: {exc}")
            continue
        except UpstreamError as exc:
            last = UpstreamFailed(f"provider {provider.slug}: {exc}", code="upstream_unreachable")
            continue
        record.mark_first_byte()
        if response.status >= 300:
            last = await _refusal(response, provider.slug)
            continue
        try:
            return await finish(route, response)
        except UpstreamTimeoutError as exc:
            response.release()
            last = UpstreamTimeout(f"provider {provider.slug}: {exc}")
        except UpstreamError as exc:
            response.release()
            last = UpstreamFailed(f"provider {provider.slug}: {exc}", code="upstream_error")
    if last is None:
        raise NoCandidate("no enabled route for this model")
    raise last


async def _refusal(response: UpstreamResponse, provider: str) -> GatewayError:
    """Read an error answer and decide: raise now (client fault) or return it to move on."""
    status = response.status
    try:
        body = await response.read()
    except UpstreamError:
        body = b""
    finally:
        response.release()
    if status in _CLIENT_FAULT:
        raise UpstreamRejected(status, body, provider)
    detail = summarise(upstream_error_message(body) or body.decode("utf-8", "replace")[:200])
    if status in _MISCONFIGURED:
        return UpstreamFailed(
            f"provider {provider} refused the gateway's request ({status}): {detail}",
            code="upstream_refused",
        )
    return UpstreamFailed(f"provider {provider} answered {status}: {detail}", code="upstream_error")
