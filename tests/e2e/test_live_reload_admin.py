"""Live reload across replicas, changed through the admin API: two `serve` processes on one
PostgreSQL database, the change signal by Redis pub/sub or by PostgreSQL NOTIFY alone.

Every change goes to replica A's `/api/admin/*`; replica B must act on it within 2 s. Both
poll the generation only once a minute (LLMRELAY_SNAPSHOT_POLL_S=60), so only the signal that
A's admin API publishes after its commit can explain that. The replicas are shared by the
tests of the module (one pair per transport).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from llmrelay.database_setup import migrate_database
from tests.conftest import need_postgres
from tests.support.databases import create_postgres_database, drop_postgres_database
from tests.support.gateway_process import GatewayProcess
from tests.support.kept import KeptPerParam, kept_per_param
from tests.support.mock_upstream import MockUpstream
from tests.support.redis_server import RedisServer
from tests.support.replicas import Cluster, chat, ready, within

pytestmark = [pytest.mark.postgres, pytest.mark.e2e]

SECRET = "admin-live-reload-secret-0123456789abcdef"
ADMIN = "admin-live-reload-token-0123456789abcdef"
OLD_CREDENTIAL = "sk-upstream-before-0001"
NEW_CREDENTIAL = "sk-upstream-after-0002"
PROPAGATION_S = 2.0


@dataclass
class Pair:
    """Replica A (changed through its admin API) and replica B (watched), with the keys
    created through A's API at start."""

    transport: str
    a: GatewayProcess
    b: GatewayProcess
    admin: httpx.Client
    keep: str
    revoke: str
    revoke_id: str

    def changed(self, answer: httpx.Response, status: int = 200) -> dict[str, Any]:
        assert answer.status_code == status, answer.text
        body: dict[str, Any] = answer.json()
        return body

    def in_step(self) -> None:
        """B serves the generation A serves, and learned of changes by a signal."""
        within(
            PROPAGATION_S,
            lambda: ready(self.a)["snapshot_generation"] == ready(self.b)["snapshot_generation"],
        )
        watched = ready(self.b)
        assert watched["config_signal"]["transport"] == self.transport
        assert watched["config_signal"]["received"] >= 1


@contextmanager
def _pair(
    transport: str, tmp_path_factory: pytest.TempPathFactory, upstream: MockUpstream
) -> Iterator[Pair]:
    need_postgres()
    redis = RedisServer().start() if transport == "redis" else None  # skips without one
    url = asyncio.run(create_postgres_database())
    cluster = Cluster(
        tmp_path_factory.mktemp(f"admin-reload-{transport}"),
        url,
        None if redis is None else redis.url,
        secret=SECRET,
        env={"LLMRELAY_ADMIN_TOKEN": ADMIN},
    )
    try:
        asyncio.run(migrate_database(url))
        a, b = cluster.start("a"), cluster.start("b")
        admin = httpx.Client(
            base_url=f"{a.url}/api/admin",
            headers={"Authorization": f"Bearer {ADMIN}"},
            timeout=10,
        )
        with admin:
            yield _configured(transport, a, b, admin, upstream)
    finally:
        try:
            cluster.stop()
        finally:
            if redis is not None:
                redis.stop()
            asyncio.run(drop_postgres_database(url))


@pytest.fixture(scope="module")
def pairs(
    tmp_path_factory: pytest.TempPathFactory, upstream: MockUpstream
) -> Iterator[KeptPerParam[Pair]]:
    yield from kept_per_param(lambda transport: _pair(transport, tmp_path_factory, upstream))


@pytest.fixture(params=[pytest.param("redis", marks=pytest.mark.redis), "postgres"])
def pair(request: pytest.FixtureRequest, pairs: KeptPerParam[Pair]) -> Pair:
    """The module's two replicas on the test's transport (tests/support/kept.py)."""
    return pairs.get(request.param)


def _configured(
    transport: str,
    a: GatewayProcess,
    b: GatewayProcess,
    admin: httpx.Client,
    upstream: MockUpstream,
) -> Pair:
    """A provider, a model, a project and two keys, all created through A's admin API."""
    created = admin.post(
        "/providers",
        json={
            "slug": "up",
            "type": "openai_compatible",
            "base_url": upstream.base_url,
            "api_key": OLD_CREDENTIAL,
        },
    )
    assert created.status_code == 201, created.text
    model = admin.post(
        "/models", json={"name": "chat", "routes": [{"provider": "up", "upstream_model": "echo"}]}
    )
    assert model.status_code == 201, model.text
    project = admin.post("/projects", json={"name": "p"}).json()
    keep = admin.post(f"/projects/{project['id']}/keys", json={"name": "keep"}).json()
    revoke = admin.post(f"/projects/{project['id']}/keys", json={"name": "revoke"}).json()
    pair = Pair(transport, a, b, admin, keep["key"], revoke["key"], revoke["id"])
    within(PROPAGATION_S, lambda: chat(b, pair.revoke) == 200)
    return pair


def test_a_key_revoked_through_a_is_refused_by_b_within_2s(pair: Pair) -> None:
    assert chat(pair.b, pair.revoke) == 200
    revoked = pair.changed(pair.admin.post(f"/keys/{pair.revoke_id}/revoke"))
    assert revoked["status"] == "revoked"
    within(PROPAGATION_S, lambda: chat(pair.b, pair.revoke) == 401)
    # A too: it began its own rebuild before it answered, but nothing orders it before B's
    # (docs/operations.md, "Through the admin API"); R18 saw B refuse first under load.
    within(PROPAGATION_S, lambda: chat(pair.a, pair.revoke) == 401)
    assert chat(pair.b, pair.keep) == 200
    pair.in_step()


def test_a_model_and_a_route_added_through_a_serve_on_b_within_2s(pair: Pair) -> None:
    # A new model, with its route.
    assert chat(pair.b, pair.keep, "added") == 404
    pair.changed(
        pair.admin.post(
            "/models",
            json={"name": "added", "routes": [{"provider": "up", "upstream_model": "echo"}]},
        ),
        201,
    )
    within(PROPAGATION_S, lambda: chat(pair.b, pair.keep, "added") == 200)

    # A route added to a model that had none in service.
    grown = pair.changed(
        pair.admin.post(
            "/models",
            json={
                "name": "grown",
                "routes": [{"provider": "up", "upstream_model": "echo", "disabled": True}],
            },
        ),
        201,
    )
    within(PROPAGATION_S, lambda: chat(pair.b, pair.keep, "grown") == 503)
    pair.changed(
        pair.admin.post(
            f"/models/{grown['id']}/routes",
            json={"provider": "up", "upstream_model": "echo-added"},
        ),
        201,
    )
    within(PROPAGATION_S, lambda: chat(pair.b, pair.keep, "grown") == 200)
    pair.in_step()


def test_a_provider_credential_changed_through_a_is_used_by_b_within_2s(
    pair: Pair, upstream: MockUpstream
) -> None:
    def credential_b_sends() -> str:
        assert chat(pair.b, pair.keep) == 200
        headers = {k.lower(): v for k, v in upstream.chat_requests()[-1].headers.items()}
        return headers["authorization"].removeprefix("Bearer ")

    assert credential_b_sends() == OLD_CREDENTIAL
    listed = pair.changed(pair.admin.get("/providers"))["data"]
    provider = next(row for row in listed if row["slug"] == "up")
    changed = pair.changed(
        pair.admin.patch(
            f"/providers/{provider['id']}",
            json={"api_key": NEW_CREDENTIAL},
            headers={"If-Match": f'"{provider["version"]}"'},
        )
    )
    assert changed["api_key_last_four"] == NEW_CREDENTIAL[-4:]
    assert "api_key" not in changed  # write-only
    within(PROPAGATION_S, lambda: credential_b_sends() == NEW_CREDENTIAL)
    pair.in_step()


def test_a_provider_found_unavailable_through_a_leaves_routing_on_b_within_2s(
    pair: Pair, upstream: MockUpstream
) -> None:
    """A provider's health is in every replica's snapshot: A's probe marks it unavailable
    and B stops routing to it (503: B never called it), then A's probe brings it back."""
    refused = f"sk-refused-{pair.transport}-0123456789"
    upstream.refused_keys.add(refused)
    provider = pair.changed(
        pair.admin.post(
            "/providers",
            json={
                "slug": "flaky",
                "type": "openai_compatible",
                "base_url": upstream.base_url,
                "api_key": refused,
            },
        ),
        201,
    )
    pair.changed(
        pair.admin.post(
            "/models",
            json={"name": "flaky", "routes": [{"provider": "flaky", "upstream_model": "echo"}]},
        ),
        201,
    )
    # B knows the model (without calling the provider, whose refusal would queue a probe).
    within(PROPAGATION_S, lambda: "flaky" in _models(pair.b, pair.keep))
    tested = pair.changed(pair.admin.post(f"/providers/{provider['id']}/test"))
    assert (tested["status"], tested["reason"]) == ("unavailable", "credentials_refused")
    within(PROPAGATION_S, lambda: chat(pair.b, pair.keep, "flaky") == 503)

    upstream.refused_keys.discard(refused)  # the provider took the key back
    tested = pair.changed(pair.admin.post(f"/providers/{provider['id']}/test"))
    assert tested["status"] == "online"
    within(PROPAGATION_S, lambda: chat(pair.b, pair.keep, "flaky") == 200)
    pair.in_step()


def _models(replica: GatewayProcess, key: str) -> set[str]:
    answer = httpx.get(
        f"{replica.base_url}/models", headers={"Authorization": f"Bearer {key}"}, timeout=10
    )
    return {model["id"] for model in answer.json()["data"]}
