"""What a finished request is charged, from its record: the one rule the settle after the
request and the reconciliation job both apply.

- It never reached a provider (no upstream attempt): nothing; the reservation is released.
- Its usage is known (`usage_source` reported, or estimated because output was produced: see
  gateway/call.py) and priced: the record's `cost_micros`, exactly.
- Its usage is known but not its price (`price_source` unknown: a route without a price,
  reserved for by LLMRELAY_BILLING_UNPRICED_RESERVE_MICROS): unknown.
- No usage (`usage_source` none) after a provider call:
  - the call ended before any output could have been made or paid for (an upstream error
    answer, a refusal, a stream broken before its first event): nothing;
  - the gateway stopped waiting while the provider may still have produced the answer and
    billed for it — the client left before the answer (499) or the upstream timed out
    (504): unknown.

Unknown is `metering_failed`: the reservation stays held until it is reconciled (the admin
API's reconcile, with the cost the operator settles on).
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import ColumnElement, Table, and_, or_

from llmrelay.gateway.call import CLIENT_CLOSED_REQUEST, RECORD_COLUMNS, USAGE_NONE
from llmrelay.metering.cost import SOURCE_UNKNOWN

#: Endings after which the provider may have produced (and billed) an answer nobody read.
UNREAD_ENDINGS: Final = frozenset({CLIENT_CLOSED_REQUEST, 504})

_REQUEST_ID: Final = RECORD_COLUMNS.index("request_id")
_TENANT: Final = RECORD_COLUMNS.index("tenant_id")
_STATUS: Final = RECORD_COLUMNS.index("status_code")
_ATTEMPTS: Final = RECORD_COLUMNS.index("attempts")
_USAGE_SOURCE: Final = RECORD_COLUMNS.index("usage_source")
_COST: Final = RECORD_COLUMNS.index("cost_micros")
_PRICE_SOURCE: Final = RECORD_COLUMNS.index("price_source")


def charge_of(
    status: int, attempts: int, usage_source: str | None, cost: int | None, price_source: str | None
) -> int | None:
    """Micro-USD to charge, or None when it cannot be known (metering failed)."""
    if not attempts:
        return 0
    if usage_source is None or usage_source == USAGE_NONE:
        return None if status in UNREAD_ENDINGS else 0
    if price_source is None or price_source == SOURCE_UNKNOWN:
        return None
    return int(cost or 0)


def charge_of_row(row: tuple[Any, ...]) -> tuple[str, str | None, int | None]:
    """(request id, tenant id, charge) of a record row in RECORD_COLUMNS order."""
    charge = charge_of(
        int(row[_STATUS]),
        int(row[_ATTEMPTS] or 0),
        row[_USAGE_SOURCE],
        row[_COST],
        row[_PRICE_SOURCE],
    )
    return str(row[_REQUEST_ID]), row[_TENANT], charge


def charge_known(records: Table) -> ColumnElement[bool]:
    """`charge_of(...) is not None` as a condition on the records table: the reconciliation
    job looks only at records that settle something, so a kept reservation whose record can
    never say its cost is not read again at every run."""
    c = records.c
    usage_none = or_(c.usage_source.is_(None), c.usage_source == USAGE_NONE)
    return or_(
        c.attempts == 0,
        and_(usage_none, c.status_code.not_in(sorted(UNREAD_ENDINGS))),
        and_(~usage_none, c.price_source.is_not(None), c.price_source != SOURCE_UNKNOWN),
    )
