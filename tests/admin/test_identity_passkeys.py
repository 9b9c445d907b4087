"""Passkeys over real HTTP: a `llmrelay serve` whose LLMRELAY_PUBLIC_URL makes the relying
party, and a software authenticator (tests/support/webauthn_authenticator.py) answering the
options it gives: registration, password-less sign-in, the passkey as the second factor
after a password, list / rename / delete, the audit entries, and every bad answer refused
with a 4xx in the admin API's error shape."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmrelay.admin.state import AccountPolicy, AdminState
from tests.admin.access_support import add_tenant, add_user, console
from tests.support.accounts import make_account
from tests.support.gateway_process import GatewayProcess
from tests.support.webauthn_authenticator import SoftAuthenticator

ADMIN_TOKEN = "pk-admin-token-0123456789abcdef"
PASSWORD = "passkey password 5173"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(
        tmp_path_factory.mktemp("passkeys"), env={"LLMRELAY_ADMIN_TOKEN": ADMIN_TOKEN}
    )
    process.env["LLMRELAY_PUBLIC_URL"] = origin_of(process)
    process.start(timeout_s=300)  # a loaded machine (CI beside other runs) starts it slowly
    yield process
    assert process.stop() == 0, process.logs()


def origin_of(gateway: GatewayProcess) -> str:
    """The console's public address: `localhost` (an RP id is a host name, never an IP)."""
    return f"http://localhost:{gateway.port}"


def admin(gateway: GatewayProcess) -> httpx.Client:
    return httpx.Client(
        base_url=f"{gateway.url}/api/admin",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=180,
    )


_made = iter(range(10_000))


def account(gateway: GatewayProcess) -> str:
    email = f"pk{next(_made)}@example.com"
    with admin(gateway) as api:
        made = make_account(api, {"email": email, "password": PASSWORD, "platform_admin": True})
    assert made.status_code == 201, made.text
    return email


def anonymous(gateway: GatewayProcess) -> httpx.Client:
    return httpx.Client(base_url=f"{gateway.url}/api/admin", timeout=180)


@contextmanager
def signed_in(gateway: GatewayProcess, email: str, **extra: Any) -> Iterator[httpx.Client]:
    """A client signed in with the password (and `extra`: a second factor), sending its CSRF
    token."""
    with anonymous(gateway) as client:
        answer = client.post("/auth/login", json={"email": email, "password": PASSWORD, **extra})
        assert answer.status_code == 200, answer.text
        client.headers["X-CSRF-Token"] = answer.json()["csrf_token"]
        yield client


def register(
    api: httpx.Client, authenticator: SoftAuthenticator, name: str | None = "laptop"
) -> dict[str, Any]:
    options = api.post("/auth/passkeys/register/options")
    assert options.status_code == 200, options.text
    credential = authenticator.create(options.json())
    made = api.post("/auth/passkeys", json={"credential": credential, "name": name})
    assert made.status_code == 201, made.text
    body: dict[str, Any] = made.json()
    return body


def error_of(answer: httpx.Response, status: int, kind: str) -> str:
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["type"] == kind, error
    return str(error["message"])


def audit_actions(gateway: GatewayProcess, target: str) -> list[tuple[str, int]]:
    """(action, status) of the audit entries naming `target`, newest first."""
    with admin(gateway) as api:
        rows = api.get("/audit", params={"target": target}).json()["data"]
    return [(row["action"], row["status_code"]) for row in rows]


def test_register_list_rename_delete_each_audited(gateway: GatewayProcess) -> None:
    email = account(gateway)
    authenticator = SoftAuthenticator(origin_of(gateway))
    with signed_in(gateway, email) as api:
        options = api.post("/auth/passkeys/register/options").json()
        assert options["rp"] == {"id": "localhost", "name": "llmrelay"}
        assert options["authenticatorSelection"]["residentKey"] == "required"
        assert options["excludeCredentials"] == []
        first = api.post(
            "/auth/passkeys",
            json={"credential": authenticator.create(options), "name": "laptop"},
        )
        assert first.status_code == 201, first.text
        made = first.json()
        assert made["name"] == "laptop" and made["last_used_at"] is None
        assert len(made["recovery_codes"]) == 10  # the account's first second factor
        second = register(api, authenticator, None)
        assert second["name"] == "Passkey 2" and second["recovery_codes"] is None
        again = api.post("/auth/passkeys/register/options").json()
        excluded = {c["id"] for c in again["excludeCredentials"]}
        assert excluded == {c.id_text for c in authenticator.credentials}

        listed = api.get("/auth/passkeys").json()["data"]
        assert [p["id"] for p in listed] == [made["id"], second["id"]]
        renamed = api.patch(f"/auth/passkeys/{made['id']}", json={"name": "work laptop"})
        assert renamed.status_code == 200 and renamed.json()["name"] == "work laptop"
        assert api.delete(f"/auth/passkeys/{second['id']}").status_code == 204
        assert [p["name"] for p in api.get("/auth/passkeys").json()["data"]] == ["work laptop"]
        error_of(api.delete(f"/auth/passkeys/{second['id']}"), 404, "not_found")

    # another user sees none of them and can touch none
    with signed_in(gateway, account(gateway)) as other:
        assert other.get("/auth/passkeys").json()["data"] == []
        error_of(other.delete(f"/auth/passkeys/{made['id']}"), 404, "not_found")
        error_of(other.patch(f"/auth/passkeys/{made['id']}", json={"name": "x"}), 404, "not_found")

    assert audit_actions(gateway, made["id"]) == [
        ("user.passkey_rename", 404),  # the other user's attempts, refused and audited
        ("user.passkey_delete", 404),
        ("user.passkey_rename", 200),
        ("user.passkey_register", 201),
    ]
    assert audit_actions(gateway, second["id"]) == [
        ("user.passkey_delete", 404),  # already gone
        ("user.passkey_delete", 204),
        ("user.passkey_register", 201),
    ]


def test_password_less_sign_in_with_a_discoverable_passkey(gateway: GatewayProcess) -> None:
    email = account(gateway)
    authenticator = SoftAuthenticator(origin_of(gateway))
    with signed_in(gateway, email) as api:
        made = register(api, authenticator)
    with anonymous(gateway) as browser:
        options = browser.post("/auth/passkeys/login/options")
        assert options.status_code == 200, options.text
        assert options.json()["allowCredentials"] == []  # any passkey of this site
        assert options.json()["userVerification"] == "required"
        answer = browser.post(
            "/auth/passkeys/login", json={"credential": authenticator.get(options.json())}
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["user"]["email"] == email and answer.json()["csrf_token"]
        assert "llmrelay_session=" in answer.headers["set-cookie"]
        assert browser.get("/auth/me").json()["user"]["email"] == email
        # a passkey that did not verify its user is no password-less sign-in
        options = browser.post("/auth/passkeys/login/options").json()
        unverified = authenticator.get(options, user_verified=False)
        refused = browser.post("/auth/passkeys/login", json={"credential": unverified})
        assert "verif" in error_of(refused, 401, "passkey_invalid")
        listed = browser.get("/auth/passkeys").json()["data"]
    assert [p["id"] for p in listed] == [made["id"]]
    assert listed[0]["last_used_at"] is not None
    with admin(gateway) as api:
        logins = api.get("/audit", params={"action": "auth.passkey_login"}).json()["data"]
    mine = [row["status_code"] for row in logins if row["actor_email"] == email]
    assert 200 in mine, logins


def test_a_passkey_is_the_second_factor_after_the_password(gateway: GatewayProcess) -> None:
    email = account(gateway)
    authenticator = SoftAuthenticator(origin_of(gateway))
    with signed_in(gateway, email) as api:
        made = register(api, authenticator)
    codes = made["recovery_codes"]
    with anonymous(gateway) as browser:
        bare = browser.post("/auth/login", json={"email": email, "password": PASSWORD})
        assert "passkey" in error_of(bare, 401, "totp_required")
        assert "set-cookie" not in bare.headers
        wrong = browser.post(
            "/auth/passkeys/login/options", json={"email": email, "password": "wrong password"}
        )
        error_of(wrong, 401, "authentication_error")
        half = browser.post("/auth/passkeys/login/options", json={"email": email})
        assert error_of(half, 400, "invalid_request")
        options = browser.post(
            "/auth/passkeys/login/options", json={"email": email, "password": PASSWORD}
        )
        assert options.status_code == 200, options.text
        allowed = [c["id"] for c in options.json()["allowCredentials"]]
        assert allowed == [authenticator.credentials[0].id_text]
        answer = browser.post(
            "/auth/login",
            json={
                "email": email,
                "password": PASSWORD,
                "passkey": authenticator.get(options.json(), user_verified=False),
            },
        )
        assert answer.status_code == 200, answer.text
    # a recovery code still works when the passkey is lost
    with signed_in(gateway, email, recovery_code=codes[0]) as api:
        assert api.get("/auth/me").status_code == 200
        # without passkeys (and TOTP) the password alone signs in again
        assert api.delete(f"/auth/passkeys/{made['id']}").status_code == 204
    with signed_in(gateway, email) as api:
        assert api.get("/auth/me").status_code == 200


def test_a_password_less_challenge_is_no_second_factor(gateway: GatewayProcess) -> None:
    """The challenge is bound to its purpose: one issued for a password-less sign-in does
    not pass as the second factor of a password sign-in (nor the other way round)."""
    email = account(gateway)
    authenticator = SoftAuthenticator(origin_of(gateway))
    with signed_in(gateway, email) as api:
        register(api, authenticator)
    with anonymous(gateway) as browser:
        loose = browser.post("/auth/passkeys/login/options").json()
        answer = browser.post(
            "/auth/login",
            json={"email": email, "password": PASSWORD, "passkey": authenticator.get(loose)},
        )
        error_of(answer, 400, "challenge_invalid")
        bound = browser.post(
            "/auth/passkeys/login/options", json={"email": email, "password": PASSWORD}
        ).json()
        error_of(
            browser.post("/auth/passkeys/login", json={"credential": authenticator.get(bound)}),
            400,
            "challenge_invalid",
        )


def _expire_challenges(gateway: GatewayProcess) -> None:
    with sqlite3.connect(Path(gateway.folder) / "gateway.db") as db:
        db.execute("UPDATE passkey_challenges SET expires_at = '2000-01-01 00:00:00.000000'")


def test_bad_answers_are_refused_in_the_error_shape(gateway: GatewayProcess) -> None:
    email = account(gateway)
    origin = origin_of(gateway)
    authenticator = SoftAuthenticator(origin)
    with signed_in(gateway, email) as api:
        # registration: a challenge this server never gave, another origin, a replay
        options = api.post("/auth/passkeys/register/options").json()
        forged = authenticator.create({**options, "challenge": "bm90LWEtY2hhbGxlbmdl"})
        answer = api.post("/auth/passkeys", json={"credential": forged})
        assert "unknown" in error_of(answer, 400, "challenge_invalid")
        elsewhere = authenticator.create(options, origin="https://evil.example")
        answer = api.post("/auth/passkeys", json={"credential": elsewhere})
        assert "origin" in error_of(answer, 400, "passkey_invalid")
        replayed = api.post("/auth/passkeys", json={"credential": elsewhere})
        error_of(replayed, 400, "challenge_invalid")  # consumed by the refused answer
        options = api.post("/auth/passkeys/register/options").json()
        other_rp = authenticator.create(options, rp_id="evil.example")
        error_of(api.post("/auth/passkeys", json={"credential": other_rp}), 400, "passkey_invalid")
        error_of(
            api.post("/auth/passkeys", json={"credential": {"id": "x"}}), 400, "invalid_request"
        )
        register(api, authenticator)

    with anonymous(gateway) as browser:
        login = "/auth/passkeys/login"
        # a replayed answer: the challenge answered once
        options = browser.post("/auth/passkeys/login/options").json()
        signed = authenticator.get(options)
        assert browser.post(login, json={"credential": signed}).status_code == 200
        again = browser.post(login, json={"credential": signed})
        assert "already used" in error_of(again, 400, "challenge_invalid")
        # another origin
        options = browser.post("/auth/passkeys/login/options").json()
        answer = browser.post(
            login, json={"credential": authenticator.get(options, origin="https://evil.example")}
        )
        assert "origin" in error_of(answer, 401, "passkey_invalid")
        # an unknown credential
        stranger = SoftAuthenticator(origin)
        stranger.create({"rp": {"id": "localhost"}, "user": {"id": "eA"}, "challenge": "eA"})
        options = browser.post("/auth/passkeys/login/options").json()
        answer = browser.post(login, json={"credential": stranger.get(options)})
        assert "unknown passkey" in error_of(answer, 401, "passkey_invalid")
        # a counter that goes backwards (a cloned authenticator)
        options = browser.post("/auth/passkeys/login/options").json()
        answer = browser.post(login, json={"credential": authenticator.get(options, sign_count=1)})
        assert "sign count" in error_of(answer, 401, "passkey_invalid")
        # an expired challenge
        options = browser.post("/auth/passkeys/login/options").json()
        _expire_challenges(gateway)
        answer = browser.post(login, json={"credential": authenticator.get(options)})
        assert "expired" in error_of(answer, 400, "challenge_invalid")
        # and the passkey still works with a fresh challenge and a counter moving on
        options = browser.post("/auth/passkeys/login/options").json()
        assert (
            browser.post(login, json={"credential": authenticator.get(options)}).status_code == 200
        )


async def test_without_a_public_url_there_are_no_passkeys(admin_state: AdminState) -> None:
    """No LLMRELAY_PUBLIC_URL: no relying party (a Host header never makes one), a 409 that
    names the setting; signing in with a password is untouched."""
    await add_user(admin_state.database(), "nourl@example.com", platform_admin=True)
    async with console(admin_state, "nourl@example.com") as api:
        for path in ("/auth/passkeys/register/options", "/auth/passkeys/login/options"):
            answer = await api.post(path)
            assert answer.status_code == 409, answer.text
            error = answer.json()["error"]
            assert error["type"] == "passkeys_unavailable"
            assert "LLMRELAY_PUBLIC_URL" in error["message"]
        assert (await api.get("/auth/passkeys")).json() == {"data": []}


async def test_a_passkey_is_the_two_factor_a_tenant_requires(admin_state: AdminState) -> None:
    """A member of a tenant that requires two-factor gets its role once it has a passkey
    (TOTP off), and loses it again when the passkey goes."""
    admin_state.accounts = AccountPolicy(public_url="http://localhost")
    tenant = await add_tenant(admin_state.database(), "strict", require_2fa=True)
    await add_user(admin_state.database(), "strict@example.com", {tenant: "viewer"})
    async with console(admin_state, "strict@example.com") as api:

        async def locked() -> bool:
            memberships = (await api.get("/auth/me")).json()["memberships"]
            return bool(memberships[0]["two_factor_required"])

        assert await locked()
        assert (await api.get("/projects", params={"tenant_id": tenant})).status_code == 403
        options = (await api.post("/auth/passkeys/register/options")).json()
        credential = SoftAuthenticator("http://localhost").create(options)
        made = await api.post("/auth/passkeys", json={"credential": credential})
        assert made.status_code == 201, made.text
        assert not await locked()
        assert (await api.get("/projects", params={"tenant_id": tenant})).status_code == 200
        assert (await api.delete(f"/auth/passkeys/{made.json()['id']}")).status_code == 204
        assert await locked()
