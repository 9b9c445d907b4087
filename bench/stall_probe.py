"""Runs `llmrelay serve` in this process with instruments that find what stalls its event loop.

    python -m bench.stall_probe --out EVENTS.json [--loop asyncio|uvloop] -- serve --config ...

A diagnostic, never part of the product: bench/stalls.py starts it under load and reads the
file it writes when the server stops. What it installs before handing over to the CLI:

- **GC pauses**: `gc.callbacks` time every collection (generation, duration, objects
  collected).
- `--loop asyncio` (the default): the server runs on asyncio's own loop instead of uvloop, and
  `asyncio.Handle._run` is wrapped to time every callback the loop runs. A callback is the unit
  the loop cannot interrupt: one that runs longer than `--threshold-ms` is a stall, and the
  wrapper names it (the task and the line its coroutine stopped at, or the transport
  callback). Exact attribution, at the price of a slower loop than uvloop's.
- `--loop uvloop` (as shipped): uvloop's callbacks cannot be wrapped, so a watchdog thread
  posts a marker to the loop every `--period-ms` (call_soon_threadsafe, which wakes the loop at
  once) and, while the marker waits, samples the main thread's Python stack every 0.2 ms. A
  marker that waited longer than the threshold is a stall; its cause is the stack seen most
  (run the sources, LLMRELAY_PURE_PYTHON=1, for stacks: compiled code has no Python frames).
  The thread's GIL requests cost the server some CPU; the wait times are exact.

Times are time.monotonic() (CLOCK_MONOTONIC, the same clock in every process), so the
caller can split the events by its load windows.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import gc
import json
import sys
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

#: Stack frames from these files are the machinery around the cause, not the cause.
_PLUMBING = ("/asyncio/", "/uvloop/", "/threading.py", "bench/stall_probe.py")


class Events:
    """What the instruments saw, written once at exit."""

    def __init__(self, out: Path, threshold_s: float, loop: str) -> None:
        self.out = out
        self.threshold_s = threshold_s
        self.loop = loop
        self.stalls: list[dict[str, Any]] = []
        #: start (monotonic), CPU seconds, generation, objects collected
        self.gc: list[tuple[float, float, int, int]] = []
        self.callbacks = 0
        #: asyncio: every callback's start and CPU seconds, by kind (_kind): the distribution
        #: of each periodic job's slices beside the request steps' (the yardstick).
        self.slices: defaultdict[str, list[tuple[float, float]]] = defaultdict(list)
        #: asyncio: a stall is a callback whose CPU time (not wall time) passed the threshold.
        self.by_cpu = True
        self._gc_started = 0.0
        self._gc_cpu = 0.0

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        now = time.monotonic()
        if phase == "start":
            self._gc_started, self._gc_cpu = now, time.thread_time()
        else:
            cpu = time.thread_time() - self._gc_cpu
            self.gc.append((self._gc_started, cpu, info["generation"], info["collected"]))

    def dump(self) -> None:
        data = {
            "loop": self.loop,
            "threshold_s": self.threshold_s,
            "callbacks": self.callbacks,
            "by_cpu": self.by_cpu and self.loop == "asyncio",
            "stalls": self.stalls,
            "slices": self.slices,
            "gc": self.gc,
        }
        self.out.write_text(json.dumps(data))


def _where(frame: FrameType | None) -> str:
    """file:line function of the innermost frame outside asyncio's own code."""
    seen = ""
    while frame is not None:
        code = frame.f_code
        if not any(part in code.co_filename for part in _PLUMBING):
            seen = f"{_short(code.co_filename)}:{frame.f_lineno} {code.co_qualname}"
        frame = frame.f_back
    return seen


def _short(filename: str) -> str:
    for marker in ("/site-packages/", "/src/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def _suspended_at(coro: Any) -> str:
    """The innermost line a coroutine chain is waiting at (after its step)."""
    last = ""
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            last = f"{_short(frame.f_code.co_filename)}:{frame.f_lineno}"
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return last


def describe(callback: Callable[..., Any]) -> str:
    """A callback the loop ran, in words: the task it stepped (name, coroutine, where it
    waits now), or the bound method (a transport reading a socket, a timer's function)."""
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro = owner.get_coro()
        name = getattr(coro, "__qualname__", type(coro).__name__)
        return f"task {name} (now at {_suspended_at(coro)})"
    if owner is not None:
        protocol = getattr(owner, "_protocol", None)
        extra = f" -> {type(protocol).__name__}" if protocol is not None else ""
        return f"{type(owner).__name__}.{getattr(callback, '__name__', '?')}{extra}"
    return getattr(callback, "__qualname__", repr(callback))


def _kind(callback: Callable[..., Any]) -> str:
    """A cheap name for a callback: the coroutine a task steps, or the bound method."""
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro = owner.get_coro()
        return str(getattr(coro, "__qualname__", type(coro).__name__))
    if owner is not None:
        return f"{type(owner).__name__}.{getattr(callback, '__name__', '?')}"
    return str(getattr(callback, "__qualname__", "?"))


def instrument_asyncio(events: Events) -> None:
    """Time every callback of asyncio's loop (the diagnostic's default)."""
    import uvicorn.config

    uvicorn.config.LOOP_FACTORIES["uvloop"] = "uvicorn.loops.asyncio:asyncio_loop_factory"
    run = asyncio.events.Handle._run
    threshold = events.threshold_s

    def timed(handle: asyncio.Handle) -> None:
        started, cpu = time.monotonic(), time.thread_time()
        run(handle)
        took, cpu = time.monotonic() - started, time.thread_time() - cpu
        events.callbacks += 1
        callback = handle._callback  # type: ignore[attr-defined]
        events.slices[_kind(callback)].append((started, cpu))
        # CPU time: on a shared machine the wall time of a callback also counts the time
        # another process had the core; what the callback itself costs does not move.
        if (cpu if events.by_cpu else took) > threshold:
            events.stalls.append(
                {
                    "at": started,
                    "ms": took * 1000,
                    "cpu_ms": cpu * 1000,
                    "cause": describe(callback),
                    "stacks": {},
                }
            )

    asyncio.events.Handle._run = timed  # type: ignore[method-assign,assignment]


class Watchdog(threading.Thread):
    """uvloop: how long the loop takes to run a marker posted from outside it, and what the
    main thread was running while the marker waited."""

    def __init__(self, events: Events, period_s: float) -> None:
        super().__init__(name="stall-watchdog", daemon=True)
        self.events = events
        self.period_s = period_s
        self.loop: asyncio.AbstractEventLoop | None = None
        self.main = threading.main_thread().ident or 0

    def run(self) -> None:
        while self.loop is None:
            time.sleep(0.01)
        loop, events = self.loop, self.events
        while not loop.is_closed():
            done = threading.Event()
            posted = time.monotonic()
            try:
                loop.call_soon_threadsafe(done.set)
            except RuntimeError:  # closed meanwhile
                return
            stacks: Counter[str] = Counter()
            while not done.wait(0.0002):
                frame = sys._current_frames().get(self.main)
                if frame is not None:
                    stacks[_stack_line(frame)] += 1
            waited = time.monotonic() - posted
            events.callbacks += 1
            if waited > events.threshold_s:
                cause = stacks.most_common(1)[0][0] if stacks else "(no Python frame)"
                events.stalls.append(
                    {"at": posted, "ms": waited * 1000, "cause": cause, "stacks": dict(stacks)}
                )
            time.sleep(self.period_s)


def _stack_line(frame: FrameType) -> str:
    """The innermost frames outside the loop's machinery, outermost first, short."""
    lines = [
        f"{_short(f.filename)}:{f.lineno} {f.name}"
        for f in traceback.extract_stack(frame)
        if not any(part in f.filename for part in _PLUMBING)
    ]
    return " <- ".join(reversed(lines[-4:])) or "(loop machinery)"


def instrument_uvloop(events: Events, period_s: float) -> None:
    import uvicorn.config

    watchdog = Watchdog(events, period_s)
    get_factory = uvicorn.config.Config.get_loop_factory

    def factory_with_watchdog(self: Any) -> Callable[[], asyncio.AbstractEventLoop] | None:
        make = get_factory(self)
        if make is None:
            return None

        def new_loop() -> asyncio.AbstractEventLoop:
            assert make is not None
            loop = make()
            watchdog.loop = loop
            return loop

        return new_loop

    uvicorn.config.Config.get_loop_factory = factory_with_watchdog  # type: ignore[method-assign]
    # The watchdog must get the GIL while the loop runs Python code: a switch interval of 5 ms
    # (the default) would make every sample wait that long.
    sys.setswitchinterval(0.0001)
    watchdog.start()


def override_gc(threshold: str | None, *, freeze: bool) -> None:
    """Replace llmrelay's start-up GC settings (for comparing them)."""
    import llmrelay.app

    settle = llmrelay.app.settle_garbage_collector

    def settle_differently() -> None:
        if freeze:
            settle()
        else:
            gc.collect()
        if threshold:
            gc.set_threshold(*(int(x) for x in threshold.split(",")))

    llmrelay.app.settle_garbage_collector = settle_differently


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    parser.add_argument("--threshold-ms", type=float, default=0.5)
    parser.add_argument("--period-ms", type=float, default=2.0, help="uvloop: marker period")
    parser.add_argument(
        "--wall", action="store_true", help="asyncio: judge callbacks by wall time, not CPU time"
    )
    parser.add_argument(
        "--gc-threshold",
        help="G0,G1,G2: the collector's thresholds after llmrelay's start-up settles them "
        "(llmrelay.app.settle_garbage_collector), to compare settings",
    )
    parser.add_argument(
        "--no-gc-freeze", action="store_true", help="start-up settles the GC without gc.freeze()"
    )
    parser.add_argument("cli", nargs=argparse.REMAINDER, help="-- then llmrelay's arguments")
    args = parser.parse_args()
    events = Events(args.out, args.threshold_ms / 1000, args.loop)
    events.by_cpu = not args.wall
    gc.callbacks.append(events.on_gc)
    atexit.register(events.dump)
    if args.loop == "asyncio":
        instrument_asyncio(events)
    else:
        instrument_uvloop(events, args.period_ms / 1000)
    if args.gc_threshold or args.no_gc_freeze:
        override_gc(args.gc_threshold, freeze=not args.no_gc_freeze)
    cli = [a for a in args.cli if a != "--"]
    sys.argv = ["llmrelay", *cli]
    from llmrelay.cli import main as llmrelay_main

    llmrelay_main()


if __name__ == "__main__":
    main()
