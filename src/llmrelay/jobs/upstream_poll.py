"""Following a Response the provider runs in the background: `GET /responses/{id}` at that
provider until it is done, and `POST /responses/{id}/cancel` when the client cancels. This is
how a background response survives its worker: the id is in the job's checkpoint, and the next
attempt polls it instead of asking the provider again.

Polls start quick and slow down (0.5 s up to 5 s apart). A provider that cannot be reached
or answers 429/5xx is asked again at the next poll; one that no longer knows the id (404),
refuses the gateway (401/403) or sends something that is not a Response ends the polling.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Final

import orjson
import structlog

from llmrelay.gateway.executor import summarise
from llmrelay.gateway.headless import Headless
from llmrelay.protocols.openai import upstream_error_message
from llmrelay.providers.errors import UpstreamError
from llmrelay.snapshot.model import ProviderSnap

log = structlog.get_logger(__name__)

#: A Response in one of these states is done.
TERMINAL: Final = frozenset({"completed", "failed", "cancelled", "incomplete"})
FIRST_POLL_S: Final = 0.5
LONGEST_POLL_S: Final = 5.0
CANCEL_WAIT_S: Final = 5.0


class PollFailed(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


async def poll(
    headless: Headless, provider: ProviderSnap, upstream_id: str, *, request_id: str, until: float
) -> dict[str, Any]:
    """The Response once it is done; PollFailed when it cannot be had by `until`."""
    wait = FIRST_POLL_S
    path = f"/responses/{upstream_id}"
    while True:
        if time.time() >= until:
            raise PollFailed("expired", "the response was not done before the job expired")
        try:
            status, raw = await headless.fetch(provider, "GET", path, request_id)
        except UpstreamError as exc:
            log.warning("response_poll_failed", provider=provider.slug, error=str(exc))
        else:
            found = _read(provider, status, raw)
            if found is not None and found.get("status") in TERMINAL:
                return found
        await asyncio.sleep(max(0.0, min(wait, until - time.time())))
        wait = min(wait * 1.5, LONGEST_POLL_S)


def _read(provider: ProviderSnap, status: int, raw: bytes) -> dict[str, Any] | None:
    """The polled Response, None to poll again, or PollFailed."""
    if status == 429 or status >= 500:
        return None
    if status >= 300:
        detail = summarise(upstream_error_message(raw) or raw.decode("utf-8", "replace")[:200])
        code = "upstream_lost" if status == 404 else "upstream_refused"
        raise PollFailed(code, f"provider {provider.slug} answered {status}: {detail}")
    try:
        found = orjson.loads(raw)
    except orjson.JSONDecodeError:
        found = None
    if not isinstance(found, dict) or not isinstance(found.get("status"), str):
        raise PollFailed("upstream_error", f"provider {provider.slug} sent no Response")
    return found


async def cancel(
    headless: Headless, provider: ProviderSnap, upstream_id: str, *, request_id: str
) -> None:
    """Ask the provider to stop (best effort, bounded: the job is cancelled either way)."""
    try:
        async with asyncio.timeout(CANCEL_WAIT_S):
            await headless.fetch(provider, "POST", f"/responses/{upstream_id}/cancel", request_id)
    except (UpstreamError, TimeoutError) as exc:
        log.warning("response_cancel_failed", provider=provider.slug, error=str(exc))
