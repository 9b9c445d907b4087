"""Prepaid billing through a real gateway process on SQLite: a prepaid tenant's requests
reserve before the provider call and are charged their record's exact cost after it; a
balance that cannot cover the reservation is a 402 in the route's protocol (OpenAI's shape,
Anthropic's `billing_error`) with no provider call; a stream the client leaves is charged
what it generated; a request whose usage is unknown keeps its reservation until reconciled
through the admin API; refunds happen once per id; a tenant that is not prepaid reserves
nothing. Every ledger stays balanced to the micro-unit."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.billing import ADMIN_TOKEN, BillingDb, admin, eventually, make_prepaid
from tests.support.closing import Closing
from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

KEY = "billing-prepaid-key-0123456789"
OTHER_KEY = "billing-postpaid-key-0123456789"
PRICED = "{input_per_mtok: 1000, output_per_mtok: 2000}"  # 1000 and 2000 micro-USD a token
BALANCE = 5_000_000
_ids = itertools.count()


def prepaid_config(upstream: MockUpstream) -> str:
    return f"""
providers:
  - {{slug: up, type: openai_compatible, base_url: "{upstream.base_url}"}}
  - {{slug: claude, type: anthropic, base_url: "{upstream.root_url}", api_key: sk-ant}}
models:
  - {{name: chat, routes: [{{provider: up, upstream_model: echo}}], pricing: {PRICED}}}
  - {{name: claude, routes: [{{provider: claude, upstream_model: claude-test}}], pricing: {PRICED}}}
  - {{name: slow, routes: [{{provider: up, upstream_model: slow-3000}}], pricing: {PRICED}}}
  - {{name: stall, routes: [{{provider: up, upstream_model: stall-after-3}}], pricing: {PRICED}}}
  - {{name: unpriced, routes: [{{provider: up, upstream_model: echo-unpriced}}]}}
projects:
  - name: prepaid
    keys: [{{name: k, key: {KEY}}}]
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    yield from serving(
        tmp_path_factory.mktemp("prepaid"),
        prepaid_config(upstream),
        env={"LLMRELAY_ADMIN_TOKEN": ADMIN_TOKEN},
    )


@pytest.fixture(scope="module")
def db(gateway: GatewayProcess) -> BillingDb:
    return BillingDb(gateway.database_url)


@pytest.fixture(scope="module")
def api(gateway: GatewayProcess) -> Iterator[httpx.Client]:
    with admin(gateway.url) as client:
        yield client


@pytest.fixture(scope="module")
def tenant(gateway: GatewayProcess, db: BillingDb, api: httpx.Client) -> str:
    """The default tenant, prepaid with BALANCE, once the gateway's snapshot says so."""
    tenant_id = db.default_tenant()
    make_prepaid(api, tenant_id, BALANCE, "seed")

    def reserved() -> bool:
        request_id = f"probe-{next(_ids)}"
        chat(gateway, request_id, max_tokens=1)
        return db.reservation(request_id) is not None

    eventually(reserved, what="the snapshot to make the tenant prepaid")
    eventually(lambda: db.wallet(tenant_id)[1] == 0, what="the probes' settles")
    return tenant_id


@pytest.fixture(scope="module")
def other_tenant(api: httpx.Client, upstream: MockUpstream) -> str:
    """A second tenant, not prepaid, with its own provider, model and key."""

    def made(path: str, body: dict[str, Any], **params: str) -> dict[str, Any]:
        answer = api.post(path, json=body, params=params)
        assert answer.status_code == 201, answer.text
        found: dict[str, Any] = answer.json()
        return found

    tenant_id = str(made("/tenants", {"slug": "postpaid", "name": "Postpaid"})["id"])
    provider = {"slug": "up", "type": "openai_compatible", "base_url": upstream.base_url}
    made("/providers", provider, tenant_id=tenant_id)
    route = {"provider": "up", "upstream_model": "echo"}
    made("/models", {"name": "chat", "routes": [route]}, tenant_id=tenant_id)
    project = made("/projects", {"name": "post"}, tenant_id=tenant_id)
    made(f"/projects/{project['id']}/keys", {"name": "k", "key": OTHER_KEY})
    return tenant_id


def chat(
    gateway: GatewayProcess, request_id: str, model: str = "chat", key: str = KEY, **body: Any
) -> httpx.Response:
    return httpx.post(
        f"{gateway.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {key}", "X-Request-ID": request_id},
        json={"model": model, "messages": [{"role": "user", "content": "one two three"}], **body},
        timeout=10,
    )


def settled(db: BillingDb, request_id: str) -> dict[str, Any]:
    """The request's reservation once it is no longer held."""
    return eventually(
        lambda: (r := db.reservation(request_id)) and r["status"] != "held" and r,
        what=f"the settle of {request_id}",
    )


def test_a_request_is_charged_its_records_exact_cost(
    gateway: GatewayProcess, db: BillingDb, tenant: str
) -> None:
    before = db.wallet(tenant)
    answer = chat(gateway, "charged-1", max_tokens=50)
    assert answer.status_code == 200, answer.text
    reservation = settled(db, "charged-1")
    record = gateway.records(["charged-1"])["charged-1"]
    assert record["cost_micros"] > 0 and record["usage_source"] == "reported"
    assert (reservation["status"], reservation["charged_micros"]) == (
        "settled",
        record["cost_micros"],
    )
    assert reservation["amount_micros"] >= record["cost_micros"]  # the estimate covered it
    assert db.wallet(tenant) == (before[0] - record["cost_micros"], before[1])
    kinds = [e["kind"] for e in db.entries(tenant) if e["request_id"] == "charged-1"]
    assert kinds == ["reserve", "charge"]
    db.assert_balanced(tenant)


def test_a_balance_too_low_is_a_402_in_openai_shape_without_a_provider_call(
    gateway: GatewayProcess,
    db: BillingDb,
    tenant: str,
    upstream: MockUpstream,
    closing: Closing,
) -> None:
    sent = len(upstream.requests)
    client = closing(openai.OpenAI(api_key=KEY, base_url=gateway.base_url, max_retries=0))
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(
            model="chat",
            max_tokens=1_000_000,  # 2,000 USD of output: more than the balance
            messages=[{"role": "user", "content": "too dear"}],
            extra_headers={"X-Request-ID": "too-dear"},
        )
    assert refused.value.status_code == 402
    body = refused.value.response.json()
    assert body["request_id"] == "too-dear"
    error = body["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "insufficient_quota",
        "insufficient_balance",
        None,
    )
    assert "cannot cover" in error["message"] and "top up" in error["message"]
    assert len(upstream.requests) == sent
    assert db.reservation("too-dear") is None
    assert gateway.records(["too-dear"])["too-dear"]["status_code"] == 402


def test_the_anthropic_route_refuses_with_a_billing_error(
    gateway: GatewayProcess, db: BillingDb, tenant: str
) -> None:
    with anthropic.Anthropic(base_url=gateway.url, api_key=KEY, max_retries=0) as client:
        with pytest.raises(anthropic.APIStatusError) as refused:
            client.messages.create(
                model="claude",
                max_tokens=20_000,  # 40 USD of output
                messages=[{"role": "user", "content": "too dear"}],
                extra_headers={"X-Request-ID": "too-dear-claude"},
            )
        assert refused.value.status_code == 402
        body = refused.value.response.json()
        assert set(body) == {"type", "error", "request_id"}
        assert (body["type"], body["request_id"]) == ("error", "too-dear-claude")
        assert body["error"]["type"] == "billing_error"
        assert "cannot cover" in body["error"]["message"]
        message = client.messages.create(
            model="claude",
            max_tokens=20,
            messages=[{"role": "user", "content": "one two"}],
            extra_headers={"X-Request-ID": "claude-ok"},
        )
    assert message.content
    record = gateway.records(["claude-ok"])["claude-ok"]
    assert settled(db, "claude-ok")["charged_micros"] == record["cost_micros"] > 0


def test_a_stream_the_client_leaves_is_charged_what_it_generated(
    gateway: GatewayProcess, db: BillingDb, tenant: str
) -> None:
    with httpx.stream(
        "POST",
        f"{gateway.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {KEY}", "X-Request-ID": "left-stream"},
        json={
            "model": "stall",
            "stream": True,
            "max_tokens": 100,
            "messages": [{"role": "user", "content": "a b c d e f"}],
        },
        timeout=10,
    ) as answer:
        assert answer.status_code == 200
        received = b""
        for piece in answer.iter_raw():
            received += piece
            if received.count(b"data: ") >= 4:  # the role and three words
                break
    reservation = settled(db, "left-stream")
    record = gateway.records(["left-stream"])["left-stream"]
    assert (record["status_code"], record["usage_source"]) == (499, "estimated")
    assert reservation["charged_micros"] == record["cost_micros"]
    assert record["cost_micros"] == 1000 * record["input_tokens"] + 2000 * 3  # three tokens out
    db.assert_balanced(tenant)


def test_unknown_usage_keeps_the_reservation_until_reconciled(
    gateway: GatewayProcess, db: BillingDb, api: httpx.Client, tenant: str
) -> None:
    with pytest.raises(httpx.TimeoutException):  # the client leaves while the provider works
        httpx.post(
            f"{gateway.base_url}/chat/completions",
            headers={"Authorization": f"Bearer {KEY}", "X-Request-ID": "gone"},
            json={
                "model": "slow",
                "max_tokens": 10,
                "messages": [{"role": "user", "content": "x"}],
            },
            timeout=0.5,
        )
    reservation = settled(db, "gone")
    assert reservation["status"] == "metering_failed"
    assert db.wallet(tenant)[1] == reservation["amount_micros"]  # still reserved
    listed = api.get(f"/billing/{tenant}/reservations", params={"status": "metering_failed"})
    assert [r["request_id"] for r in listed.json()["data"]] == ["gone"]
    path = f"/billing/{tenant}/reservations/gone/reconcile"
    done = api.post(path, json={"cost_usd": "0.0042"})
    assert done.status_code == 200, done.text
    assert (done.json()["status"], done.json()["charged_micros"]) == ("settled", 4200)
    assert db.wallet(tenant)[1] == 0
    again = api.post(path, json={"cost_micros": 1})
    assert again.status_code == 409  # settled already: once
    db.assert_balanced(tenant)


def test_refunds_happen_once_per_id(
    gateway: GatewayProcess, db: BillingDb, api: httpx.Client, tenant: str
) -> None:
    assert chat(gateway, "refunded", max_tokens=20).status_code == 200
    charged = settled(db, "refunded")["charged_micros"]
    balance = db.wallet(tenant)[0]
    path = f"/billing/{tenant}/refunds"
    body = {"amount_micros": charged, "reason": "bad answer", "request_id": "refunded"}
    first = api.post(path, json=body, headers={"Idempotency-Key": "r-1"})
    second = api.post(path, json=body, headers={"Idempotency-Key": "r-1"})
    assert (first.status_code, second.status_code) == (201, 201)
    assert (first.json()["applied"], second.json()["applied"]) == (True, False)
    assert db.wallet(tenant)[0] == balance + charged
    other_amount = api.post(
        path, json=body | {"amount_micros": 1}, headers={"Idempotency-Key": "r-1"}
    )
    assert other_amount.status_code == 409
    too_much = api.post(path, json=body | {"amount_micros": 1, "refund_id": "r-2"})
    assert too_much.status_code == 400 and "refunded already" in too_much.text
    no_id = api.post(path, json={"amount_micros": 5, "reason": "goodwill"})
    assert no_id.status_code == 400 and no_id.json()["error"]["field"] == "refund_id"
    refunds = [e for e in db.entries(tenant) if e["kind"] == "refund"]
    assert [(e["amount_micros"], e["request_id"]) for e in refunds] == [(charged, "refunded")]
    db.assert_balanced(tenant)


def test_unpriced_models_and_reused_request_ids_are_refused(
    gateway: GatewayProcess, db: BillingDb, tenant: str
) -> None:
    unpriced = chat(gateway, "unpriced-1", model="unpriced")
    assert unpriced.status_code == 402
    assert unpriced.json()["error"]["code"] == "model_not_priced"
    assert "unpriced" in unpriced.json()["error"]["message"]
    assert chat(gateway, "reused", max_tokens=5).status_code == 200
    reused = chat(gateway, "reused", max_tokens=5)
    assert reused.status_code == 409 and reused.json()["error"]["code"] == "request_id_reused"


def test_a_tenant_that_is_not_prepaid_reserves_nothing(
    gateway: GatewayProcess, db: BillingDb, tenant: str, other_tenant: str
) -> None:
    def served() -> bool:
        return chat(gateway, f"post-{next(_ids)}", key=OTHER_KEY).status_code == 200

    eventually(served, what="the second tenant's key in the snapshot")
    answer = chat(gateway, "postpaid-1", key=OTHER_KEY, max_tokens=1_000_000)
    assert answer.status_code == 200  # no balance to cover, none needed
    assert gateway.records(["postpaid-1"])["postpaid-1"]["tenant_id"] == other_tenant
    assert db.rows("SELECT * FROM reservations WHERE tenant_id = $1", other_tenant) == []
    assert db.rows("SELECT * FROM wallets WHERE tenant_id = $1", other_tenant) == []
    db.assert_balanced(tenant)


def _background(gateway: GatewayProcess, request_id: str) -> dict[str, Any]:
    """Submit a background response and wait for its end; the last poll's body."""
    submitted = httpx.post(
        f"{gateway.base_url}/responses",
        headers={"Authorization": f"Bearer {KEY}", "X-Request-ID": request_id},
        json={
            "model": "chat",
            "input": "one two three",
            "background": True,
            "max_output_tokens": 50,
        },
        timeout=10,
    )
    assert submitted.status_code == 200, submitted.text
    response_id = submitted.json()["id"]

    def ended() -> dict[str, Any] | None:
        found: dict[str, Any] = httpx.get(
            f"{gateway.base_url}/responses/{response_id}",
            headers={"Authorization": f"Bearer {KEY}"},
            timeout=10,
        ).json()
        return None if found["status"] in ("queued", "in_progress") else found

    return eventually(ended, timeout_s=20, what=f"the end of {response_id}")


def test_a_background_response_reserves_and_is_charged_like_a_served_request(
    gateway: GatewayProcess, db: BillingDb, tenant: str
) -> None:
    before = db.wallet(tenant)
    ended = _background(gateway, "background-1")
    assert ended["status"] == "completed", ended["error"]
    reservation = settled(db, "background-1")
    record = gateway.records(["background-1"])["background-1"]
    assert record["cost_micros"] > 0
    assert (reservation["status"], reservation["charged_micros"]) == (
        "settled",
        record["cost_micros"],
    )
    assert db.wallet(tenant) == (before[0] - record["cost_micros"], before[1])
    db.assert_balanced(tenant)


def test_a_background_call_goes_on_under_the_reservation_an_earlier_attempt_held(
    gateway: GatewayProcess, db: BillingDb, tenant: str
) -> None:
    """A worker that stopped between its reservation and the provider call leaves the
    reservation held; the job's next attempt is served under it, not refused as a reused
    request id. (The held reservation is made here with the ledger, as that attempt did.)"""
    import asyncio

    from llmrelay.billing import ledger
    from llmrelay.store.db import create_engine

    async def hold() -> None:
        engine = create_engine(gateway.database_url)
        try:
            async with engine.begin() as conn:
                await ledger.reserve(conn, tenant, "background-resumed", 400_000)
        finally:
            await engine.dispose()

    asyncio.run(hold())
    assert db.reservation("background-resumed")["status"] == "held"  # type: ignore[index]
    assert _background(gateway, "background-resumed")["status"] == "completed"
    reservation = settled(db, "background-resumed")
    record = gateway.records(["background-resumed"])["background-resumed"]
    assert (reservation["amount_micros"], reservation["charged_micros"]) == (
        400_000,
        record["cost_micros"],
    )
    kinds = [e["kind"] for e in db.entries(tenant) if e["request_id"] == "background-resumed"]
    assert kinds == ["reserve", "charge"]
    db.assert_balanced(tenant)
