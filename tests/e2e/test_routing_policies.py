"""Scoped routing policies through a real gateway process, a real mock upstream and the
official openai SDK: the allowed routes only, a 403 naming the policy when none is left, the
policy's strategy, precedence key > project > global, and the policy on the record."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import openai
import pytest

from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

KEYS = {
    "plain": "e2e-policy-plain-0123456789",  # project eu-team: its policy eu-only
    "tagged": "e2e-policy-tagged-0123456789",  # eu-team, bound itself to blue-only
    "open": "e2e-policy-open-0123456789",  # eu-team, bound itself to open (no intersection)
    "global": "e2e-policy-global-0123456789",  # project others, unbound: the global policy
}


def policies_config(upstream: MockUpstream) -> str:
    return f"""
providers:
  - {{slug: us, type: openai_compatible, base_url: "{upstream.base_url}", region: us-east}}
  - {{slug: eu, type: openai_compatible, base_url: "{upstream.base_url}", region: eu-west}}
models:
  - name: chat
    strategy: weighted
    affinity: {{enabled: false}}  # every request its own draw (sticky routing: test_sticky)
    routes:
      - {{provider: us, upstream_model: chat-us, weight: 1, tag: blue}}
      - {{provider: eu, upstream_model: chat-eu, weight: 1, tag: green}}
  - name: us-only
    routes: [{{provider: us, upstream_model: usonly-us}}]
  - name: primary
    fallbacks: [us-only, backup]
    routes:
      - {{provider: us, upstream_model: primary-us, priority: 0}}
      - {{provider: eu, upstream_model: status-500-primary, priority: 1}}
  - name: backup
    routes:
      - {{provider: us, upstream_model: backup-us, priority: 0}}
      - {{provider: eu, upstream_model: backup-eu, priority: 1}}
routing:
  policies:
    - {{name: eu-only, regions: [eu-west]}}
    - {{name: blue-only, tags: [blue]}}
    - {{name: open}}
    - {{name: global-fixed, providers: [us, eu], strategy: fixed}}
  policy: global-fixed
projects:
  - name: eu-team
    routing_policy: eu-only
    keys:
      - {{name: plain, key: {KEYS["plain"]}}}
      - {{name: tagged, key: {KEYS["tagged"]}, routing_policy: blue-only}}
      - {{name: open, key: {KEYS["open"]}, routing_policy: open}}
  - name: others
    keys:
      - {{name: global, key: {KEYS["global"]}}}
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    """The module's gateway (the module-scoped `upstream` comes from conftest.py)."""
    yield from serving(tmp_path_factory.mktemp("policies"), policies_config(upstream))


@pytest.fixture(scope="module")
def clients(gateway: GatewayProcess) -> Iterator[dict[str, openai.OpenAI]]:
    """One SDK client per key, by key name."""
    made = {
        name: openai.OpenAI(api_key=key, base_url=gateway.base_url, max_retries=0, timeout=15)
        for name, key in KEYS.items()
    }
    yield made
    for client in made.values():
        client.close()


def _ask(client: openai.OpenAI, model: str) -> httpx2.Response:
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": "hello there"}]
    )
    return raw.http_response


def _providers(client: openai.OpenAI, model: str, n: int) -> list[str]:
    return [_ask(client, model).headers["x-llmrelay-provider"] for _ in range(n)]


def _sent(upstream: MockUpstream, model: str) -> int:
    return sum(1 for r in upstream.chat_requests() if r.body.get("model") == model)


def _denied(client: openai.OpenAI, model: str) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as denied:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}])
    return denied.value


def test_a_key_reaches_only_the_routes_its_policy_allows(
    clients: dict[str, openai.OpenAI], upstream: MockUpstream
) -> None:
    us_before = _sent(upstream, "chat-us")
    assert set(_providers(clients["plain"], "chat", 20)) == {"eu"}  # weighted 1:1 otherwise
    assert _sent(upstream, "chat-us") == us_before
    assert _sent(upstream, "chat-eu") >= 20
    chunks = list(
        clients["plain"].chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "stream me"}], stream=True
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "stream me"
    assert _sent(upstream, "chat-us") == us_before


def test_a_policy_that_leaves_no_route_answers_403_naming_it(
    clients: dict[str, openai.OpenAI], upstream: MockUpstream
) -> None:
    before = _sent(upstream, "usonly-us")  # other tests of the module may have sent some
    denied = _denied(clients["plain"], "us-only")
    assert denied.status_code == 403
    assert denied.code == "routing_policy_denied"
    assert "'eu-only'" in denied.message and "'us-only'" in denied.message
    assert _sent(upstream, "usonly-us") == before  # fails closed: no wider set is tried
    pinned = _denied(clients["plain"], "chat:us")
    assert pinned.status_code == 403 and pinned.code == "routing_policy_denied"
    assert "'eu-only'" in pinned.message and "'us'" in pinned.message
    assert _ask(clients["plain"], "chat:eu").headers["x-llmrelay-provider"] == "eu"
    assert _ask(clients["global"], "us-only").status_code == 200  # another key's policy


def test_the_fallback_models_are_narrowed_too(
    clients: dict[str, openai.OpenAI], upstream: MockUpstream
) -> None:
    upstream_models = ("status-500-primary", "backup-eu", "primary-us", "usonly-us", "backup-us")
    before = {m: _sent(upstream, m) for m in upstream_models}
    response = _ask(clients["plain"], "primary")
    assert response.headers["x-llmrelay-model"] == "backup"
    assert response.headers["x-llmrelay-provider"] == "eu"
    # primary's one eu route failed, us-only (nothing left) was skipped, backup's eu served
    sent = {m: _sent(upstream, m) - before[m] for m in upstream_models}
    assert sent == {
        "status-500-primary": 1,
        "backup-eu": 1,
        "primary-us": 0,
        "usonly-us": 0,
        "backup-us": 0,
    }


def test_the_policy_strategy_replaces_the_models(clients: dict[str, openai.OpenAI]) -> None:
    assert set(_providers(clients["global"], "chat", 20)) == {"us"}  # fixed: list order
    assert set(_providers(clients["open"], "chat", 30)) == {"us", "eu"}  # the model's weighted


def test_the_most_specific_binding_applies_alone(clients: dict[str, openai.OpenAI]) -> None:
    assert set(_providers(clients["tagged"], "chat", 10)) == {"us"}  # key over project
    assert set(_providers(clients["plain"], "chat", 10)) == {"eu"}  # project over global
    assert set(_providers(clients["global"], "chat", 10)) == {"us"}  # the global one
    assert _ask(clients["open"], "us-only").status_code == 200  # no intersection with eu-only


def _records(gateway: GatewayProcess, ids: list[str], timeout_s: float = 5) -> dict[str, Any]:
    """request id -> the name of the policy on its record (None: none), once written."""
    path = gateway.database_url.removeprefix("sqlite:///")
    deadline = time.monotonic() + timeout_s
    marks = ",".join("?" * len(ids))
    while True:
        with sqlite3.connect(path) as conn:
            rows = conn.execute(
                "SELECT r.request_id, r.policy_id, p.name FROM request_records r"
                " LEFT JOIN routing_policies p ON p.id = r.policy_id"
                f" WHERE r.request_id IN ({marks})",
                ids,
            ).fetchall()
        if len(rows) == len(ids) or time.monotonic() > deadline:
            assert all((policy_id is None) == (name is None) for _, policy_id, name in rows)
            return {request_id: name for request_id, _, name in rows}
        time.sleep(0.1)


def test_the_record_names_the_policy_in_force(
    gateway: GatewayProcess, clients: dict[str, openai.OpenAI]
) -> None:
    served = {key: _ask(clients[key], "chat").headers["x-request-id"] for key in KEYS}
    denied = _denied(clients["plain"], "us-only").response.headers["x-request-id"]
    names = _records(gateway, [*served.values(), denied])
    assert {key: names[request_id] for key, request_id in served.items()} == {
        "plain": "eu-only",
        "tagged": "blue-only",
        "open": "open",
        "global": "global-fixed",
    }
    assert names[denied] == "eu-only"


def test_the_model_list_leaves_out_models_the_policy_leaves_no_route_to(
    clients: dict[str, openai.OpenAI],
) -> None:
    listed = {m.id for m in clients["plain"].models.list()}
    assert "us-only" not in listed  # eu-only: no route in eu-west
    assert {"chat", "primary", "backup"} <= listed
    assert "us-only" in {m.id for m in clients["global"].models.list()}
