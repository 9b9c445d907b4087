"""Two things a running `serve` keeps true with no change to the config: the key list's
`last_used_at` (written from the request records, store/key_use.py), and a price version
scheduled for later taking effect at its moment (the snapshot is rebuilt then,
`Snapshot.rebuild_at`). The generation is polled only once a minute here, so neither can be
the poll's doing."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream
from tests.support.replicas import within

pytestmark = pytest.mark.e2e

ADMIN = "admin-token-for-schedule-e2e-0123456789"
KEY = "schedule-e2e-key-0123456789"


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    config = f"""
providers:
  - {{slug: up, type: openai_compatible, base_url: {upstream.base_url}, api_key: sk-up-0001}}
models:
  - {{name: chat, routes: [{{provider: up, upstream_model: echo}}]}}
projects:
  - name: p
    keys:
      - {{name: used, key: {KEY}}}
      - {{name: idle, key: schedule-e2e-idle-0123456789}}
"""
    env = {"LLMRELAY_ADMIN_TOKEN": ADMIN, "LLMRELAY_SNAPSHOT_POLL_S": "60"}
    yield from serving(tmp_path_factory.mktemp("schedule"), config, env=env)


@pytest.fixture
def admin(gateway: GatewayProcess) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=f"{gateway.url}/api/admin", headers=headers, timeout=10) as client:
        yield client


def chat(gateway: GatewayProcess) -> str:
    """One request; its request id."""
    request_id = uuid.uuid4().hex
    answer = httpx.post(
        f"{gateway.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {KEY}", "X-Request-ID": request_id},
        json={"model": "chat", "messages": [{"role": "user", "content": "one two three"}]},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    return request_id


def _keys(admin: httpx.Client) -> dict[str, dict[str, Any]]:
    answer = admin.get("/keys")
    assert answer.status_code == 200, answer.text
    return {key["name"]: key for key in answer.json()["data"]}


def _time(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def test_the_key_list_shows_when_a_key_was_last_used(
    gateway: GatewayProcess, admin: httpx.Client
) -> None:
    # None, unless another test of the module used the key first (the suite may run in a
    # random order); the idle key below shows a key never used.
    first = _keys(admin)["used"]["last_used_at"]
    before = datetime.now(UTC)
    chat(gateway)
    # Written with the request's record, in the recorder's next batch (0.2 s gathering).
    within(30.0, lambda: _keys(admin)["used"]["last_used_at"] not in (None, first))
    keys = _keys(admin)
    used = _time(keys["used"]["last_used_at"])
    assert before - timedelta(seconds=1) <= used <= datetime.now(UTC)
    assert keys["idle"]["last_used_at"] is None

    chat(gateway)
    within(30.0, lambda: _time(_keys(admin)["used"]["last_used_at"]) > used)


def test_a_scheduled_price_takes_effect_at_its_moment(
    gateway: GatewayProcess, admin: httpx.Client
) -> None:
    model = next(m for m in admin.get("/models").json()["data"] if m["name"] == "chat")
    prices = f"/models/{model['id']}/prices"
    now_price = admin.post(prices, json={"input_per_mtok": 1.0, "output_per_mtok": 2.0})
    assert now_price.status_code == 201, now_price.text

    def priced_now() -> bool:
        """The gateway serves with the new price: it rebuilds after the admin API answered
        (R18, under load, priced a request on the snapshot before it: no price version)."""
        sent = chat(gateway)
        record = gateway.records([sent], timeout_s=30)[sent]
        return bool(record["price_version"] == now_price.json()["id"])

    within(60, priced_now)
    starts = datetime.now(UTC) + timedelta(seconds=2)
    later = admin.post(
        prices,
        json={
            "input_per_mtok": 100.0,
            "output_per_mtok": 200.0,
            "effective_from": starts.isoformat(),
        },
    )
    assert later.status_code == 201, later.text
    assert later.json()["in_force"] is False

    # Requests from before the moment until a little after it.
    sent = []
    while datetime.now(UTC) < starts + timedelta(seconds=1):
        sent.append(chat(gateway))
        time.sleep(0.05)
    records = gateway.records(sent)
    assert len(records) == len(sent)
    versions: dict[str, set[str]] = {"before": set(), "after": set()}
    for record in records.values():
        began = _time(record["created_at"])
        if began < starts:
            versions["before"].add(record["price_version"])
        elif began > starts + timedelta(seconds=0.2):  # the rebuild's own few milliseconds
            versions["after"].add(record["price_version"])
    assert versions == {"before": {now_price.json()["id"]}, "after": {later.json()["id"]}}
    listed = {p["id"]: p["in_force"] for p in admin.get(prices).json()["data"]}
    assert listed == {now_price.json()["id"]: False, later.json()["id"]: True}
