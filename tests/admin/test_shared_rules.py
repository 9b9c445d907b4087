"""`llmrelay apply` and the admin API write through the same services: a file applied after
API changes agrees with them (idempotent, a revoked key stays revoked), both refuse the same
input, and a committed API change is announced to the replicas (PostgreSQL NOTIFY)."""

from __future__ import annotations

import asyncio

import asyncpg
import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay import apikeys
from llmrelay.admin.app import create_admin
from llmrelay.admin.state import AdminState
from llmrelay.config.apply import apply_config
from llmrelay.config.loader import ConfigError, parse_config
from llmrelay.snapshot.signals import PG_CHANNEL, ConfigPublisher
from llmrelay.store.db import session_factory
from tests.admin.conftest import ADMIN_TOKEN, SEALER
from tests.admin.support import assert_error, generation, snapshot

FILE_KEY = "file-key-0123456789-abcdefgh"
CONFIG = f"""
providers: [{{slug: up, type: mock}}]
models:
  - name: chat
    routes: [{{provider: up, upstream_model: m1}}]
projects:
  - name: acme
    keys: [{{name: ci, key: {FILE_KEY}}}]
"""


async def _apply(engine: AsyncEngine, text: str = CONFIG) -> list[str]:
    config = parse_config(text, "gw.yaml", {})
    async with session_factory(engine).begin() as session:
        return (await apply_config(session, config, SEALER, source="gw.yaml")).changes


async def test_apply_after_api_changes(admin: httpx.AsyncClient, engine: AsyncEngine) -> None:
    assert await _apply(engine)
    assert await _apply(engine) == []  # idempotent
    key = (await admin.get("/keys")).json()["data"][0]
    assert key["source"] == "config" and key["version"] == 1
    await admin.post(f"/keys/{key['id']}/revoke")
    # rows the API added (a second route) are the file's to list: apply puts its list back,
    # and the revoked key stays revoked
    model = (await admin.get("/models")).json()["data"][0]
    await admin.post(
        f"/models/{model['id']}/routes", json={"provider": "up", "upstream_model": "m2"}
    )
    changes = await _apply(engine)
    assert changes == ["updated model chat (routes)"]
    assert await _apply(engine) == []
    served = await snapshot(engine)
    assert served.keys_by_digest[apikeys.digest(FILE_KEY)].status == "revoked"
    assert [r.upstream_model for r in served.models[model["tenant_id"]]["chat"].routes] == ["m1"]


async def test_the_same_rules_refuse_the_same_input(
    admin: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    await _apply(engine)
    project = (await admin.get("/projects")).json()["data"][0]
    # a key already in use: refused by the API (409) and by apply (a config error)
    assert_error(
        await admin.post(f"/projects/{project['id']}/keys", json={"name": "x", "key": FILE_KEY}),
        409,
        "key",
    )
    other = CONFIG.replace("name: acme", "name: other")
    with pytest.raises(ConfigError, match="already in use"):
        await _apply(engine, other)
    # a short key: the same schema refuses it in both
    assert_error(
        await admin.post(f"/projects/{project['id']}/keys", json={"name": "x", "key": "short"}),
        400,
        "key",
    )
    with pytest.raises(ConfigError, match="at least 20 characters"):
        parse_config(CONFIG.replace(FILE_KEY, "short"), "gw.yaml", {})


@pytest.mark.postgres
async def test_a_change_is_announced_after_its_commit(postgres_engine: AsyncEngine) -> None:
    publisher = ConfigPublisher(engine=postgres_engine, redis_url=None)
    state = AdminState(ADMIN_TOKEN, engine=postgres_engine, sealer=SEALER, publisher=publisher)
    url = postgres_engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    listener = await asyncpg.connect(url)
    heard: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener(PG_CHANNEL, lambda *args: heard.put_nowait(args[3]))
    transport = httpx.ASGITransport(app=create_admin(state))
    try:
        async with httpx.AsyncClient(
            transport=transport,
            base_url="http://admin",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        ) as admin:
            assert (await admin.post("/projects", json={"name": "acme"})).status_code == 201
        payload = await asyncio.wait_for(heard.get(), timeout=5)
        assert int(payload) == await generation(postgres_engine)
    finally:
        await listener.close()
        await publisher.close()
