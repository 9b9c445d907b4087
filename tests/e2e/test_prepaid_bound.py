"""What a prepaid request admitted in memory reserves, through a real gateway on SQLite: with
an id the gateway mints and a wallet lease open, the prompt is bounded by its characters plus
a fifth (gateway/prepaid.reserve: no regex walk on the request path); when the lease cannot
take that bound, the prompt is counted, so the bound never refuses a request the count
admits. Prices: 1,000 micro-USD a prompt token, 2,000 an answer token."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from llmrelay.billing.estimate import input_bound, input_tokens
from tests.support.billing import ADMIN_TOKEN, BillingDb, admin, eventually, make_prepaid
from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

KEY = "prepaid-bound-key-0123456789"
BALANCE = 5_000_000
_probes = itertools.count()


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    config = f"""
providers: [{{slug: up, type: openai_compatible, base_url: "{upstream.base_url}"}}]
models:
  - name: chat
    routes: [{{provider: up, upstream_model: echo}}]
    pricing: {{input_per_mtok: 1000, output_per_mtok: 2000}}
projects: [{{name: p, keys: [{{name: k, key: {KEY}}}]}}]
"""
    yield from serving(
        tmp_path_factory.mktemp("bound"), config, env={"LLMRELAY_ADMIN_TOKEN": ADMIN_TOKEN}
    )


def _chat(gateway: GatewayProcess, body: dict[str, Any], request_id: str | None) -> str:
    """Serve `body` (with the client's id, else one the gateway mints): the request's id."""
    answer = httpx.post(
        f"{gateway.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {KEY}"}
        | ({} if request_id is None else {"X-Request-ID": request_id}),
        json=body,
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    return answer.headers["x-request-id"]


def _settled(db: BillingDb, request_id: str) -> dict[str, Any]:
    return eventually(
        lambda: (r := db.reservation(request_id)) and r["status"] == "settled" and r,
        what=f"the settle of {request_id}",
    )


def _short(max_tokens: int) -> dict[str, Any]:
    return {
        "model": "chat",
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "hi"}],
    }


def test_the_bound_when_the_lease_takes_it_and_the_count_when_it_does_not(
    gateway: GatewayProcess,
) -> None:
    db = BillingDb(gateway.database_url)
    tenant = db.default_tenant()
    with admin(gateway.url) as api:
        make_prepaid(api, tenant, BALANCE, "seed")

    def prepaid_now() -> bool:  # the client's own ids: a transaction each, no lease opened
        request_id = _chat(gateway, _short(1), f"probe-{next(_probes)}")
        return db.reservation(request_id) is not None

    eventually(prepaid_now, what="the snapshot to make the tenant prepaid")
    # The first minted request finds no lease: it waits for a grant, on the count.
    first = _settled(db, _chat(gateway, _short(5), None))
    assert first["amount_micros"] == input_tokens(_short(5)) * 1000 + 5 * 2000
    # The lease is open now: the next is admitted in memory on its characters.
    second = _settled(db, _chat(gateway, _short(6), None))
    assert input_bound(_short(6)) > input_tokens(_short(6))
    assert second["amount_micros"] == input_bound(_short(6)) * 1000 + 6 * 2000
    # A prompt whose bound is above all the wallet has left is admitted on its count.
    available = db.wallet(tenant)[0]
    words = available // 1200 // 5 + 200  # characters x 1.2 x 1,000 above `available`
    long = {
        "model": "chat",
        "max_tokens": 1,
        "messages": [{"role": "user", "content": "word " * words}],
    }
    assert input_bound(long) * 1000 > available > input_tokens(long) * 1000 + 2000
    third = _settled(db, _chat(gateway, long, None))
    assert third["amount_micros"] == input_tokens(long) * 1000 + 1 * 2000
    for reservation in (first, second, third):
        record = gateway.records([reservation["request_id"]])[reservation["request_id"]]
        assert reservation["charged_micros"] == record["cost_micros"] > 0
    db.assert_balanced(tenant)
