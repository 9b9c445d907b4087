"""LLMRELAY_AUDIT_ADMIN_READS: reads leave audit rows when the operator turns it on, and
none when it is off (the default)."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.state import AdminState
from llmrelay.settings import Settings
from tests.admin.access_support import (
    add_tenant,
    add_user,
    audit_rows,
    console,
    fast_passwords,  # noqa: F401  (autouse: cheap argon2 parameters)
)


async def test_reads_are_audited_only_when_turned_on(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    tenant = await add_tenant(engine, "acme")
    user_id = await add_user(engine, "ann@example.com", {tenant: "viewer"})
    async with console(admin_state, "ann@example.com") as api:
        assert (await api.get(f"/tenants/{tenant}")).status_code == 200
        assert not [r for r in await audit_rows(engine) if r["action"].startswith("GET ")]

        admin_state.audit_reads = True
        assert (await api.get(f"/tenants/{tenant}")).status_code == 200
        assert (await api.get("/audit")).status_code == 403  # refused reads too
        read = await api.get(f"/tenants/{tenant}", headers={"x-request-id": "read-1"})
        assert read.status_code == 200
    rows = [r for r in await audit_rows(engine) if r["action"].startswith("GET ")]
    assert sorted((r["action"], r["status_code"]) for r in rows) == [
        ("GET /audit", 403),
        ("GET /tenants/{tenant_id}", 200),
        ("GET /tenants/{tenant_id}", 200),
    ]
    (first,) = [r for r in rows if r["request_id"] == "read-1"]
    assert (first["actor_id"], first["target_id"], first["tenant_id"]) == (
        user_id,
        tenant,
        tenant,
    )


def test_the_setting_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLMRELAY_AUDIT_ADMIN_READS", raising=False)
    assert Settings().audit_admin_reads is False
    monkeypatch.setenv("LLMRELAY_AUDIT_ADMIN_READS", "true")
    assert Settings().audit_admin_reads is True
