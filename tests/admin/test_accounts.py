"""Invitations, password resets and email verification over the real admin app and database
(SQLite and PostgreSQL): the tokens mailed (read back from the sealed outbox) work once, for
their purpose, until they expire; pending accounts cannot sign in; a reset ends every session;
reset requests answer the same whatever the address and are throttled; no token or password
reaches the audit log."""

from __future__ import annotations

import json
from datetime import timedelta

import httpx
from sqlalchemy import select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.accounts.endpoints import RESET_REQUESTED
from llmrelay.admin.state import AccountPolicy, AdminState
from llmrelay.store.db import session_factory
from llmrelay.store.models_access import Membership, User
from llmrelay.store.models_billing import AccountToken
from llmrelay.store.types import utcnow
from tests.admin.access_support import (
    add_tenant,
    add_user,
    audit_rows,
    client,
    console,
    fast_passwords,  # noqa: F401  (autouse: cheap argon2 parameters)
    login,
)
from tests.admin.conftest import SEALER
from tests.admin.support import assert_error
from tests.support.mail import mail_text, outbox, token_in

NEW_PASSWORD = "a brand new long password"


async def _token(engine: AsyncEngine, to: str, kind: str) -> str:
    return token_in(await mail_text(engine, SEALER, to, kind))


async def _user(engine: AsyncEngine, email: str) -> User:
    async with session_factory(engine)() as session:
        user = await session.scalar(select(User).where(User.email == email))
        assert user is not None
        return user


async def _no_secret_in_audit(engine: AsyncEngine, *secrets: str) -> None:
    stored = json.dumps([{k: str(v) for k, v in row.items()} for row in await audit_rows(engine)])
    for secret in secrets:
        assert secret not in stored


async def test_an_invitation_makes_a_pending_account_that_signs_in_once_accepted(
    admin: httpx.AsyncClient, admin_state: AdminState, engine: AsyncEngine
) -> None:
    acme = await add_tenant(engine, "acme")
    invited = await admin.post(
        "/invitations", json={"email": "New@Example.com", "tenant_id": acme, "role": "viewer"}
    )
    assert invited.status_code == 201, invited.text
    body = invited.json()
    assert (body["email"], body["pending"], body["role"]) == ("new@example.com", True, "viewer")
    assert body["expires_at"] is not None
    [mail] = await outbox(engine)
    assert (mail["kind"], mail["to_address"], mail["tenant_id"]) == (
        "invitation",
        body["email"],
        acme,
    )
    listed = (await admin.get(f"/users/{body['id']}")).json()
    assert (listed["pending"], listed["email_verified"]) == (True, False)
    text_body = await mail_text(engine, SEALER, body["email"], "invitation")
    assert "Acme" in text_body and "http://admin/accept-invitation?token=" in text_body
    token = token_in(text_body)

    async with client(admin_state) as anonymous:
        assert (await login(anonymous, body["email"], NEW_PASSWORD)).status_code == 401
        weak = await anonymous.post(
            "/auth/invitation/accept", json={"token": token, "password": "short"}
        )
        assert_error(weak, 400, "password")  # the token is not spent on a refused password
        accepted = await anonymous.post(
            "/auth/invitation/accept",
            json={"token": token, "password": NEW_PASSWORD, "name": "Nia"},
        )
        assert accepted.status_code == 200, accepted.text
        assert accepted.json() == {"email": "new@example.com"}
        assert "set-cookie" not in accepted.headers  # accepting does not sign in
        again = await anonymous.post(
            "/auth/invitation/accept", json={"token": token, "password": NEW_PASSWORD}
        )
        assert_error(again, 400, "token")
        signed_in = await login(anonymous, body["email"], NEW_PASSWORD)
        assert signed_in.status_code == 200, signed_in.text
        assert [(m["tenant_id"], m["role"]) for m in signed_in.json()["memberships"]] == [
            (acme, "viewer")
        ]
    listed = (await admin.get(f"/users/{body['id']}")).json()
    assert (listed["pending"], listed["email_verified"]) == (False, True)
    user = await _user(engine, "new@example.com")
    assert not user.pending and user.email_verified_at is not None and user.name == "Nia"
    actions = [(r["action"], r["status_code"]) for r in await audit_rows(engine)]
    assert ("user.invite", 201) in actions and ("user.accept_invitation", 200) in actions
    assert ("user.accept_invitation", 400) in actions  # refused attempts are audited too
    await _no_secret_in_audit(engine, token, NEW_PASSWORD)


async def test_an_existing_account_joins_at_once_and_is_told(
    admin: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    acme = await add_tenant(engine, "acme")
    await add_user(engine, "old@example.com")
    invited = await admin.post(
        "/invitations", json={"email": "old@example.com", "tenant_id": acme, "role": "billing"}
    )
    assert invited.status_code == 201, invited.text
    assert (invited.json()["pending"], invited.json()["expires_at"]) == (False, None)
    [mail] = await outbox(engine)
    assert mail["kind"] == "membership"
    assert "token=" not in await mail_text(engine, SEALER, "old@example.com", "membership")
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM account_tokens"))).scalar() == 0
    again = await admin.post(
        "/invitations", json={"email": "old@example.com", "tenant_id": acme, "role": "viewer"}
    )
    assert_error(again, 409, "email")


async def test_inviting_a_pending_account_again_replaces_its_link(
    admin: httpx.AsyncClient, admin_state: AdminState, engine: AsyncEngine
) -> None:
    acme = await add_tenant(engine, "acme")
    invitation = {"email": "new@example.com", "tenant_id": acme, "role": "viewer"}
    assert (await admin.post("/invitations", json=invitation)).status_code == 201
    first = await _token(engine, "new@example.com", "invitation")
    assert (await admin.post("/invitations", json=invitation)).status_code == 201
    second = await _token(engine, "new@example.com", "invitation")
    assert first != second
    async with client(admin_state) as anonymous:
        old = {"token": first, "password": NEW_PASSWORD}
        assert_error(await anonymous.post("/auth/invitation/accept", json=old), 400, "token")
        new = {"token": second, "password": NEW_PASSWORD}
        assert (await anonymous.post("/auth/invitation/accept", json=new)).status_code == 200


async def test_who_may_invite_whom(admin_state: AdminState, engine: AsyncEngine) -> None:
    acme, other = await add_tenant(engine, "acme"), await add_tenant(engine, "other")
    await add_user(engine, "boss@example.com", {acme: "tenant_admin"})
    await add_user(engine, "view@example.com", {acme: "viewer"})
    async with console(admin_state, "boss@example.com") as boss:
        mine = await boss.post("/invitations", json={"email": "a@example.com", "role": "developer"})
        assert mine.status_code == 201 and mine.json()["tenant_id"] == acme  # its only tenant
        elsewhere = {"email": "b@example.com", "tenant_id": other, "role": "viewer"}
        assert_error(await boss.post("/invitations", json=elsewhere), 404)
        platform = {"email": "c@example.com", "platform_admin": True}
        assert_error(await boss.post("/invitations", json=platform), 403)
        as_role = {"email": "d@example.com", "tenant_id": acme, "role": "platform_admin"}
        assert_error(await boss.post("/invitations", json=as_role), 400, "role")
    async with console(admin_state, "view@example.com") as viewer:
        refused = {"email": "e@example.com", "tenant_id": acme, "role": "viewer"}
        assert_error(await viewer.post("/invitations", json=refused), 403)
    async with engine.connect() as conn:
        members = await conn.execute(select(Membership.tenant_id, Membership.role))
        assert sorted(members.all()) == sorted(
            [(acme, "tenant_admin"), (acme, "viewer"), (acme, "developer")]
        )


async def test_production_without_a_public_url_mails_no_link(
    admin: httpx.AsyncClient, admin_state: AdminState, engine: AsyncEngine
) -> None:
    """A link is never built from the request's Host header in production."""
    admin_state.accounts = AccountPolicy(production=True)
    acme = await add_tenant(engine, "acme")
    refused = await admin.post(
        "/invitations", json={"email": "n@example.com", "tenant_id": acme, "role": "viewer"}
    )
    assert_error(refused, 503)
    assert await outbox(engine) == []
    admin_state.accounts = AccountPolicy(production=True, public_url="https://console.example")
    made = await admin.post(
        "/invitations", json={"email": "n@example.com", "tenant_id": acme, "role": "viewer"}
    )
    assert made.status_code == 201
    text_body = await mail_text(engine, SEALER, "n@example.com", "invitation")
    assert "https://console.example/accept-invitation?token=" in text_body


async def test_a_pending_account_cannot_sign_in_even_with_its_password(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    await add_user(engine, "wait@example.com")
    async with session_factory(engine)() as session:
        await session.execute(update(User).values(pending=True))
        await session.commit()
    async with client(admin_state) as api:
        wrong = await login(api, "wait@example.com", "not the password at all")
        assert wrong.status_code == 401  # nothing said to someone without the password
        refused = await login(api, "wait@example.com")
        assert_error(refused, 403)
        assert refused.json()["error"]["type"] == "account_pending"


async def test_a_password_reset_ends_every_session_and_works_once(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    await add_user(engine, "ann@example.com")
    async with console(admin_state, "ann@example.com") as session, client(admin_state) as api:
        asked = await api.post("/auth/password-reset", json={"email": " ANN@example.com "})
        unknown = await api.post("/auth/password-reset", json={"email": "nobody@example.com"})
        assert (asked.status_code, unknown.status_code) == (202, 202)
        assert asked.json() == unknown.json() == {"message": RESET_REQUESTED}
        assert [m["to_address"] for m in await outbox(engine)] == ["ann@example.com"]
        token = await _token(engine, "ann@example.com", "password_reset")

        assert_error(
            await api.post(
                "/auth/password-reset/confirm", json={"token": token, "password": "short"}
            ),
            400,
            "password",
        )
        done = await api.post(
            "/auth/password-reset/confirm", json={"token": token, "password": NEW_PASSWORD}
        )
        assert done.status_code == 200 and done.json() == {"email": "ann@example.com"}
        assert (await session.get("/auth/me")).status_code == 401  # its session ended
        reused = await api.post(
            "/auth/password-reset/confirm", json={"token": token, "password": NEW_PASSWORD}
        )
        assert_error(reused, 400, "token")
        assert (await login(api, "ann@example.com")).status_code == 401
        assert (await login(api, "ann@example.com", NEW_PASSWORD)).status_code == 200
    await _no_secret_in_audit(engine, token, NEW_PASSWORD)
    requests = [r for r in await audit_rows(engine) if r["action"] == "user.password_reset_request"]
    assert [(r["actor_kind"], r["actor_email"]) for r in requests] == [
        ("anonymous", "ann@example.com"),
        ("anonymous", "nobody@example.com"),
    ]


async def test_verification_of_an_own_address(admin_state: AdminState, engine: AsyncEngine) -> None:
    await add_user(engine, "ann@example.com")
    async with console(admin_state, "ann@example.com") as ann, client(admin_state) as api:
        sent = await ann.post("/auth/verify-email/send")
        assert sent.status_code == 202, sent.text
        assert sent.json()["email"] == "ann@example.com"
        token = await _token(engine, "ann@example.com", "verification")
        # a verification token does not reset a password
        misused = {"token": token, "password": NEW_PASSWORD}
        assert_error(await api.post("/auth/password-reset/confirm", json=misused), 400, "token")
        verified = await api.post("/auth/verify-email", json={"token": token})
        assert verified.status_code == 200, verified.text
        assert_error(await ann.post("/auth/verify-email/send"), 409)
    assert (await _user(engine, "ann@example.com")).email_verified_at is not None


async def test_an_expired_link_is_refused(admin_state: AdminState, engine: AsyncEngine) -> None:
    await add_user(engine, "ann@example.com")
    async with client(admin_state) as api:
        assert (
            await api.post("/auth/password-reset", json={"email": "ann@example.com"})
        ).status_code == 202
        token = await _token(engine, "ann@example.com", "password_reset")
        async with session_factory(engine)() as session:
            await session.execute(
                update(AccountToken).values(expires_at=utcnow() - timedelta(seconds=1))
            )
            await session.commit()
        expired = {"token": token, "password": NEW_PASSWORD}
        assert_error(await api.post("/auth/password-reset/confirm", json=expired), 400, "token")
        assert (await login(api, "ann@example.com")).status_code == 200  # unchanged


async def test_reset_requests_are_throttled_alike_for_any_address(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    admin_state.accounts = AccountPolicy(reset_max_per_account=2, reset_max_per_ip=5)
    await add_user(engine, "ann@example.com")
    async with client(admin_state) as api:
        for email in ("ann@example.com", "nobody@example.com"):
            for _ in range(2):
                answer = await api.post("/auth/password-reset", json={"email": email})
                assert answer.status_code == 202
            throttled = await api.post("/auth/password-reset", json={"email": email})
            assert_error(throttled, 429)
            assert "for this address" in throttled.json()["error"]["message"]
            assert int(throttled.headers["Retry-After"]) > 0
        # four requests counted from this client: one more, then its address is throttled
        assert (
            await api.post("/auth/password-reset", json={"email": "x@example.com"})
        ).status_code == 202
        from_ip = await api.post("/auth/password-reset", json={"email": "y@example.com"})
        assert_error(from_ip, 429)
        assert "from this address" in from_ip.json()["error"]["message"]
        # sign-in is not throttled by any of it
        assert (await login(api, "ann@example.com")).status_code == 200
    assert len([m for m in await outbox(engine) if m["to_address"] == "ann@example.com"]) == 2


async def test_a_disabled_account_gets_no_reset_mail(
    admin_state: AdminState, engine: AsyncEngine
) -> None:
    await add_user(engine, "gone@example.com")
    async with session_factory(engine)() as session:
        await session.execute(update(User).values(disabled=True))
        await session.commit()
    async with client(admin_state) as api:
        answer = await api.post("/auth/password-reset", json={"email": "gone@example.com"})
        assert answer.status_code == 202 and answer.json() == {"message": RESET_REQUESTED}
    assert await outbox(engine) == []


async def test_the_admin_token_has_no_address_to_verify(admin: httpx.AsyncClient) -> None:
    assert_error(await admin.post("/auth/verify-email/send"), 400)
