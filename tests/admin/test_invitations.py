"""Pending invitations over the real admin app and database (SQLite and PostgreSQL): listed
with the link's expiry and the mail's state, for the tenants the caller administers only; a
new link replaces the old one; a revoked invitation's link stops and its pending account goes.
The mail outbox lists what was queued, never a body; sign-up settings read as set; a form with
several mistakes gets each one named."""

from __future__ import annotations

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.state import AdminState
from llmrelay.store.db import session_factory
from llmrelay.store.models_access import User
from tests.admin.access_support import (
    add_tenant,
    add_user,
    client,
    console,
    fast_passwords,  # noqa: F401  (autouse: cheap argon2 parameters)
)
from tests.admin.conftest import SEALER
from tests.admin.support import assert_error
from tests.support.mail import mail_text, token_in

PASSWORD = "a brand new long password"


async def test_pending_invitations_resend_and_revoke(
    admin: httpx.AsyncClient, admin_state: AdminState, engine: AsyncEngine
) -> None:
    acme, other = await add_tenant(engine, "acme"), await add_tenant(engine, "other")
    for email, tenant in (("one@example.com", acme), ("two@example.com", other)):
        body = {"email": email, "tenant_id": tenant, "role": "viewer"}
        assert (await admin.post("/invitations", json=body)).status_code == 201
    listed = (await admin.get("/invitations")).json()["data"]
    assert {i["email"] for i in listed} == {"one@example.com", "two@example.com"}
    one = next(i for i in listed if i["email"] == "one@example.com")
    assert (one["tenant_id"], one["role"], one["expired"]) == (acme, "viewer", False)
    assert one["mail_status"] == "pending"  # queued in the outbox (no SMTP server here)

    await add_user(engine, "boss@example.com", {acme: "tenant_admin"})
    async with console(admin_state, "boss@example.com") as boss:
        mine = (await boss.get("/invitations")).json()["data"]
        assert [i["email"] for i in mine] == ["one@example.com"]  # its tenant's only
        two = next(i for i in listed if i["email"] == "two@example.com")
        assert_error(await boss.post(f"/invitations/{two['user_id']}/resend"), 404)

        first = token_in(await mail_text(engine, SEALER, "one@example.com", "invitation"))
        resent = await boss.post(f"/invitations/{one['user_id']}/resend")
        assert resent.status_code == 200, resent.text
        assert resent.json()["mail"] == "no_smtp"
        second = token_in(await mail_text(engine, SEALER, "one@example.com", "invitation"))
        assert first != second
        async with client(admin_state) as anonymous:
            old = {"token": first, "password": PASSWORD}
            assert_error(await anonymous.post("/auth/invitation/accept", json=old), 400, "token")

        assert (await boss.delete(f"/invitations/{one['user_id']}")).status_code == 204
        assert (await boss.get("/invitations")).json()["data"] == []
        async with client(admin_state) as anonymous:
            new = {"token": second, "password": PASSWORD}
            assert_error(await anonymous.post("/auth/invitation/accept", json=new), 400, "token")
        assert_error(await boss.delete(f"/invitations/{one['user_id']}"), 404)
    async with session_factory(engine)() as session:
        gone = await session.scalar(select(User).where(User.email == "one@example.com"))
    assert gone is None  # it belonged nowhere else


async def test_the_outbox_lists_mails_without_their_bodies(
    admin: httpx.AsyncClient, admin_state: AdminState, engine: AsyncEngine
) -> None:
    acme = await add_tenant(engine, "acme")
    body = {"email": "mailed@example.com", "tenant_id": acme, "role": "viewer"}
    assert (await admin.post("/invitations", json=body)).status_code == 201
    page = (await admin.get("/mail/outbox")).json()
    assert page["smtp_configured"] is False
    (mail,) = [m for m in page["data"] if m["to"] == "mailed@example.com"]
    assert (mail["kind"], mail["status"], mail["tenant_id"]) == ("invitation", "pending", acme)
    assert "token" not in str(page) and "accept-invitation" not in str(page)
    assert (await admin.get("/mail/outbox", params={"status": "sent"})).json()["data"] == []
    assert_error(await admin.get("/mail/outbox", params={"cursor": "nonsense"}), 400, "cursor")
    await add_user(engine, "elsewhere@example.com", {await add_tenant(engine, "b"): "tenant_admin"})
    async with console(admin_state, "elsewhere@example.com") as stranger:
        assert (await stranger.get("/mail/outbox")).json()["data"] == []


async def test_signup_settings_read_as_set(admin: httpx.AsyncClient) -> None:
    settings = (await admin.get("/settings/signup")).json()
    assert settings["enabled"] is False and settings["mail_configured"] is False


async def test_several_mistakes_are_each_named(admin: httpx.AsyncClient) -> None:
    answer = await admin.post("/projects", json={"name": "p", "limits": {"rpm": "lots", "tpm": 0}})
    error = answer.json()["error"]
    assert answer.status_code == 400
    assert {e["field"] for e in error["errors"]} == {"limits.rpm", "limits.tpm"}
    assert error["field"] == error["errors"][0]["field"]
