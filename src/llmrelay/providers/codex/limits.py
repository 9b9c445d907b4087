"""A ChatGPT account's usage limits, as the Codex backend tells them.

Two windows (primary: a few hours; secondary: a week), each with the share used, its length
and when it resets. They arrive three ways, all read here into one shape (`Limits`, kept as
JSON on the account row):

- `GET {backend}/wham/usage` -> {"plan_type", "rate_limit": {"primary_window":
  {"used_percent", "limit_window_seconds", "reset_at"}, "secondary_window": {...}}};
- every Responses answer's headers: `x-codex-primary-used-percent`,
  `x-codex-primary-window-minutes`, `x-codex-primary-reset-at` (Unix seconds) or
  `x-codex-primary-reset-after-seconds`, and the same for `secondary`;
- a 429 whose error type is `usage_limit_reached`, with `resets_at` (or `resets_in_seconds`).

An account is exhausted while a window stands at 100 % and has not reset: the gateway sends
it nothing until then (accounts.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

import orjson

WINDOWS: Final = ("primary", "secondary")
USAGE_LIMIT_REACHED: Final = "usage_limit_reached"


def from_headers(header: Callable[[str], str | None], now: float | None = None) -> dict[str, Any]:
    """The windows a response's headers state ({} when it states none)."""
    now = time.time() if now is None else now
    found: dict[str, Any] = {}
    for window in WINDOWS:
        used = _number(header(f"x-codex-{window}-used-percent"))
        if used is None:
            continue
        resets_at = _number(header(f"x-codex-{window}-reset-at"))
        if resets_at is None:
            after = _number(header(f"x-codex-{window}-reset-after-seconds"))
            resets_at = now + after if after is not None else None
        minutes = _number(header(f"x-codex-{window}-window-minutes"))
        found[window] = _window(used, minutes, resets_at)
    return found


def from_usage(body: dict[str, Any]) -> dict[str, Any]:
    """The windows and plan of the usage endpoint's answer."""
    found: dict[str, Any] = {}
    limits = body.get("rate_limit")
    if isinstance(limits, dict):
        for window in WINDOWS:
            given = limits.get(f"{window}_window")
            if not isinstance(given, dict):
                continue
            used = _number(given.get("used_percent"))
            if used is None:
                continue
            seconds = _number(given.get("limit_window_seconds"))
            minutes = seconds / 60 if seconds is not None else None
            found[window] = _window(used, minutes, _number(given.get("reset_at")))
    plan = body.get("plan_type")
    if isinstance(plan, str):
        found["plan_type"] = plan
    return found


def limit_reached_until(body: bytes, retry_after: str | None, now: float) -> float | None:
    """For a 429 body saying the account's usage limit is reached: until when (Unix
    seconds); None for any other 429 (a plain rate limit: retried as usual)."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if not isinstance(error, dict):
        return None
    if USAGE_LIMIT_REACHED not in (error.get("type"), error.get("code")):
        return None
    resets_at = _number(error.get("resets_at"))
    if resets_at is not None:
        return resets_at
    after = _number(error.get("resets_in_seconds")) or _number(retry_after)
    return now + (after if after is not None else 60.0)


def exhausted_until(limits: dict[str, Any], now: float) -> float | None:
    """The latest reset among the windows used up and not yet reset, or None."""
    until: float | None = None
    for window in WINDOWS:
        found = limits.get(window)
        if not isinstance(found, dict):
            continue
        used, resets_at = found.get("used_percent"), found.get("resets_at")
        if isinstance(used, int | float) and used >= 100:
            if not isinstance(resets_at, int | float):
                resets_at = now + 60.0  # used up, reset unknown: look again in a minute
            if resets_at > now:
                until = resets_at if until is None else max(until, resets_at)
    return until


def _window(used: float, minutes: float | None, resets_at: float | None) -> dict[str, Any]:
    return {
        "used_percent": used,
        "window_minutes": round(minutes) if minutes is not None else None,
        "resets_at": round(resets_at) if resets_at is not None else None,
    }


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None
