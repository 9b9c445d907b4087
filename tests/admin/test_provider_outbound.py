"""A provider's base URL under the outbound address policy, through the admin API over a real
database, with a real server on loopback that counts its connections: a tenant's admin is
refused (400 `address_refused`, naming the rule) a loopback, private, metadata or
loopback-resolving host, unless LLMRELAY_TENANT_OUTBOUND_ALLOW opens it; the operator (the
admin token) may use loopback but not metadata; a change that moves the URL is judged by
whoever makes it; a provider test makes no connection the policy refuses."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.state import AdminState
from llmrelay.jobs.probe import Prober
from llmrelay.outbound.policy import OutboundPolicies
from llmrelay.settings import Settings
from llmrelay.store.db import session_factory
from llmrelay.store.models import Provider
from tests.admin.access_support import FAST_PASSWORDS, add_tenant, add_user, client, console
from tests.admin.conftest import ADMIN_TOKEN, SEALER
from tests.jobs.ops_support import registry
from tests.support.counting_server import CountingServer, counting_server

EMAIL = "tenant-admin@example.com"


@pytest.fixture
async def server() -> AsyncIterator[CountingServer]:
    async with counting_server() as found:
        yield found


def _state(engine: AsyncEngine, prober: Prober, allow: str = "") -> AdminState:
    return AdminState(
        ADMIN_TOKEN,
        engine=engine,
        sealer=SEALER,
        passwords=FAST_PASSWORDS,
        prober=prober,
        outbound=OutboundPolicies.from_settings(Settings(tenant_outbound_allow=allow)),
    )


@pytest.fixture
async def prober(engine: AsyncEngine) -> AsyncIterator[Prober]:
    """Probes through the providers' transport as a process without allowances has it."""
    async with registry() as providers:
        yield Prober(engine, SEALER, providers, delays_s=(300.0,))


@pytest.fixture
async def tenant(engine: AsyncEngine) -> str:
    tenant_id = await add_tenant(engine, "outbound")
    await add_user(engine, EMAIL, {tenant_id: "tenant_admin"})
    return tenant_id


def _provider(slug: str, base_url: str) -> dict[str, str]:
    return {"slug": slug, "type": "openai_compatible", "base_url": base_url}


def _refused(answer: httpx.Response, rule: str) -> None:
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["type"], error["field"]) == ("address_refused", "base_url")
    assert rule in error["message"], error["message"]
    assert "outbound address policy" in error["message"]


async def _declared_by(engine: AsyncEngine, provider_id: str) -> str:
    async with session_factory(engine)() as session:
        row = await session.get(Provider, provider_id)
        assert row is not None
        return row.declared_by


async def test_a_tenant_admin_may_not_point_a_provider_inward(
    engine: AsyncEngine, prober: Prober, tenant: str, server: CountingServer
) -> None:
    async with console(_state(engine, prober), EMAIL) as api:
        for slug, base_url, rule in [
            ("loop", server.url(), "is a loopback address"),
            ("private", "http://10.1.2.3:8000/v1", "is a private address"),
            ("metadata", "http://169.254.169.254/latest", "is a cloud metadata address"),
            ("v6-metadata", "http://[fd00:ec2::254]/latest", "is a cloud metadata address"),
            ("cgnat", "http://100.64.0.9/v1", "is a shared (CGNAT) address"),
            ("by-name", f"http://localhost:{server.port}/v1", "is a loopback address"),
        ]:
            _refused(await api.post("/providers", json=_provider(slug, base_url)), rule)
        assert (await api.get("/providers")).json()["data"] == []
    assert server.connections == 0


async def test_the_setting_opens_a_network_to_tenants(
    engine: AsyncEngine, prober: Prober, tenant: str, server: CountingServer
) -> None:
    async with console(_state(engine, prober, allow="127.0.0.1/32"), EMAIL) as api:
        created = await api.post("/providers", json=_provider("loop", server.url()))
        assert created.status_code == 201, created.text
        assert await _declared_by(engine, created.json()["id"]) == "tenant"
        # Only what it names: another loopback address, or metadata, stays refused.
        other = server.url().replace("127.0.0.1", "127.0.0.2")
        _refused(await api.post("/providers", json=_provider("other", other)), "loopback")
        metadata = "http://169.254.169.254/"
        _refused(await api.post("/providers", json=_provider("md", metadata)), "metadata")

    # Without the allowance (the operator took it back), a test makes no connection.
    async with console(_state(engine, prober), EMAIL) as api:
        probed = await api.post(f"/providers/{created.json()['id']}/test")
        assert probed.status_code == 200, probed.text
        assert probed.json()["status"] == "unavailable"
        assert "loopback" in probed.json()["detail"], probed.json()
    assert server.connections == 0


async def test_the_operator_may_use_loopback_but_not_metadata(
    engine: AsyncEngine, prober: Prober, tenant: str, server: CountingServer
) -> None:
    state = _state(engine, prober)
    async with client(state, Authorization=f"Bearer {ADMIN_TOKEN}") as admin:
        created = await admin.post("/providers", json=_provider("local-vllm", server.url()))
        assert created.status_code == 201, created.text
        provider_id = created.json()["id"]
        assert await _declared_by(engine, provider_id) == "operator"
        _refused(
            await admin.post("/providers", json=_provider("md", "http://169.254.169.254/")),
            "cloud metadata",
        )
        probed = await admin.post(f"/providers/{provider_id}/test")
        assert probed.status_code == 200, probed.text
    assert server.connections == 1  # the operator's provider was reached

    # In the tenant's hands: a change that leaves the URL alone keeps it the operator's; one
    # that moves it is judged as the tenant's.
    async with client(state, Authorization=f"Bearer {ADMIN_TOKEN}") as admin:
        moved = await admin.post(
            "/providers", json=_provider("shared", server.url()), params={"tenant_id": tenant}
        )
        assert moved.status_code == 201, moved.text
    shared = moved.json()["id"]
    async with console(state, EMAIL) as api:
        kept = await api.patch(
            f"/providers/{shared}", json={"timeout_s": 30}, headers={"If-Match": "*"}
        )
        assert kept.status_code == 200, kept.text
        assert await _declared_by(engine, shared) == "operator"
        other = server.url().replace("127.0.0.1", "127.0.0.3")
        _refused(
            await api.patch(
                f"/providers/{shared}", json={"base_url": other}, headers={"If-Match": "*"}
            ),
            "loopback",
        )
        public = await api.patch(
            f"/providers/{shared}",
            json={"base_url": "http://93.184.216.34/v1"},
            headers={"If-Match": "*"},
        )
        assert public.status_code == 200, public.text
        assert await _declared_by(engine, shared) == "tenant"
