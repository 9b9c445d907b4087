"""The Redis subscription of shared breakers (shared/breakers.py) backs off while Redis
cannot be reached: each failed attempt's name lookup may hold an executor thread for the
resolver's whole timeout, and attempts at a fixed short pace filled the executor of a
replica whose DNS was reloading (the smoke test's replica started 40 s late)."""

from __future__ import annotations

import asyncio
import socket

from structlog.testing import capture_logs
from structlog.typing import EventDict

from llmrelay.routing.breaker import Breakers
from llmrelay.shared.breakers import RESUBSCRIBE_S, SharedBreakers
from llmrelay.snapshot.model import BreakerSettings

#: Generous: the wait ends at the third failure, about 3 s in.
CEILING_S = 30.0


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed: refused at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_the_subscription_retries_less_often_while_redis_stays_away() -> None:
    shared = SharedBreakers(
        Breakers(BreakerSettings()), f"redis://127.0.0.1:{_closed_port()}/0", None
    )
    pauses: list[float] = []
    third = asyncio.Event()

    def failures(_logger: object, _name: str, event: EventDict) -> EventDict:
        if event["event"] == "breaker_subscription_lost":
            pauses.append(event["retry_in_s"])
            if len(pauses) == 3:
                third.set()
        return event

    with capture_logs(processors=[failures]):
        shared.start()
        try:
            await asyncio.wait_for(third.wait(), CEILING_S)
        finally:
            await shared.close()
    assert pauses[:3] == [RESUBSCRIBE_S, 2 * RESUBSCRIBE_S, 4 * RESUBSCRIBE_S]
    assert not shared.listening.is_set()
