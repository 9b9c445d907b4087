"""Provider resources through a real `llmrelay serve`, a real mock upstream and the official
openai SDK: a provider with two accounts, one of them failing (401, 429, 500: the mock
answers by the credential presented), fails over to its other account before the model's
next route; a failing account cools down and is half-opened by the first request after its
cooldown (only that trial's success closes it); an administrator's disabled account is never
tried again, however long it waits; quota buckets move requests to the next account; and
records, attempt rows and the usage API name the resource.

The breaker settings are small (`failures: 1`, `cooldown_s: 1`) so cooldowns pass quickly;
every wait is for the event, with a generous ceiling.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.billing import eventually
from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

pytestmark = pytest.mark.e2e

KEY = "e2e-resources-key-0123456789"
ADMIN = "e2e-resources-admin-token-0123456789"
CEILING_S = 30.0
#: The pooled providers: each test has its own (their breakers are the module gateway's).
POOLS = ("p401", "p429", "p500", "cool", "shut", "quota")


def _config(upstream: MockUpstream) -> str:
    base = upstream.base_url

    def quota(pool: str) -> str:
        return ", rpm: 1" if pool == "quota" else ""

    providers = "".join(
        f"""
  - slug: {pool}
    type: openai_compatible
    base_url: "{base}"
    api_key: own-{pool}-credential
    timeout_s: 10
    resources:
      - {{name: first, api_key: {pool}-first-key, priority: 0{quota(pool)}}}
      - {{name: second, api_key: {pool}-second-key, priority: 1{quota(pool)}}}
"""
        for pool in POOLS
    )
    models = "".join(
        f"""
  - name: {pool}-model
    routes:
      - {{provider: {pool}, upstream_model: echo-{pool}, priority: 0}}
      - {{provider: backup, upstream_model: echo-{pool}-backup, priority: 1}}
"""
        for pool in POOLS
    )
    return f"""
providers:{providers}
  - {{slug: backup, type: openai_compatible, base_url: "{base}", api_key: backup-key}}
routing:
  breaker: {{failures: 1, cooldown_s: 1, max_cooldown_s: 8}}
models:{models}
projects:
  - name: pooled
    keys:
      - {{name: k, key: {KEY}}}
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    env = {"LLMRELAY_ADMIN_TOKEN": ADMIN}
    yield from serving(tmp_path_factory.mktemp("resources"), _config(upstream), env)


@pytest.fixture
def client(gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(api_key=KEY, base_url=gateway.base_url, max_retries=0) as made:
        yield made


@pytest.fixture
def admin(gateway: GatewayProcess) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=f"{gateway.url}/api/admin", headers=headers) as made:
        yield made


def _ask(client: openai.OpenAI, upstream: MockUpstream, pool: str) -> tuple[str, str, str]:
    """The provider that served, the credential its upstream request carried, and the
    request id."""
    before = len(upstream.chat_requests())
    raw = client.chat.completions.with_raw_response.create(
        model=f"{pool}-model", messages=[{"role": "user", "content": "hello"}]
    )
    assert raw.parse().choices[0].message.content == "hello"
    served = upstream.chat_requests()[before:]
    assert len(served) == 1, served
    credential = served[0].headers["Authorization"].removeprefix("Bearer ")
    return raw.headers["x-llmrelay-provider"], credential, raw.headers["x-request-id"]


def _resources(admin: httpx.Client, pool: str) -> dict[str, dict[str, Any]]:
    providers = admin.get("/providers", params={"limit": 200}).json()["data"]
    (provider,) = [p for p in providers if p["slug"] == pool]
    listed = admin.get(f"/providers/{provider['id']}/resources")
    assert listed.status_code == 200, listed.text
    return {r["name"]: r for r in listed.json()["data"]} | {"_provider": provider}


def _record(gateway: GatewayProcess, request_id: str) -> tuple[object, ...] | None:
    path = gateway.database_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        row = conn.execute(
            "SELECT provider, resource_id, attempts FROM request_records WHERE request_id = ?",
            (request_id,),
        ).fetchone()
    return None if row is None else tuple(row)


def _attempts(gateway: GatewayProcess, request_id: str) -> list[tuple[object, ...]]:
    path = gateway.database_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        return [
            tuple(row)
            for row in conn.execute(
                "SELECT resource_id, status_code, outcome FROM request_attempts"
                " WHERE request_id = ? ORDER BY attempt",
                (request_id,),
            )
        ]


@pytest.mark.parametrize("status", [401, 429, 500])
def test_a_failing_account_fails_over_to_the_next_account_of_the_same_provider(
    client: openai.OpenAI,
    upstream: MockUpstream,
    gateway: GatewayProcess,
    admin: httpx.Client,
    status: int,
) -> None:
    pool = f"p{status}"
    upstream.failing_keys[f"{pool}-first-key"] = status
    try:
        provider, credential, request_id = _ask(client, upstream, pool)
    finally:
        upstream.failing_keys.pop(f"{pool}-first-key")
    # the same provider answered, with its second account: not the model's backup route
    assert (provider, credential) == (pool, f"{pool}-second-key")
    assert upstream.failed_by_key[f"{pool}-first-key"] == 1
    resources = _resources(admin, pool)
    first, second = resources["first"]["id"], resources["second"]["id"]
    record = eventually(lambda: _record(gateway, request_id), CEILING_S, "the record")
    assert record == (pool, second, 2)
    attempts = eventually(lambda: _attempts(gateway, request_id), CEILING_S, "the attempts")
    assert attempts == [
        (first, status, "upstream_refused" if status == 401 else "upstream_error"),
        (second, 200, "ok"),
    ]
    # its failure opened the first account's breaker (failures: 1)
    assert resources["first"]["health"] in ("open", "half_open")
    assert resources["second"]["health"] == "closed"


def test_a_cooling_account_is_skipped_then_half_opened_by_the_first_request_after(
    client: openai.OpenAI, upstream: MockUpstream, admin: httpx.Client
) -> None:
    first_key = "cool-first-key"
    upstream.failing_keys[first_key] = 500
    try:
        assert _ask(client, upstream, "cool")[1] == "cool-second-key"
        opened = time.monotonic()
        # while it cools down, requests go straight to the second account
        while time.monotonic() - opened < 0.8:
            assert _ask(client, upstream, "cool")[1] == "cool-second-key"
        assert upstream.failed_by_key[first_key] == 1

        # after the cooldown, the first request claims the trial; it fails: open again, for
        # twice as long (2 s), during which nothing is sent to it
        def trial_failed() -> bool:
            _ask(client, upstream, "cool")
            return upstream.failed_by_key[first_key] == 2

        eventually(trial_failed, CEILING_S, "the first failed trial")
        reopened = time.monotonic()
        assert _resources(admin, "cool")["first"]["health"] == "open"
        while time.monotonic() - reopened < 1.5:
            assert _ask(client, upstream, "cool")[1] == "cool-second-key"
        assert upstream.failed_by_key[first_key] == 2
    finally:
        upstream.failing_keys.pop(first_key)

    # it recovered: the next trial succeeds and closes it; the first account serves again
    def back_on_first() -> bool:
        return _ask(client, upstream, "cool")[1] == "cool-first-key"

    eventually(back_on_first, CEILING_S, "the first account serving again")
    assert _resources(admin, "cool")["first"]["health"] == "closed"
    for _ in range(3):
        assert _ask(client, upstream, "cool")[1] == "cool-first-key"


def test_a_disabled_account_is_never_readmitted(
    client: openai.OpenAI, upstream: MockUpstream, admin: httpx.Client
) -> None:
    assert _ask(client, upstream, "shut")[1] == "shut-first-key"
    first = _resources(admin, "shut")["first"]
    path = f"/providers/{first['provider_id']}/resources/{first['id']}"
    fetched = admin.get(path)
    changed = admin.patch(
        path, json={"disabled": True}, headers={"If-Match": fetched.headers["ETag"]}
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["health"] == "disabled"

    def moved() -> bool:
        return _ask(client, upstream, "shut")[1] == "shut-second-key"

    eventually(moved, CEILING_S, "the disabled account left out")
    # longer than any cooldown: still never tried, even with the other account failing
    upstream.failing_keys["shut-second-key"] = 500
    try:
        started = time.monotonic()
        while time.monotonic() - started < 2.5:
            provider, credential, _ = _ask(client, upstream, "shut")
            assert (provider, credential) == ("backup", "backup-key")
    finally:
        upstream.failing_keys.pop("shut-second-key")
    assert not any(
        r.headers.get("Authorization") == "Bearer shut-first-key"
        for r in upstream.chat_requests()[-20:]
    )


def test_quota_buckets_move_requests_to_the_next_account_then_the_next_route(
    client: openai.OpenAI, upstream: MockUpstream, admin: httpx.Client
) -> None:
    # rpm 1 each: the first request takes the first account's minute, the second the
    # second's, the third goes to the model's backup route (unless a minute just turned)
    credentials = [_ask(client, upstream, "quota")[1:2] for _ in range(3)]
    assert ("quota-first-key",) in credentials and ("quota-second-key",) in credentials
    assert ("backup-key",) in credentials


def test_usage_groups_by_resource(
    client: openai.OpenAI, upstream: MockUpstream, gateway: GatewayProcess, admin: httpx.Client
) -> None:
    _, credential, request_id = _ask(client, upstream, "p500")
    # The account that served: the first, or the second while the first cools down after
    # an earlier test's failures (the module's tests run in any order).
    served = credential.removeprefix("p500-").removesuffix("-key")
    eventually(lambda: _record(gateway, request_id), CEILING_S, "the record")
    series = admin.get("/usage/timeseries", params={"group_by": "resource"})
    assert series.status_code == 200, series.text
    groups = {point["group"] for point in series.json()["data"]}
    assert f"p500/{served}" in groups, groups
    resources = _resources(admin, "p500")
    one = admin.get("/usage/summary", params={"resource": resources[served]["id"]})
    assert one.status_code == 200 and one.json()["requests"] >= 1
