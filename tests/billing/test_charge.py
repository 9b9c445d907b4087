"""What a finished request is charged, from its record: the one rule the live settle and
the reconciliation job share."""

from __future__ import annotations

import pytest

from llmrelay.billing.charge import charge_of, charge_of_row
from llmrelay.gateway.call import RECORD_COLUMNS


@pytest.mark.parametrize(
    ("status", "attempts", "usage", "cost", "price", "charged"),
    [
        (200, 1, "reported", 1234, "model", 1234),  # the record's exact cost
        (499, 1, "estimated", 88, "route", 88),  # a stream left mid-way: what it generated
        (200, 1, "reported", 0, "unknown", None),  # used, but no price to charge it by
        (502, 2, "none", 0, "model", 0),  # the providers refused: nothing produced
        (499, 1, "none", 0, "model", None),  # left before the answer: it may have been made
        (504, 1, "none", 0, "model", None),  # timed out: the same
        (503, 0, "none", 0, None, 0),  # no provider was called
        (402, 0, None, 0, None, 0),
    ],
)
def test_charge(
    status: int, attempts: int, usage: str | None, cost: int, price: str | None, charged: int | None
) -> None:
    assert charge_of(status, attempts, usage, cost, price) == charged


def test_a_record_row() -> None:
    values = dict.fromkeys(RECORD_COLUMNS)
    values |= {
        "request_id": "r1",
        "tenant_id": "t1",
        "status_code": 200,
        "attempts": 1,
        "usage_source": "reported",
        "cost_micros": 77,
        "price_source": "catalogue",
    }
    assert charge_of_row(tuple(values[c] for c in RECORD_COLUMNS)) == ("r1", "t1", 77)
