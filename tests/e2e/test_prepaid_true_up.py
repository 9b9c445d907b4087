"""Near a wallet's end, requests admitted in memory on a bound do not cause refusals that
exact reservations would not (billing/allowance.Leases.true_up), through a real gateway on
SQLite: a wallet with money for exactly N requests, all N in flight at once (a slow
provider), the first opening the lease on its count and the others admitted on their
characters while it holds. Every one is served, every reservation ends at the exact amount,
and the ledger adds up. Prices: 1,000 micro-USD a prompt token, 2,000 an answer token."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from llmrelay.billing.estimate import input_bound, input_tokens
from tests.support.billing import ADMIN_TOKEN, BillingDb, admin, eventually, make_prepaid
from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

KEY = "prepaid-true-up-key-0123456789"
N = 20
#: A prompt whose characters bound it at several times its counted tokens.
BODY: dict[str, Any] = {
    "model": "slow",
    "max_tokens": 1,
    "messages": [{"role": "user", "content": "word " * 300}],
}
EACH = input_tokens(BODY) * 1000 + 1 * 2000
BOUND = input_bound(BODY) * 1000 + 1 * 2000
_probes = itertools.count()


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    pricing = "{input_per_mtok: 1000, output_per_mtok: 2000}"
    config = f"""
providers: [{{slug: up, type: openai_compatible, base_url: "{upstream.base_url}"}}]
models:
  - {{name: chat, routes: [{{provider: up, upstream_model: echo}}], pricing: {pricing}}}
  - {{name: slow, routes: [{{provider: up, upstream_model: slow-4000}}], pricing: {pricing}}}
projects: [{{name: p, keys: [{{name: k, key: {KEY}}}]}}]
"""
    yield from serving(
        tmp_path_factory.mktemp("true-up"), config, env={"LLMRELAY_ADMIN_TOKEN": ADMIN_TOKEN}
    )


def _post(gateway: GatewayProcess, body: dict[str, Any], request_id: str | None) -> httpx.Response:
    return httpx.post(
        f"{gateway.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {KEY}"}
        | ({} if request_id is None else {"X-Request-ID": request_id}),
        json=body,
        timeout=60,
    )


def _settled(db: BillingDb, request_id: str) -> dict[str, Any]:
    return eventually(
        lambda: (r := db.reservation(request_id)) and r["status"] == "settled" and r,
        what=f"the settle of {request_id}",
    )


def test_n_requests_in_flight_on_money_for_n_are_all_served(gateway: GatewayProcess) -> None:
    assert BOUND >= 3 * EACH  # what made the N-th a refusal before the true-up
    db = BillingDb(gateway.database_url)
    tenant = db.default_tenant()
    with admin(gateway.url) as api:
        make_prepaid(api, tenant, 10 * EACH, "seed")

        def prepaid_now() -> bool:  # the client's own ids: a transaction each, no lease
            probe = {**BODY, "model": "chat"}
            answer = _post(gateway, probe, f"probe-{next(_probes)}")
            assert answer.status_code == 200, answer.text
            return db.reservation(answer.headers["x-request-id"]) is not None

        eventually(prepaid_now, what="the snapshot to make the tenant prepaid")
        eventually(lambda: db.wallet(tenant)[1] == 0, what="the probes' settles")
        make_prepaid(api, tenant, N * EACH, "exactly-n")
    assert db.wallet(tenant) == (N * EACH, 0)

    with ThreadPoolExecutor(N) as pool:
        # The first finds no lease: its grant takes the wallet, its reservation the count.
        first = pool.submit(_post, gateway, BODY, None)
        eventually(lambda: db.wallet(tenant)[1] > 0, what="the first request's lease")
        # The others find the lease open: the first of them are admitted on the bound.
        rest = [pool.submit(_post, gateway, BODY, None) for _ in range(N - 1)]
        answers = [first.result(), *(f.result() for f in rest)]

    assert [a.status_code for a in answers] == [200] * N, [a.text for a in answers]
    ids = [a.headers["x-request-id"] for a in answers]
    rows = {rid: _settled(db, rid) for rid in ids}
    records = gateway.records(ids)
    for rid, row in rows.items():
        assert row["amount_micros"] == EACH, row  # trued up from the bound, or counted
        assert row["charged_micros"] == records[rid]["cost_micros"] > 0
    db.assert_balanced(tenant)
    available = db.wallet(tenant)[0]
    assert available == N * EACH - sum(int(row["charged_micros"]) for row in rows.values())
    # One more such request is served exactly when what is left covers its reservation.
    another = _post(gateway, {**BODY, "model": "chat"}, None)
    assert another.status_code == (200 if available >= EACH else 402), another.text
