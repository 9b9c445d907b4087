"""Provider health through the admin API against the real mock upstream, on SQLite and
PostgreSQL: a test that finds a refused credential marks the provider unavailable (and a
probe job follows it up), fixing the credential brings that probe forward, a test that finds
it online clears it; discovery is queued once; the health page shows each tenant its own
providers and this process's breakers of their routes only."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from datetime import datetime

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.state import AdminState
from llmrelay.jobs.probe import Prober
from llmrelay.routing.breaker import Breakers
from llmrelay.snapshot.model import BreakerSettings
from llmrelay.store.crypto import Sealer
from llmrelay.store.db import session_factory
from llmrelay.store.models import Provider
from tests.admin.access_support import FAST_PASSWORDS, add_tenant, add_user, client, console
from tests.admin.conftest import ADMIN_TOKEN, SEALER
from tests.admin.support import assert_error, generation
from tests.jobs.ops_support import registry
from tests.support.mock_upstream import MockUpstream

GOOD = "sk-good-key-0123456789"
REVOKED = "sk-revoked-key-9876543210"


@pytest.fixture(scope="module")
def upstream() -> Iterator[MockUpstream]:
    server = MockUpstream().start()
    server.refused_keys.add(REVOKED)
    yield server
    server.stop()


@pytest.fixture
async def state(engine: AsyncEngine) -> AsyncIterator[AdminState]:
    woken: list[bool] = []
    async with registry() as providers:
        yield AdminState(
            ADMIN_TOKEN,
            engine=engine,
            sealer=SEALER,
            passwords=FAST_PASSWORDS,
            prober=Prober(engine, SEALER, providers, delays_s=(300.0, 600.0)),
            breakers=Breakers(BreakerSettings()),
            wake_jobs=lambda: woken.append(True),
        )


def _at(moment: str) -> float:
    return datetime.fromisoformat(moment).timestamp()


async def _made(api: httpx.AsyncClient, path: str, body: dict[str, object], **params: str) -> str:
    answer = await api.post(path, json=body, params=params)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


async def test_a_test_marks_health_and_a_fixed_credential_brings_it_back(
    state: AdminState, engine: AsyncEngine, upstream: MockUpstream
) -> None:
    async with client(state, Authorization=f"Bearer {ADMIN_TOKEN}") as admin:
        provider = {"type": "openai_compatible", "base_url": upstream.base_url}
        good = await _made(admin, "/providers", {"slug": "good", "api_key": GOOD, **provider})
        revoked = await _made(admin, "/providers", {"slug": "bad", "api_key": REVOKED, **provider})
        page = (await admin.get("/providers/health")).json()
        assert {(p["slug"], p["status"]) for p in page["data"]} == {
            ("good", "online"),
            ("bad", "online"),  # no probe found otherwise yet
        }

        start = await generation(engine)
        found = await admin.post(f"/providers/{revoked}/test")
        assert found.status_code == 200, found.text
        body = found.json()
        assert body["provider_id"] == revoked
        assert (body["status"], body["reason"], body["models"]) == (
            "unavailable",
            "credentials_refused",
            None,
        )
        assert body["detail"].startswith("HTTP 401") and REVOKED not in found.text
        assert isinstance(body["latency_ms"], float)
        assert await generation(engine) == start + 1  # the denylist changed: every replica

        health = {p["slug"]: p for p in (await admin.get("/providers/health")).json()["data"]}
        bad = health["bad"]
        assert (bad["status"], bad["reason"]) == ("unavailable", "credentials_refused")
        assert bad["since"] and bad["checked_at"] and bad["next_probe_at"]
        probes = (await admin.get("/jobs", params={"kind": "provider_probe"})).json()["data"]
        assert [(j["payload"], j["status"]) for j in probes] == [
            ({"provider_id": revoked}, "queued")
        ]
        assert _at(probes[0]["run_at"]) == pytest.approx(_at(bad["next_probe_at"]), abs=1)
        assert _at(probes[0]["run_at"]) > time.time() + 250

        # The operator fixes the key: the waiting probe runs now, not in five minutes.
        fixed = await admin.patch(
            f"/providers/{revoked}", json={"api_key": GOOD}, headers={"If-Match": "*"}
        )
        assert fixed.status_code == 200, fixed.text
        probe_job = (await admin.get(f"/jobs/{probes[0]['id']}")).json()
        assert _at(probe_job["run_at"]) <= time.time()

        back = await admin.post(f"/providers/{revoked}/test")
        assert back.json()["status"] == "online" and back.json()["models"] == 4
        health = {p["slug"]: p for p in (await admin.get("/providers/health")).json()["data"]}
        back_online = health["bad"]
        assert back_online["status"] == "online" and back_online["reason"] is None
        assert back_online["since"] and back_online["checked_at"]  # online again, from now
        assert back_online["next_probe_at"] is None

        queued = await admin.post(f"/providers/{good}/discover")
        assert queued.status_code == 202, queued.text
        job_id = queued.json()["job_id"]
        again = await admin.post(f"/providers/{good}/discover")
        assert again.json() == {"job_id": job_id}  # one live discovery per provider
        job = (await admin.get(f"/jobs/{job_id}")).json()
        assert (job["kind"], job["status"], job["payload"]) == (
            "model_discovery",
            "queued",
            {"provider_id": good},
        )
        assert_error(await admin.post("/providers/nope/test"), 404)

        # Credentials sealed under a secret key this process does not have: a clear refusal.
        async with session_factory(engine).begin() as session:
            row = await session.get(Provider, good)
            assert row is not None
            row.credentials_sealed = Sealer("another-secret-key-0123456789abcdef").seal(
                b'{"api_key": "x"}', context=good
            )
        assert_error(await admin.post(f"/providers/{good}/test"), 409)


async def test_the_health_page_shows_each_tenant_its_own(
    state: AdminState, engine: AsyncEngine, upstream: MockUpstream
) -> None:
    acme, other = await add_tenant(engine, "acme"), await add_tenant(engine, "other")
    await add_user(engine, "dev@acme.test", {acme: "developer"})
    async with client(state, Authorization=f"Bearer {ADMIN_TOKEN}") as admin:
        ids = {}
        for tenant, slug in ((acme, "mine"), (other, "theirs")):
            ids[slug] = await _made(
                admin, "/providers", {"slug": slug, "type": "mock"}, tenant_id=tenant
            )
            model = await admin.post(
                "/models",
                json={"name": "chat", "routes": [{"provider": slug, "upstream_model": "x"}]},
                params={"tenant_id": tenant},
            )
            route = model.json()["routes"][0]["id"]
            assert state.breakers is not None
            ticket = state.breakers.admit(route)
            assert ticket is not None
            state.breakers.failed(ticket, misconfigured=True)  # this process saw it fail
            ids[f"{slug}-route"] = route
        everything = (await admin.get("/providers/health")).json()
        assert {b["route_id"]: b["state"] for b in everything["breakers"]} == {
            ids["mine-route"]: "open",
            ids["theirs-route"]: "open",
        }
    async with console(state, "dev@acme.test") as dev:
        mine = (await dev.get("/providers/health")).json()
        assert [p["provider_id"] for p in mine["data"]] == [ids["mine"]]
        assert mine["breakers"] == [{"route_id": ids["mine-route"], "state": "open"}]
        filtered = (await dev.get("/providers/health", params={"tenant_id": other})).json()
        assert filtered == {"data": [], "breakers": []}
        assert_error(await dev.post(f"/providers/{ids['mine']}/test"), 403)  # providers:read only
