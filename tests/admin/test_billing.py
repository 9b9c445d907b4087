"""The billing routes' own rules, on SQLite and PostgreSQL: the wallet's settings ETag
(428 without If-Match, 409 when stale, unchanged by balances moving), auto top-up refused
without Stripe or a saved card, adjustments that would overdraw, amounts in micros or USD
(never rounded), and the ledger newest first in stable pages with its filters."""

from __future__ import annotations

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.billing import ledger
from llmrelay.store.bootstrap import ensure_default_tenant
from llmrelay.store.db import session_factory


async def _tenant(engine: AsyncEngine) -> str:
    async with session_factory(engine).begin() as session:
        return (await ensure_default_tenant(session)).id


async def test_the_wallet_settings_and_their_etag(
    admin: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    tenant = await _tenant(engine)
    empty = await admin.get(f"/billing/{tenant}/wallet")
    assert empty.status_code == 200
    assert (empty.json()["exists"], empty.json()["prepaid"], empty.json()["balance_usd"]) == (
        False,
        False,
        "0.000000",
    )
    path = f"/billing/{tenant}/wallet"
    assert (await admin.patch(path, json={"prepaid": True})).status_code == 428
    stale = await admin.patch(path, json={"prepaid": True}, headers={"If-Match": '"s-stale"'})
    assert stale.status_code == 409
    made = await admin.patch(
        path, json={"prepaid": True}, headers={"If-Match": empty.headers["ETag"]}
    )
    assert made.status_code == 200 and made.json()["prepaid"] and made.json()["exists"]
    tag = made.headers["ETag"]
    async with engine.begin() as conn:  # balances move: the settings' tag does not
        await ledger.credit(conn, tenant, 2_500_000, kind="topup", key="t1")
    read = await admin.get(path)
    assert (read.headers["ETag"], read.json()["balance_usd"]) == (tag, "2.500000")
    no_stripe = await admin.patch(
        path,
        json={
            "auto_topup_enabled": True,
            "auto_topup_threshold_usd": 1,
            "auto_topup_amount_usd": 10,
        },
        headers={"If-Match": tag},
    )
    assert no_stripe.status_code == 400
    assert no_stripe.json()["error"]["field"] == "auto_topup_enabled"
    both = await admin.patch(
        path,
        json={"auto_topup_amount_usd": 1, "auto_topup_amount_micros": 1},
        headers={"If-Match": tag},
    )
    assert both.status_code == 400
    too_fine = await admin.patch(
        path, json={"auto_topup_amount_usd": "0.0000001"}, headers={"If-Match": tag}
    )
    assert too_fine.status_code == 400 and "six decimals" in too_fine.text


async def test_adjustments_and_the_ledger_pages(
    admin: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    tenant = await _tenant(engine)
    path = f"/billing/{tenant}/adjustments"
    for n in range(5):
        answer = await admin.post(
            path, json={"amount_usd": "1.25", "reason": "seed", "adjustment_id": f"a{n}"}
        )
        assert answer.status_code == 201 and answer.json()["applied"], answer.text
    overdraw = await admin.post(
        path, json={"amount_micros": -7_000_000, "reason": "x", "adjustment_id": "big"}
    )
    assert overdraw.status_code == 400 and "cannot cover" in overdraw.text
    taken = await admin.post(
        path, json={"amount_micros": -250_000, "reason": "fix", "adjustment_id": "neg"}
    )
    assert taken.json()["balance_micros"] == 6_000_000
    pages, cursor = [], None
    while True:
        params = {"limit": "2", "kind": "adjustment"} | ({"cursor": cursor} if cursor else {})
        page = (await admin.get(f"/billing/{tenant}/ledger", params=params)).json()
        pages.append([e["amount_micros"] for e in page["data"]])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == [[-250_000, 1_250_000], [1_250_000, 1_250_000], [1_250_000, 1_250_000]]
    bad = await admin.get(f"/billing/{tenant}/ledger", params={"cursor": "not-ours"})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "cursor"
    nothing = await admin.get(f"/billing/{tenant}/ledger", params={"kind": "refund"})
    assert nothing.json() == {"data": [], "next_cursor": None}
    missing = await admin.get("/billing/no-such-tenant/wallet")
    assert missing.status_code == 404
