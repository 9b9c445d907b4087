"""Providers over the real admin app: credentials write-only (never returned, sealed at
rest), the YAML's rules with the field named, stable slugs, deletion refused while routes
use a provider, the model inventory, and the snapshot the data plane builds."""

from __future__ import annotations

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.admin.support import assert_error, generation, match, snapshot

SECRET = "sk-upstream-secret-value-9876"


async def test_credentials_are_write_only(admin: httpx.AsyncClient, engine: AsyncEngine) -> None:
    created = await admin.post(
        "/providers",
        json={
            "slug": "openai-main",
            "type": "openai",
            "api_key": SECRET,
            "headers": {"OpenAI-Organization": "org-secret-42"},
        },
    )
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["api_key_set"] is True
    assert body["api_key_last_four"] == "9876"
    assert body["header_names"] == ["OpenAI-Organization"]
    assert body["base_url"] == "https://api.openai.com/v1"
    for response in (
        created,
        await admin.get(f"/providers/{body['id']}"),
        await admin.get("/providers"),
    ):
        assert SECRET not in response.text
        assert "org-secret-42" not in response.text
    async with engine.connect() as conn:
        stored = repr((await conn.execute(text("SELECT * FROM providers"))).all())
    assert SECRET not in stored
    served = await snapshot(engine)
    assert served.generation == await generation(engine)

    # a change that leaves the credentials out keeps them; api_key null removes the key
    renamed = await admin.patch(
        f"/providers/{body['id']}", json={"region": "eu"}, headers=match(created)
    )
    assert renamed.json()["api_key_set"] is True and renamed.json()["region"] == "eu"
    cleared = await admin.patch(
        f"/providers/{body['id']}", json={"api_key": None}, headers=match(renamed)
    )
    assert cleared.json()["api_key_set"] is False
    assert cleared.json()["header_names"] == ["OpenAI-Organization"]
    assert_error(
        await admin.patch(
            f"/providers/{body['id']}", json={"region": "us"}, headers=match(renamed)
        ),
        409,
    )


async def test_provider_rules_name_the_field(admin: httpx.AsyncClient) -> None:
    assert_error(
        await admin.post("/providers", json={"slug": "Bad Slug", "type": "openai"}), 400, "slug"
    )
    assert_error(await admin.post("/providers", json={"slug": "p", "type": "nope"}), 400, "type")
    assert_error(
        await admin.post("/providers", json={"slug": "p", "type": "openai", "base_url": "ftp://x"}),
        400,
        "base_url",
    )
    assert_error(
        await admin.post("/providers", json={"slug": "p", "type": "openai_compatible"}), 400
    )
    assert_error(
        await admin.post(
            "/providers", json={"slug": "p", "type": "openai", "headers": {"Host": "x"}}
        ),
        400,
        "headers",
    )
    assert_error(
        await admin.post("/providers", json={"slug": "p", "type": "openai", "timeout_s": 0}),
        400,
        "timeout_s",
    )
    created = await admin.post("/providers", json={"slug": "p", "type": "mock"})
    assert created.status_code == 201
    assert_error(await admin.post("/providers", json={"slug": "p", "type": "mock"}), 409, "slug")
    url = f"/providers/{created.json()['id']}"
    assert_error(await admin.patch(url, json={"slug": "q"}, headers=match(created)), 400, "slug")


async def test_delete_is_refused_while_routes_use_it(admin: httpx.AsyncClient) -> None:
    provider = await admin.post("/providers", json={"slug": "up", "type": "mock"})
    model = await admin.post(
        "/models", json={"name": "chat", "routes": [{"provider": "up", "upstream_model": "m"}]}
    )
    assert model.status_code == 201, model.text
    url = f"/providers/{provider.json()['id']}"
    assert_error(await admin.delete(url, headers=match(provider)), 409)
    model_url = f"/models/{model.json()['id']}"
    assert (await admin.delete(model_url, headers=match(model))).status_code == 204
    assert (await admin.delete(url, headers=match(provider))).status_code == 204


async def test_model_inventory(admin: httpx.AsyncClient) -> None:
    provider = await admin.post("/providers", json={"slug": "up", "type": "mock"})
    url = f"/providers/{provider.json()['id']}/models"
    assert (await admin.get(url)).json()["models"] is None
    stored = await admin.put(
        url,
        json={"models": ["gpt-4o", {"id": "gpt-4o-mini", "context_window": 128000}]},
        headers=match(provider),
    )
    assert stored.status_code == 200, stored.text
    assert stored.json()["models"] == [
        {"id": "gpt-4o"},
        {"id": "gpt-4o-mini", "context_window": 128000},
    ]
    assert (await admin.get(url)).json() == stored.json()
    assert_error(
        await admin.put(url, json={"models": ["a", "a"]}, headers=match(stored)),
        400,
        "models[1].id",
    )
    assert_error(await admin.put(url, json={"models": ["a"]}, headers=match(provider)), 409)
    assert_error(await admin.put(url, json={"models": ["a"]}), 428)
