"""How long the event loop keeps work waiting: the `llmrelay_event_loop_lag_seconds` histogram.

Everything a serving process does (requests, streams, record batches, polls) shares one event
loop; while one piece of work runs, everything else that is ready waits. A request's own
latency says how long it took; this says how long the loop made anything wait, whatever held
it: a record batch, a poll, a garbage collection, a slow request's parse.

A small thread posts a marker to the loop every `interval_s` (randomised within +-50 %, so it
does not fall in step with the process's other periodic work) with `call_soon_threadsafe`,
which wakes the loop at once; the loop runs the marker as soon as what it is running and what
was ready before it are done, and the marker observes how long that took. The thread takes its
samples at moments unrelated to the loop's work, so the histogram is the wait that an arrival
at a random moment would have had, with no timer resolution in it (uvloop's timers count whole
milliseconds; a marker's wait is measured with the performance counter). A loop blocked for
N seconds shows up as the markers posted meanwhile, each with its own wait.

Cost: one wake-up of the loop and a few microseconds of Python every `interval_s` (0.1 s by
default, LLMRELAY_LOOP_LAG_SAMPLE_S; 0 turns it off), nothing on the request path.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable


class LoopLagSampler:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        observe: Callable[[float], None],
        interval_s: float = 0.1,
    ) -> None:
        self._loop = loop
        self._observe = observe
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="llmrelay-loop-lag", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop posting markers and wait for the thread (at most an interval)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        interval = self._interval_s
        while not self._stop.wait(interval * random.uniform(0.5, 1.5)):
            try:
                self._loop.call_soon_threadsafe(self._arrived, time.perf_counter())
            except RuntimeError:  # the loop was closed: nothing left to watch
                return

    def _arrived(self, posted: float) -> None:
        self._observe(time.perf_counter() - posted)
