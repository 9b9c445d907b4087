"""An admission's reply from a shared limiter (the Redis script or the PostgreSQL function),
read the same way for both: both answer `{1, 6 figures per scope}` on success, and the
request's headers name the tightest limit as local.py picks it. One reading, so the two
backends cannot drift apart on which limit a client is told about."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from llmrelay.limits.base import Admission, Program, Scope

#: Figures per scope in a reply: requests, oldest, tokens, oldest second, leases, spend.
REPLY_FIGURES: Final = 6

#: Per scope: where its figures start in the reply, its index * 4, then its rpm, tpm,
#: concurrency and budget limits (None: not limited).
Figures = tuple[tuple[int, int, int | None, int | None, int | None, int | None], ...]


def figures_of(scopes: Sequence[Scope]) -> Figures:
    return tuple(
        (1 + i * REPLY_FIGURES, 4 * i, s.rpm, s.tpm, s.concurrency, s.budget_micros)
        for i, s in enumerate(scopes)
    )


def admission_of(
    program: Program,
    figures: Figures,
    reply: list[Any],
    tokens: int,
    now: float,
    lease: str,
    hold: int,
    reset_of: Callable[[int, list[Any], float], float],
) -> Admission:
    """The Admission of a successful reply, with the tightest limit after it: the smallest
    share left; ties go to the first, in the order rpm, tpm, concurrency, budget of each
    scope. `reset_of` reads the seconds until that limit recovers (the reply's times are
    the backend's own: floats from Redis, bucket seconds from PostgreSQL)."""
    best_left, best_share, top = 1, 2.0, -1
    for at, index, rpm, tpm, conc, budget in figures:
        if rpm is not None:
            left = rpm - reply[at]
            if left / rpm < best_share:
                best_left, best_share, top = left, left / rpm, index
        if tpm is not None:
            left = tpm - reply[at + 2]
            if left / tpm < best_share:
                best_left, best_share, top = left, left / tpm, index + 1
        if conc is not None:
            left = conc - reply[at + 4]
            if left / conc < best_share:
                best_left, best_share, top = left, left / conc, index + 2
        if budget is not None:
            left = budget - int(reply[at + 5])
            if left / budget < best_share:
                best_left, best_share, top = left, left / budget, index + 3
    admission = Admission()  # every field set here (see Admission)
    admission.program, admission.tokens, admission.now = program, tokens, now
    admission.lease, admission.settled = lease, False
    admission.held = hold
    admission.top, admission.left = top, best_left
    admission.reset = reset_of(top, reply, now) if top >= 0 else 0.0
    return admission
