"""Waiting for this process's own queued lease releases before a concurrency refusal stands.

Why: a shared limiter (Redis, PostgreSQL) gives a request's concurrency lease back when the
request ends, but writes that off the request path, a moment after the answer's last byte
left. A client that sends its next request at once (an agent's loop at concurrency 1) could
be refused by its own previous request's lease: seen in CI under load. So when a shared
limiter refuses on concurrency an admission it sent while releases it had queued were still
unwritten, it waits for those (at most RELEASE_WAIT_S) and asks once more. Only that
refusal pays; another replica's releases are not waited for (a window of milliseconds:
docs/limits.md)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Final

from llmrelay.limits.base import Admission, LimitKind, Plan
from llmrelay.limits.errors import LimitExceeded

Ask = Callable[[Plan, int, float, "str | None", int], Awaitable[Admission]]

#: The longest a concurrency refusal waits for this process's queued releases.
RELEASE_WAIT_S: Final = 0.5


class Releases:
    """Counts settles queued and sent by one limiter's background writer."""

    __slots__ = ("_sent_event", "queued", "sent")

    def __init__(self) -> None:
        self.queued = 0
        self.sent = 0
        self._sent_event = asyncio.Event()

    def mark_sent(self, count: int) -> None:
        """`count` queued settles were written (or given up on: waiting cannot help them)."""
        self.sent += count
        event, self._sent_event = self._sent_event, asyncio.Event()
        event.set()

    async def admit(
        self, ask: Ask, plan: Plan, tokens: int, now: float, lease: str | None, hold: int
    ) -> Admission:
        """`ask(...)`, the limiter's one admission; asked again once if it was refused on
        concurrency while settles this limiter had queued before it were still unwritten."""
        queued = self.queued  # what had ended before this admission was asked for
        unwritten = self.sent < queued
        try:
            return await ask(plan, tokens, now, lease, hold)
        except LimitExceeded as refused:
            if not unwritten or refused.quota.kind is not LimitKind.CONCURRENCY:
                raise
        await self.written(queued)
        return await ask(plan, tokens, now, lease, hold)

    async def written(self, target: int) -> None:
        """Wait until the first `target` queued settles are sent (or RELEASE_WAIT_S passed)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RELEASE_WAIT_S
        while self.sent < target:
            left = deadline - loop.time()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._sent_event.wait(), left)
