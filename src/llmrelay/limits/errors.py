"""The limiters' errors: what a refusal or an unreachable shared limiter is to a client.

Apart from base.py because they extend the gateway's exception tree (gateway/errors.py,
which mypyc does not compile): an exception class with that base must stay plain Python,
or its class attributes (`status`, `type`) are not seen (see llmrelay/compiled_modules.py).
"""

from __future__ import annotations

import math

from llmrelay.gateway.errors import GatewayError
from llmrelay.limits.base import LimitKind, Quota


class LimitExceeded(GatewayError):
    """429: says which limit of which scope refused, and when to come back."""

    status = 429
    type = "rate_limit_error"

    def __init__(self, quota: Quota, retry_after_s: float) -> None:
        what = _WHAT[quota.kind].format(limit=quota.limit, usd=quota.limit / 1_000_000)
        super().__init__(
            f"{quota.kind.value} limit of the {quota.scope.value} exceeded: {what}",
            code=f"{quota.kind.value}_limit_exceeded",
            headers={
                "Retry-After": str(max(1, math.ceil(retry_after_s))),
                **quota.headers(),
            },
        )
        self.quota = quota


class BackendUnavailable(Exception):
    """The shared limiter cannot be reached (Redis down, timed out): resilient.py decides."""


class LimitsUnavailable(GatewayError):
    """503 under `fail_closed` while the shared limiter (Redis) cannot be reached."""

    status = 503
    type = "service_unavailable"
    code = "limits_unavailable"


_WHAT = {
    LimitKind.RPM: "at most {limit} requests per minute",
    LimitKind.TPM: "at most {limit} tokens per minute",
    LimitKind.CONCURRENCY: "at most {limit} requests at a time",
    LimitKind.BUDGET: "the monthly budget of {usd:.2f} USD is spent",
}
