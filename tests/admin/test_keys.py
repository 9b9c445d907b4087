"""API keys over the real admin app: the secret shown once, list fields, rotate (with and
without grace), revoke, validation, If-Match, and what the data plane's snapshot serves."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay import apikeys
from tests.admin.support import assert_error, generation, match, snapshot


async def _project(admin: httpx.AsyncClient, name: str = "acme") -> dict[str, Any]:
    response = await admin.post("/projects", json={"name": name})
    assert response.status_code == 201, response.text
    project: dict[str, Any] = response.json()
    return project


async def test_create_shows_the_secret_once(admin: httpx.AsyncClient, engine: AsyncEngine) -> None:
    project = await _project(admin)
    created = await admin.post(
        f"/projects/{project['id']}/keys",
        json={"name": "ci", "ip_allowlist": ["10.0.0.1/8"], "expires_at": "2030-01-01T00:00:00Z"},
    )
    assert created.status_code == 201, created.text
    body = created.json()
    secret = body["key"]
    assert secret.startswith(apikeys.KEY_PREFIX)
    assert (body["prefix"], body["last_four"]) == (secret[:10], secret[-4:])
    assert body["status"] == "active"
    assert body["ip_allowlist"] == ["10.0.0.0/8"]
    assert body["expires_at"].startswith("2030-01-01T00:00:00")
    assert body["last_used_at"] is None
    assert body["source"] == "api"

    for response in (
        await admin.get(f"/keys/{body['id']}"),
        await admin.get("/keys"),
        await admin.get("/keys", params={"project_id": project["id"]}),
    ):
        assert secret not in response.text
        assert '"key"' not in response.text
    served = await snapshot(engine)
    assert served.keys_by_digest[apikeys.digest(secret)].name == "ci"
    assert served.generation == await generation(engine)


async def test_key_rules_name_the_field(admin: httpx.AsyncClient) -> None:
    project = await _project(admin)
    url = f"/projects/{project['id']}/keys"
    assert_error(await admin.post(url, json={"name": "k", "key": "short"}), 400, "key")
    assert_error(
        await admin.post(url, json={"name": "k", "ip_allowlist": ["10.0.0.300"]}),
        400,
        "ip_allowlist",
    )
    assert_error(await admin.post(url, json={"name": "k", "models": ["nope"]}), 400, "models[0]")
    assert_error(await admin.post(url, json={"name": "k", "capture": "some"}), 400, "capture")
    fixed = "fixed-key-0123456789-abcdef"
    first = await admin.post(url, json={"name": "k", "key": fixed})
    assert first.json()["key"] == fixed
    assert_error(await admin.post(url, json={"name": "k"}), 409, "name")
    assert_error(await admin.post(url, json={"name": "other", "key": fixed}), 409, "key")
    assert_error(await admin.post("/projects/nope/keys", json={"name": "k"}), 404)
    patched = await admin.patch(
        f"/keys/{first.json()['id']}", json={"key": "x" * 30}, headers=match(first)
    )
    assert_error(patched, 400, "key")


async def test_update_revoke_and_list_filters(
    admin: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    project = await _project(admin)
    created = await admin.post(f"/projects/{project['id']}/keys", json={"name": "ci"})
    key_id, secret = created.json()["id"], created.json()["key"]
    assert_error(await admin.patch(f"/keys/{key_id}", json={"disabled": True}), 428)
    disabled = await admin.patch(
        f"/keys/{key_id}",
        json={"disabled": True, "limits": {"rpm": 5}, "monthly_budget_usd": 3},
        headers=match(created),
    )
    assert disabled.status_code == 200, disabled.text
    assert disabled.json()["status"] == "disabled"
    assert disabled.json()["limits"]["rpm"] == 5
    assert disabled.json()["monthly_budget_micros"] == 3_000_000
    served = (await snapshot(engine)).keys_by_digest[apikeys.digest(secret)]
    assert (served.status, served.limits.rpm) == ("disabled", 5)

    revoked = await admin.post(f"/keys/{key_id}/revoke")
    assert revoked.json()["status"] == "revoked"
    moved = await generation(engine)
    again = await admin.post(f"/keys/{key_id}/revoke")
    assert again.json()["status"] == "revoked"
    assert await generation(engine) == moved  # nothing changed the second time
    assert_error(
        await admin.patch(f"/keys/{key_id}", json={"disabled": False}, headers=match(revoked)),
        400,
        "disabled",
    )
    assert (await snapshot(engine)).keys_by_digest[apikeys.digest(secret)].status == "revoked"
    await admin.post(f"/projects/{project['id']}/keys", json={"name": "other"})
    revoked_only = (await admin.get("/keys", params={"status": "revoked"})).json()["data"]
    assert [k["name"] for k in revoked_only] == ["ci"]


async def test_rotate_without_and_with_grace(admin: httpx.AsyncClient, engine: AsyncEngine) -> None:
    project = await _project(admin)
    created = await admin.post(f"/projects/{project['id']}/keys", json={"name": "ci"})
    key_id, old = created.json()["id"], created.json()["key"]

    rotated = await admin.post(f"/keys/{key_id}/rotate")
    assert rotated.status_code == 200, rotated.text
    new = rotated.json()["key"]
    assert new != old and rotated.json()["id"] == key_id
    digests = (await snapshot(engine)).keys_by_digest
    assert apikeys.digest(new) in digests
    assert apikeys.digest(old) not in digests

    graced = await admin.post(f"/keys/{key_id}/rotate", json={"grace_s": 3600})
    newest = graced.json()["key"]
    digests = (await snapshot(engine)).keys_by_digest
    assert digests[apikeys.digest(newest)].id == key_id
    old_one = digests[apikeys.digest(new)]  # still works for an hour, then expires
    assert old_one.id != key_id and old_one.expires_at is not None
    assert_error(await admin.post(f"/keys/{key_id}/rotate", json={"grace_s": -1}), 400, "grace_s")


async def test_delete_needs_if_match(admin: httpx.AsyncClient, engine: AsyncEngine) -> None:
    project = await _project(admin)
    created = await admin.post(f"/projects/{project['id']}/keys", json={"name": "ci"})
    url = f"/keys/{created.json()['id']}"
    assert_error(await admin.delete(url), 428)
    assert_error(await admin.delete(url, headers={"If-Match": '"7"'}), 409)
    assert (await admin.delete(url, headers=match(created))).status_code == 204
    assert_error(await admin.get(url), 404)
    assert not (await snapshot(engine)).keys_by_digest


async def test_scopes_are_validated_stored_and_served(
    admin: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    """An unknown API or an empty list is a 400 naming the field, and nothing is stored; a
    valid list is kept once each, in the canonical order, and reaches the snapshot; null
    (the default) means every API; a rotated-out secret keeps the key's scopes."""
    project = await _project(admin)
    url = f"/projects/{project['id']}/keys"
    assert_error(
        await admin.post(url, json={"name": "bad", "scopes": ["chat", "bogus"]}), 400, "scopes[1]"
    )
    assert_error(await admin.post(url, json={"name": "bad", "scopes": []}), 400, "scopes")
    assert_error(await admin.post(url, json={"name": "bad", "scopes": "chat"}), 400, "scopes")
    assert (await admin.get("/keys", params={"project_id": project["id"]})).json()["data"] == []

    created = await admin.post(
        url, json={"name": "ci", "scopes": ["gemini-native", "chat", "embeddings", "chat"]}
    )
    assert created.status_code == 201, created.text
    key_id, secret = created.json()["id"], created.json()["key"]
    assert created.json()["scopes"] == ["chat", "embeddings", "gemini-native"]
    assert (await admin.get(f"/keys/{key_id}")).json()["scopes"] == [
        "chat",
        "embeddings",
        "gemini-native",
    ]
    served = (await snapshot(engine)).keys_by_digest[apikeys.digest(secret)]
    assert served.scopes == frozenset({"chat", "embeddings", "gemini-native"})

    current = await admin.get(f"/keys/{key_id}")
    refused = await admin.patch(
        f"/keys/{key_id}", json={"scopes": ["messages", "everything"]}, headers=match(current)
    )
    assert_error(refused, 400, "scopes[1]")
    assert (await admin.get(f"/keys/{key_id}")).json()["scopes"] == [
        "chat",
        "embeddings",
        "gemini-native",
    ]
    # A secret rotated out with a grace period follows its key's scopes, narrowed or cleared.
    graced = await admin.post(f"/keys/{key_id}/rotate", json={"grace_s": 3600})
    newest = graced.json()["key"]
    current = await admin.get(f"/keys/{key_id}")
    changed = await admin.patch(
        f"/keys/{key_id}", json={"scopes": ["messages"]}, headers=match(current)
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["scopes"] == ["messages"]
    digests = (await snapshot(engine)).keys_by_digest
    assert digests[apikeys.digest(newest)].scopes == frozenset({"messages"})
    old_secret = digests[apikeys.digest(secret)]
    assert old_secret.id != key_id and old_secret.scopes == frozenset({"messages"})

    current = await admin.get(f"/keys/{key_id}")
    cleared = await admin.patch(f"/keys/{key_id}", json={"scopes": None}, headers=match(current))
    assert cleared.status_code == 200, cleared.text
    assert cleared.json()["scopes"] is None
    digests = (await snapshot(engine)).keys_by_digest
    assert digests[apikeys.digest(newest)].scopes is None
    assert digests[apikeys.digest(secret)].scopes is None
    plain = await admin.post(url, json={"name": "plain"})
    assert plain.json()["scopes"] is None
