"""Revocation ends every secret of a key, through a real gateway process and the real mock
upstream: a key rotated with a grace period keeps its old secret answering until the key is
revoked (or disabled); then both secrets are refused within the reload window (2 s), and the
admin API lists no active key left of it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

ADMIN_TOKEN = "e2e-revocation-admin-token-0123456789"
#: The reload window: a change through the admin API reaches every replica within it.
RELOAD_WINDOW_S = 2.0


def config(upstream: MockUpstream) -> str:
    return f"""
providers:
  - {{slug: up, type: openai_compatible, base_url: "{upstream.base_url}"}}
models:
  - name: chat
    routes: [{{provider: up, upstream_model: echo}}]
projects:
  - name: revocation
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    yield from serving(
        tmp_path_factory.mktemp("revocation"),
        config(upstream),
        env={"LLMRELAY_ADMIN_TOKEN": ADMIN_TOKEN},
    )


@pytest.fixture
def admin(gateway: GatewayProcess) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=f"{gateway.url}/api/admin",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=15,
    ) as client:
        yield client


def _status(gateway: GatewayProcess, secret: str) -> int:
    answer = httpx.post(
        f"{gateway.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {secret}"},
        json={"model": "chat", "messages": [{"role": "user", "content": "hi"}]},
        timeout=15,
    )
    return answer.status_code


def _rotated_with_grace(admin: httpx.Client, gateway: GatewayProcess, name: str) -> Any:
    """A new key of the project, rotated with an hour's grace: (its id, old, new secret),
    once both secrets answer."""
    (project,) = [p for p in admin.get("/projects").json()["data"] if p["name"] == "revocation"]
    created = admin.post(f"/projects/{project['id']}/keys", json={"name": name})
    assert created.status_code in (200, 201), created.text
    key_id, old = created.json()["id"], created.json()["key"]
    rotated = admin.post(f"/keys/{key_id}/rotate", json={"grace_s": 3600})
    assert rotated.status_code == 200, rotated.text
    new = rotated.json()["key"]
    _wait_for(lambda: _status(gateway, old) == 200 and _status(gateway, new) == 200, 10)
    return key_id, old, new


def _wait_for(done: Any, within_s: float) -> float:
    """Poll `done` until it holds; the seconds it took."""
    started = time.monotonic()
    while not done():
        assert time.monotonic() - started < within_s, "not within the window"
        time.sleep(0.05)
    return time.monotonic() - started


def _family(admin: httpx.Client, key_id: str) -> list[dict[str, Any]]:
    """The key and the rows of its rotated-out secrets, as the admin API lists them."""
    keys = admin.get("/keys", params={"limit": 500}).json()["data"]
    return [k for k in keys if key_id in (k["id"], k.get("rotated_from"))]


def test_revoking_a_rotated_key_refuses_its_old_secret_too(
    gateway: GatewayProcess, admin: httpx.Client
) -> None:
    key_id, old, new = _rotated_with_grace(admin, gateway, "rotated-then-revoked")
    revoked = admin.post(f"/keys/{key_id}/revoke")
    assert revoked.status_code == 200 and revoked.json()["status"] == "revoked"
    _wait_for(
        lambda: _status(gateway, new) == 401 and _status(gateway, old) == 401, RELOAD_WINDOW_S
    )
    family = _family(admin, key_id)
    # The key, and the row that kept its old secret for the grace: both revoked, none active.
    assert len(family) == 2
    assert {(k["rotated_from"], k["status"]) for k in family} == {
        (None, "revoked"),
        (key_id, "revoked"),
    }


def test_disabling_a_rotated_key_refuses_its_old_secret_too(
    gateway: GatewayProcess, admin: httpx.Client
) -> None:
    key_id, old, new = _rotated_with_grace(admin, gateway, "rotated-then-disabled")
    changed = admin.patch(f"/keys/{key_id}", json={"disabled": True}, headers={"If-Match": "*"})
    assert changed.status_code == 200, changed.text
    _wait_for(
        lambda: _status(gateway, new) == 401 and _status(gateway, old) == 401, RELOAD_WINDOW_S
    )
    changed = admin.patch(f"/keys/{key_id}", json={"disabled": False}, headers={"If-Match": "*"})
    assert changed.status_code == 200, changed.text
    _wait_for(lambda: _status(gateway, new) == 200 and _status(gateway, old) == 200, 10)


def test_deleting_a_rotated_key_deletes_its_old_secret(
    gateway: GatewayProcess, admin: httpx.Client
) -> None:
    key_id, old, new = _rotated_with_grace(admin, gateway, "rotated-then-deleted")
    deleted = admin.delete(f"/keys/{key_id}", headers={"If-Match": "*"})
    assert deleted.status_code == 204, deleted.text
    _wait_for(
        lambda: _status(gateway, new) == 401 and _status(gateway, old) == 401, RELOAD_WINDOW_S
    )
    assert _family(admin, key_id) == []


def test_the_replica_that_made_a_change_serves_it_when_it_answers(
    gateway: GatewayProcess, admin: httpx.Client
) -> None:
    """Read your writes on the replica of the admin API: a key created through it works on
    the very next request, a revoked one is refused on the very next (the answer waits for
    the replica's own rebuild; another replica follows within the window). Several rounds:
    one request racing the rebuild would be enough to fail."""
    (project,) = [p for p in admin.get("/projects").json()["data"] if p["name"] == "revocation"]
    for n in range(5):
        created = admin.post(f"/projects/{project['id']}/keys", json={"name": f"at-once-{n}"})
        assert created.status_code in (200, 201), created.text
        assert _status(gateway, created.json()["key"]) == 200
        revoked = admin.post(f"/keys/{created.json()['id']}/revoke")
        assert revoked.status_code == 200, revoked.text
        assert _status(gateway, created.json()["key"]) == 401
