"""What the billing end-to-end tests read and do around a gateway process: its wallets,
ledger and reservations read straight from its database (SQLite or PostgreSQL), the admin
API with the admin token, and waiting for settles (they are written off the request path)."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg
import httpx

ADMIN_TOKEN = "billing-admin-token-0123456789abcdef"
T = TypeVar("T")
_PLACEHOLDER = re.compile(r"\$\d+")


if TYPE_CHECKING:
    from tests.support.fake_stripe import FakeStripe


class BillingDb:
    """Plain SQL on the gateway's database (`$1` placeholders on both backends)."""

    def __init__(self, database_url: str) -> None:
        self.url = database_url

    def rows(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        if self.url.startswith("sqlite"):
            with sqlite3.connect(self.url.removeprefix("sqlite:///")) as conn:
                conn.row_factory = sqlite3.Row
                found = conn.execute(_PLACEHOLDER.sub("?", sql), args).fetchall()
            return [dict(row) for row in found]
        return asyncio.run(self._pg_rows(sql, *args))

    async def _pg_rows(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        conn = await asyncpg.connect(self.url.replace("+asyncpg", ""))
        try:
            return [dict(row) for row in await conn.fetch(sql, *args)]
        finally:
            await conn.close()

    def wallet(self, tenant_id: str) -> tuple[int, int]:
        """(available, reserved); (0, 0) before the tenant's first payment made its wallet."""
        found = self.rows(
            "SELECT balance_micros, reserved_micros FROM wallets WHERE tenant_id = $1", tenant_id
        )
        if not found:
            return 0, 0
        return int(found[0]["balance_micros"]), int(found[0]["reserved_micros"])

    def reservation(self, request_id: str) -> dict[str, Any] | None:
        found = self.rows("SELECT * FROM reservations WHERE request_id = $1", request_id)
        return found[0] if found else None

    def entries(self, tenant_id: str) -> list[dict[str, Any]]:
        return self.rows("SELECT * FROM ledger_entries WHERE tenant_id = $1 ORDER BY id", tenant_id)

    def record(self, request_id: str) -> dict[str, Any] | None:
        found = self.rows("SELECT * FROM request_records WHERE request_id = $1", request_id)
        return found[0] if found else None

    def default_tenant(self) -> str:
        return str(self.rows("SELECT id FROM tenants WHERE slug = 'default'")[0]["id"])

    def assert_balanced(self, tenant_id: str) -> None:
        """The wallet is exactly what its ledger entries add up to, to the micro-unit."""
        entries = self.entries(tenant_id)
        available = sum(int(e["amount_micros"]) for e in entries)
        reserved = sum(int(e["reserved_delta_micros"]) for e in entries)
        assert (available, reserved) == self.wallet(tenant_id)
        if entries:
            last = entries[-1]
            assert (last["balance_after_micros"], last["reserved_after_micros"]) == (
                available,
                reserved,
            )


def eventually(check: Callable[[], T | None], timeout_s: float = 60.0, what: str = "") -> T:
    """The first truthy result of `check`, polled until `timeout_s` (then fail)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s}s: {what or check}")
        time.sleep(0.05)


def admin(gateway_url: str) -> httpx.Client:
    return httpx.Client(
        base_url=f"{gateway_url}/api/admin",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=60,  # a first admin request imports the admin app: slow on a loaded machine
    )


def make_prepaid(api: httpx.Client, tenant_id: str, balance_micros: int, key: str) -> None:
    """Turn prepaid on and bring the available balance to `balance_micros` (an adjustment)."""
    answer = api.patch(
        f"/billing/{tenant_id}/wallet", json={"prepaid": True}, headers={"If-Match": "*"}
    )
    assert answer.status_code == 200, answer.text
    now = api.get(f"/billing/{tenant_id}/wallet").json()["balance_micros"]
    if balance_micros != now:
        answer = api.post(
            f"/billing/{tenant_id}/adjustments",
            json={"amount_micros": balance_micros - now, "reason": "test", "adjustment_id": key},
        )
        assert answer.status_code == 201, answer.text


def paid_top_up(api: httpx.Client, stripe: FakeStripe, tenant: str, usd: str) -> dict[str, Any]:
    """A Checkout top-up, paid and credited: the order as the admin API shows it."""
    made = api.post(f"/billing/{tenant}/checkout", json={"amount_usd": usd})
    assert made.status_code == 201, made.text
    completed = stripe.pay_session(made.json()["stripe_session_id"])
    assert stripe.deliver(completed).json()["outcome"] == "credited"
    order: dict[str, Any] = api.get(f"/billing/{tenant}/orders/{made.json()['id']}").json()
    assert order["status"] == "paid" and order["stripe_payment_intent_id"]
    return order
