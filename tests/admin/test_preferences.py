"""Tenant preferences over the real admin app (SQLite and PostgreSQL): models checked against
the tenant's own (400 naming the field), the low-balance threshold kept on the wallet (made,
not prepaid, when missing), If-Match, the config generation moved; and what the data plane's
snapshot makes of them: the fallback model appended to each model's fallbacks at build time,
the default model served for the name `default` (the key's allowlist checked against the
model it stands for)."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay import apikeys
from llmrelay.gateway.errors import NotFound, PermissionDenied
from llmrelay.gateway.requests import resolve_model
from tests.admin.support import assert_error, generation, match, snapshot

KEY = "llr-preferences-test-key-0123456789"
LIMITED_KEY = "llr-preferences-limited-key-0123456789"


async def _tenant(admin: httpx.AsyncClient) -> str:
    """The default tenant (the admin token's creates go there), with three chat models and
    an embedding model, and two keys (one allowed `fast` only)."""
    await admin.post("/providers", json={"slug": "up", "type": "mock"})
    for name, embedding in (("backup", False), ("fast", False), ("big", False), ("emb", True)):
        made = await admin.post(
            "/models",
            json={
                "name": name,
                "embedding": embedding,
                "fallbacks": ["backup"] if name == "fast" else [],
                "routes": [{"provider": "up", "upstream_model": f"{name}-upstream"}],
            },
        )
        assert made.status_code == 201, made.text
    project = (await admin.post("/projects", json={"name": "web"})).json()
    for name, key, models in (("all", KEY, None), ("limited", LIMITED_KEY, ["fast"])):
        body = {"name": name, "key": key} | ({"models": models} if models else {})
        assert (await admin.post(f"/projects/{project['id']}/keys", json=body)).status_code == 201
    tenant_id: str = project["tenant_id"]
    return tenant_id


async def test_preferences_are_checked_kept_and_versioned(
    admin: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    tenant = await _tenant(admin)
    path = f"/tenants/{tenant}/preferences"
    empty = await admin.get(path)
    assert empty.status_code == 200
    assert empty.json() == {
        "tenant_id": tenant,
        "default_model": None,
        "fallback_model": None,
        "low_balance_usd": None,
        "version": 1,
    }
    assert_error(await admin.put(path, json={"default_model": "fast"}), 428)
    headers = match(empty)
    assert_error(
        await admin.put(path, json={"default_model": "nope"}, headers=headers), 400, "default_model"
    )
    assert_error(
        await admin.put(path, json={"fallback_model": "x"}, headers=headers), 400, "fallback_model"
    )
    assert_error(
        await admin.put(path, json={"low_balance_usd": -1}, headers=headers), 400, "low_balance_usd"
    )
    assert_error(await admin.put(path, json={"colour": "red"}, headers=headers), 400, "colour")

    before = await generation(engine)
    changed = await admin.put(
        path,
        json={"default_model": "fast", "fallback_model": "big", "low_balance_usd": 5},
        headers=headers,
    )
    assert changed.status_code == 200, changed.text
    assert changed.json() | {"version": 0} == {
        "tenant_id": tenant,
        "default_model": "fast",
        "fallback_model": "big",
        "low_balance_usd": 5.0,
        "version": 0,
    }
    assert changed.headers["ETag"] == f'"{changed.json()["version"]}"' != headers["If-Match"]
    assert await generation(engine) > before
    async with engine.connect() as conn:
        wallet = (
            await conn.execute(
                text("SELECT prepaid, low_balance_micros FROM wallets WHERE tenant_id = :t"),
                {"t": tenant},
            )
        ).one()
    assert (bool(wallet[0]), wallet[1]) == (False, 5_000_000)  # made, not prepaid

    # a stale version is refused; a field left out stays; null clears one
    assert_error(await admin.put(path, json={"default_model": None}, headers=headers), 409)
    cleared = await admin.put(path, json={"default_model": None}, headers=match(changed))
    assert cleared.status_code == 200
    assert (cleared.json()["default_model"], cleared.json()["fallback_model"]) == (None, "big")
    assert cleared.json()["low_balance_usd"] == 5.0

    # a model a preference names cannot be deleted
    big = (await admin.get("/models", params={"name": "big"})).json()["data"][0]
    refused = await admin.delete(f"/models/{big['id']}", headers={"If-Match": "*"})
    assert_error(refused, 409)
    assert "preferences (fallback_model)" in refused.json()["error"]["message"]


async def test_the_snapshot_resolves_the_preferences(
    admin: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    tenant = await _tenant(admin)
    path = f"/tenants/{tenant}/preferences"
    without = await snapshot(engine)
    assert without.default_models == {}
    fast = without.model(tenant, "fast")
    assert fast is not None and fast.fallbacks == ("backup",)

    answer = await admin.put(
        path, json={"default_model": "fast", "fallback_model": "big"}, headers={"If-Match": "*"}
    )
    assert answer.status_code == 200, answer.text
    built = await snapshot(engine)
    models = built.tenant_models(tenant)
    assert models["fast"].fallbacks == ("backup", "big")  # after the model's own
    assert models["backup"].fallbacks == ("big",)
    assert models["big"].fallbacks == ()  # never itself
    assert models["emb"].fallbacks == ()  # an embedding model falls back to its own kind only
    assert built.default_models[tenant] is models["fast"]

    principal = built.keys_by_digest[apikeys.digest(KEY)]
    served, pinned = resolve_model(built, principal, "default", embedding=False)
    assert (served.name, pinned) == ("fast", None)
    assert resolve_model(built, principal, "big", embedding=False)[0].name == "big"
    limited = built.keys_by_digest[apikeys.digest(LIMITED_KEY)]
    assert resolve_model(built, limited, "default", embedding=False)[0].name == "fast"

    # the key's allowlist applies to the model `default` stands for
    await admin.put(path, json={"default_model": "big"}, headers={"If-Match": "*"})
    rebuilt = await snapshot(engine)
    with pytest.raises(PermissionDenied):
        resolve_model(
            rebuilt, rebuilt.keys_by_digest[apikeys.digest(LIMITED_KEY)], "default", embedding=False
        )
    # and a tenant without a default has no model `default`
    await admin.put(path, json={"default_model": None}, headers={"If-Match": "*"})
    cleared = await snapshot(engine)
    with pytest.raises(NotFound):
        resolve_model(
            cleared, cleared.keys_by_digest[apikeys.digest(KEY)], "default", embedding=False
        )


async def test_a_model_named_default_wins(admin: httpx.AsyncClient, engine: AsyncEngine) -> None:
    tenant = await _tenant(admin)
    made = await admin.post(
        "/models", json={"name": "default", "routes": [{"provider": "up", "upstream_model": "d"}]}
    )
    assert made.status_code == 201, made.text
    await admin.put(
        f"/tenants/{tenant}/preferences", json={"default_model": "big"}, headers={"If-Match": "*"}
    )
    built = await snapshot(engine)
    principal = built.keys_by_digest[apikeys.digest(KEY)]
    assert resolve_model(built, principal, "default", embedding=False)[0].name == "default"
