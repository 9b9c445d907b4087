"""Every route of the admin app, declared once for the permission matrix and the audit tests:
the permission it needs, how to aim a request at a row of a given tenant (a row made for the
request when the request destroys or uses it up), and the audit action it must record.

A path parameter is aimed at the side's row of the same name (`{project_id}` -> the side's
project...): see `PARAMS`. The world the requests run in is tests/admin/matrix_world.py.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

import httpx
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.access import Role
from llmrelay.admin.app import AdminApp
from llmrelay.admin.identity import sessions
from llmrelay.admin.state import AdminState
from llmrelay.billing import ledger, orders
from llmrelay.jobs import queue
from llmrelay.store.db import session_factory
from llmrelay.store.models_access import User
from llmrelay.store.models_passkeys import Passkey
from tests.admin.access_support import PASSWORD, totp_code
from tests.support.mail import mail_text, token_in
from tests.support.webauthn_authenticator import SoftAuthenticator, b64url

#: Recognisable secrets planted in requests that carry one: no audit row may ever hold them.
PLANTED_API_KEY = "sk-planted-provider-secret-7f3a9c"
PLANTED_KEY = "llr-planted-key-secret-0123456789"
PLANTED_PASSWORD = "planted password 9d2e41"
PLANTED = (PLANTED_API_KEY, PLANTED_KEY, PLANTED_PASSWORD)

#: The console's address in the world (LLMRELAY_PUBLIC_URL): passkeys are bound to it.
PUBLIC_URL = "http://localhost"

#: The callers of the matrix: every role of the role table (a console session; the platform
#: admin is an account with the flag), the admin token, and no credentials at all.
TOKEN, ANONYMOUS = "token", "anonymous"
CALLERS = [TOKEN, ANONYMOUS, *(role.value for role in Role)]


@dataclass
class Side:
    """One tenant's rows the requests are aimed at."""

    tenant: str
    project: str  # the developer's project (in the own tenant)
    outside: str  # a project outside the developer's list
    key: str
    outside_key: str
    provider: str
    provider_slug: str
    model: str
    route: str
    resource: str  # an account of `provider`
    policy: str
    guardrail: str
    member: str  # a viewer of this tenant only
    member_email: str
    request_id: str
    outside_request_id: str
    job: str  # a queued job of the tenant

    def outside_view(self) -> Side:
        """The same tenant, aimed at the project outside the developer's list."""
        return replace(
            self, project=self.outside, key=self.outside_key, request_id=self.outside_request_id
        )


@dataclass
class World:
    state: AdminState
    engine: AsyncEngine
    admin: httpx.AsyncClient  # the admin token
    own: Side
    other: Side
    #: the admin app every client of the world calls
    app: AdminApp
    counter: itertools.count[int] = field(default_factory=itertools.count)
    #: the identity provider single sign-on signs in with (tests/support/oidc_provider.py)
    oidc: Any = None
    #: the ChatGPT issuer openai_codex providers sign in at (tests/support/mock_codex.py)
    codex: Any = None

    def n(self) -> int:
        return next(self.counter)

    def client(self, **headers: str) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=self.app)
        return httpx.AsyncClient(transport=transport, base_url="http://admin", headers=headers)

    async def make(self, path: str, body: dict[str, Any], **params: str) -> str:
        """A row made by the platform admin; its id."""
        answer = await self.admin.post(path, json=body, params=params)
        assert answer.status_code == 201, f"{path}: {answer.text}"
        return str(answer.json()["id"])


@dataclass
class Call:
    method: str
    path: str
    json: Any = None
    params: dict[str, str] = field(default_factory=dict)
    #: the id the audit entry must name (None: the response's `id`)
    target: str | None = None


Body = Callable[[World, Side], Any]
Make = Callable[[World, Side], Awaitable[str]]
Build = Callable[[World, Side, httpx.AsyncClient], Awaitable[Call]]
#: Path parameter -> the Side field it is aimed at.
PARAMS = {
    "tenant_id": "tenant",
    "project_id": "project",
    "key_id": "key",
    "provider_id": "provider",
    "model_id": "model",
    "route_id": "route",
    "resource_id": "resource",
    "policy_id": "policy",
    "guardrail_id": "guardrail",
    "user_id": "member",
    "request_id": "request_id",
    "job_id": "job",
}


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # as the app declares it
    #: None: any signed-in caller (the /auth routes act on the caller's own account)
    permission: str | None
    #: tenant: aimed at one tenant's row (own, other); global: no tenant (lists, settings);
    #: self: the caller's account; public: no credentials needed
    kind: Literal["tenant", "global", "self", "public"] = "tenant"
    body: Body | None = None
    params: tuple[tuple[str, str], ...] = ()
    #: a create in the side's tenant: `?tenant_id=`
    create: bool = False
    #: the answer is a new row: the audit entry names its id
    new: bool = False
    #: makes the row the last path parameter names (what the request deletes or uses up)
    make: Make | None = None
    #: builds the whole request (self routes that need a setup first)
    custom: Build | None = None
    #: a project-limited member sees only its projects' rows (also aimed "outside")
    project_scoped: bool = False
    #: only a platform admin, whatever the role table says
    platform_only: bool = False
    #: for lists: the markers of rows in the answer
    shows: Callable[[Any], set[str]] | None = None
    #: what the admin token gets on a self route (it has no account: 400)
    token_status: int | None = None
    #: the audit entry's action (None: a read, no entry) and the target it names, when it
    #: is neither the last path parameter nor the answer's id
    action: str | None = None
    target: str | None = None
    #: the entry's diff may be empty (nothing of the resource's fields changed)
    empty_diff: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.method, self.path)

    @property
    def mutation(self) -> bool:
        return self.method not in ("GET", "HEAD", "OPTIONS")

    async def build(self, world: World, side: Side, api: httpx.AsyncClient) -> Call:
        """The request aimed at `side`'s rows."""
        if self.custom is not None:
            return await self.custom(world, side, api)
        names = [name.strip("{}") for name in self.path.split("/") if name.startswith("{")]
        values = {name: str(getattr(side, PARAMS.get(name, ""), "")) for name in names}
        if self.make is not None:
            values[names[-1]] = await self.make(world, side)
        params = dict(self.params) | ({"tenant_id": side.tenant} if self.create else {})
        target = self.target
        if target is None and names and not (self.create or self.new):
            target = values[names[-1]]
        body = self.body(world, side) if self.body else None
        return Call(self.method, self.path.format(**values), body, params, target)


def app_routes(app: FastAPI) -> set[tuple[str, str]]:
    """(method, path) of every operation the admin app serves (HEAD goes with GET)."""
    found = set()
    for route in iter_route_contexts(app.routes):
        for method in route.methods or ():
            if method != "HEAD" and route.path is not None:
                found.add((method, route.path))
    return found


# --- rows made for one request ---------------------------------------------------------


async def _project(world: World, side: Side) -> str:
    return await world.make("/projects", {"name": f"p{world.n()}"}, tenant_id=side.tenant)


async def _key(world: World, side: Side) -> str:
    return await world.make(f"/projects/{side.project}/keys", {"name": f"k{world.n()}"})


async def _provider(world: World, side: Side) -> str:
    body = {"slug": f"up{world.n()}", "type": "mock"}
    return await world.make("/providers", body, tenant_id=side.tenant)


async def _resource(world: World, side: Side) -> str:
    return await world.make(f"/providers/{side.provider}/resources", {"name": f"a{world.n()}"})


async def _model(world: World, side: Side) -> str:
    body = {"name": f"m{world.n()}", "routes": [_route_body(world, side)]}
    return await world.make("/models", body, tenant_id=side.tenant)


async def _route(world: World, side: Side) -> str:
    return await world.make(f"/models/{side.model}/routes", _route_body(world, side))


async def _price(world: World, side: Side) -> str:
    return await world.make(f"/models/{side.model}/prices", _price_body(world, side))


async def _policy(world: World, side: Side) -> str:
    return await world.make("/policies", {"name": f"pol{world.n()}"}, tenant_id=side.tenant)


def _guardrail_body(world: World, side: Side) -> dict[str, Any]:
    return {"name": f"g{world.n()}", "rules": [{"detector": "email", "action": "mask"}]}


async def _guardrail(world: World, side: Side) -> str:
    return await world.make("/guardrails", _guardrail_body(world, side), tenant_id=side.tenant)


async def _global_guardrails(world: World, side: Side, api: httpx.AsyncClient) -> Call:
    """A new policy of the default tenant (the global binding's) to bind: each call a change."""
    name = f"global{world.n()}"
    await world.make(
        "/guardrails", {"name": name, "rules": [{"detector": "card", "action": "block"}]}
    )
    return Call("PUT", "/settings/guardrails", {"global": [name]}, target="guardrails")


async def _floater(world: World, side: Side) -> str:
    """An account in no tenant (to be added as a member)."""
    return await world.make(
        "/users", {"email": f"floater{world.n()}@example.com", "password": PASSWORD}
    )


async def _spare(world: World, side: Side) -> str:
    """A viewer of the side's tenant (to be changed or removed)."""
    body = {"email": f"spare{world.n()}@example.com", "password": PASSWORD, "role": "viewer"}
    return await world.make("/users", body | {"tenant_id": side.tenant})


async def _job(world: World, side: Side) -> str:
    """A queued job of the side's tenant (jobs are made by the system, not through the API)."""
    return await queue_job(world.engine, side.tenant, f"matrix-{world.n()}")


async def queue_job(engine: AsyncEngine, tenant: str | None, kind: str) -> str:
    async with engine.begin() as conn:
        job_id = await queue.enqueue(
            conn, kind, {"n": 1}, now=time.time(), tenant_id=tenant, payload_sealed="sealed"
        )
    assert job_id is not None
    return job_id


async def _metering_failed(world: World, side: Side) -> str:
    """A reservation of the side's tenant whose metering failed (to be reconciled)."""
    request_id = f"unmetered-{world.n()}"
    async with world.engine.begin() as conn:
        await ledger.ensure_wallet(conn, side.tenant, prepaid=False)
        await ledger.credit(conn, side.tenant, 1_000, kind="topup", key=f"seed:{request_id}")
        await ledger.reserve(conn, side.tenant, request_id, 1_000)
        await ledger.settle(conn, request_id, None)
    return request_id


async def _order(world: World, side: Side) -> str:
    async with world.engine.begin() as conn:
        return (await orders.create(conn, side.tenant, orders.CHECKOUT, 10_000_000)).id


async def _paid_order(world: World, side: Side) -> str:
    """A top-up paid at the world's fake Stripe (an off-session payment with its charge) and
    credited: what a refund to the card needs."""
    payments = world.state.payments
    assert payments is not None and payments.stripe is not None
    config = payments.stripe.config
    async with httpx.AsyncClient() as client:
        paid = await client.post(
            f"{config.api_base}/v1/payment_intents",
            data={"amount": "1000", "currency": "usd", "confirm": "true", "payment_method": "pm_m"},
            headers={"Authorization": f"Bearer {config.secret_key}"},
        )
    assert paid.status_code == 200, paid.text
    async with world.engine.begin() as conn:
        order = await orders.create(conn, side.tenant, orders.AUTO_TOPUP, 10_000_000)
        verdict = orders.Verdict("paid", payment_intent=paid.json()["id"])
        await orders.credit(conn, order, verdict, payments.sealer)
    return order.id


def _route_body(world: World, side: Side) -> dict[str, Any]:
    return {"provider": side.provider_slug, "upstream_model": f"up-model-{world.n()}"}


def _price_body(world: World, side: Side) -> dict[str, Any]:
    """A scheduled price version at a moment of its own (a year and month per call: the
    counter passes 900 in one run, so `2{n + 100}` once made a five-digit year)."""
    n = world.n()
    return {
        "input_per_mtok": 1,
        "effective_from": f"{2100 + n // 12}-{n % 12 + 1:02d}-01T00:00:00Z",
    }


# --- requests that need a setup by the same caller -------------------------------------


async def _totp_enable(world: World, side: Side, api: httpx.AsyncClient) -> Call:
    setup = await api.post("/auth/totp/setup")  # fails for callers without an account
    code = totp_code(setup.json()["secret"]) if setup.status_code == 200 else "000000"
    return Call("POST", "/auth/totp/enable", {"code": code})


async def _totp_disable(world: World, side: Side, api: httpx.AsyncClient) -> Call:
    setup = await api.post("/auth/totp/setup")
    code = "000000"
    if setup.status_code == 200:
        secret = setup.json()["secret"]
        enabled = await api.post("/auth/totp/enable", json={"code": totp_code(secret)})
        assert enabled.status_code == 200, enabled.text
        code = totp_code(secret, 1)  # the next step: not used yet
    return Call("POST", "/auth/totp/disable", {"password": PASSWORD, "code": code})


async def _passkey_register(world: World, side: Side, api: httpx.AsyncClient) -> Call:
    options = await api.post("/auth/passkeys/register/options")  # fails without an account
    credential: dict[str, Any] = {"id": "none"}
    if options.status_code == 200:
        credential = SoftAuthenticator(PUBLIC_URL).create(options.json())
    return Call("POST", "/auth/passkeys", {"credential": credential, "name": "matrix"})


async def _my_passkey(api: httpx.AsyncClient) -> str:
    """A passkey of the caller's, registered through the ceremony ("none" without an
    account)."""
    options = await api.post("/auth/passkeys/register/options")
    if options.status_code != 200:
        return "none"
    credential = SoftAuthenticator(PUBLIC_URL).create(options.json())
    made = await api.post("/auth/passkeys", json={"credential": credential})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


async def _passkey_rename(world: World, side: Side, api: httpx.AsyncClient) -> Call:
    return Call("PATCH", f"/auth/passkeys/{await _my_passkey(api)}", {"name": f"p{world.n()}"})


async def _passkey_delete(world: World, side: Side, api: httpx.AsyncClient) -> Call:
    passkey = await _my_passkey(api)
    return Call("DELETE", f"/auth/passkeys/{passkey}", target=passkey)


async def _passkey_login(world: World, side: Side, api: httpx.AsyncClient) -> Call:
    """A password-less sign-in of an account of its own (its passkey put in the database,
    as a registration would), answering options asked for by the same client."""
    authenticator = SoftAuthenticator(PUBLIC_URL)
    async with session_factory(world.engine)() as session:
        user = User(email=f"passkey{world.n()}@example.com", password_hash="-")
        session.add(user)
        await session.flush()
        held = authenticator.create(
            {"rp": {"id": "localhost"}, "user": {"id": b64url(user.id.encode())}, "challenge": ""}
        )
        credential = authenticator.credentials[-1]
        session.add(
            Passkey(
                user_id=user.id,
                credential_id=held["id"],
                public_key=b64url(credential.cose_key()),
                sign_count=0,
                name="matrix",
            )
        )
        await session.commit()
        user_id = user.id
    options = await api.post("/auth/passkeys/login/options")
    assert options.status_code == 200, options.text
    return Call(
        "POST",
        "/auth/passkeys/login",
        {"credential": authenticator.get(options.json())},
        target=user_id,
    )


async def _add_member(world: World, side: Side, api: httpx.AsyncClient) -> Call:
    floater = await _floater(world, side)
    body = {"user_id": floater, "role": "viewer"}
    return Call("POST", f"/tenants/{side.tenant}/members", body, target=floater)


async def _codex_device(world: World, side: Side, *, poll: bool) -> Call:
    """An openai_codex provider of the side's tenant; to poll, a device code the user (the
    stand-in issuer) already approved."""
    provider = await world.make(
        "/providers",
        {"slug": f"cx{world.n()}", "type": "openai_codex", "base_url": world.codex.backend},
        tenant_id=side.tenant,
    )
    path = f"/providers/{provider}/codex/device"
    if not poll:
        return Call("POST", path, target=provider)
    started = await world.admin.post(path)
    assert started.status_code == 200, started.text
    code = started.json()
    world.codex.approve(code["user_code"])
    body = {"device_auth_id": code["device_auth_id"], "user_code": code["user_code"]}
    return Call("POST", path + "/poll", body, target=provider)


async def _deliveries(world: World, side: Side, api: httpx.AsyncClient) -> Call:
    return Call("GET", "/webhooks/deliveries", params={"project": side.project})


async def _login(world: World, side: Side, api: httpx.AsyncClient) -> Call:
    body = {"email": side.member_email, "password": PASSWORD}
    return Call("POST", "/auth/login", body, target=side.member)


async def _mailed_token(world: World, to: str, kind: str) -> str:
    """The token of the last `kind` mail to `to`, opened from the sealed outbox."""
    assert world.state.sealer is not None
    return token_in(await mail_text(world.engine, world.state.sealer, to, kind))


async def _accept_invitation(world: World, side: Side, api: httpx.AsyncClient) -> Call:
    email = f"invitee{world.n()}@example.com"
    body = {"email": email, "tenant_id": side.tenant, "role": "viewer"}
    invited = await world.make("/invitations", body)
    token = await _mailed_token(world, email, "invitation")
    body = {"token": token, "password": PLANTED_PASSWORD}
    return Call("POST", "/auth/invitation/accept", body, target=invited)


async def _reset_request(world: World, side: Side, api: httpx.AsyncClient) -> Call:
    return Call("POST", "/auth/password-reset", {"email": side.member_email}, target=side.member)


async def _reset(world: World, side: Side, api: httpx.AsyncClient) -> Call:
    email = f"forgot{world.n()}@example.com"
    user = await world.make("/users", {"email": email, "password": PASSWORD})
    async with world.client() as anonymous:
        asked = await anonymous.post("/auth/password-reset", json={"email": email})
        assert asked.status_code == 202, asked.text
    token = await _mailed_token(world, email, "password_reset")
    body = {"token": token, "password": PLANTED_PASSWORD}
    return Call("POST", "/auth/password-reset/confirm", body, target=user)


async def _verify(world: World, side: Side, api: httpx.AsyncClient) -> Call:
    email = f"verify{world.n()}@example.com"
    user = await world.make("/users", {"email": email, "password": PASSWORD})
    async with world.client() as own:
        signed_in = await own.post("/auth/login", json={"email": email, "password": PASSWORD})
        own.headers["X-CSRF-Token"] = signed_in.json()["csrf_token"]
        # the admin set the password: the user's own comes first (403 until then)
        body = {"current_password": PASSWORD, "new_password": f"{PASSWORD} of my own"}
        changed = await own.post("/auth/password", json=body)
        assert changed.status_code == 200, changed.text
        own.headers["X-CSRF-Token"] = changed.json()["csrf_token"]
        assert (await own.post("/auth/verify-email/send")).status_code == 202
    token = await _mailed_token(world, email, "verification")
    return Call("POST", "/auth/verify-email", {"token": token}, target=user)


async def _signup(world: World, side: Side, api: httpx.AsyncClient) -> Call:
    n = world.n()
    body = {"email": f"founder{n}@example.com", "password": PLANTED_PASSWORD}
    body["tenant_name"] = f"Signed up {n}"
    return Call("POST", "/signup", body)


async def _invited(world: World, side: Side) -> str:
    """A pending invitation to the side's tenant (to be resent or revoked)."""
    body = {"email": f"pending{world.n()}@example.com", "tenant_id": side.tenant, "role": "viewer"}
    return await world.make("/invitations", body)


CALLBACK = "http://console.example/sso/callback"


async def _sso_begin(world: World, side: Side, api: httpx.AsyncClient) -> Call:
    return Call("POST", "/auth/sso/begin", {"redirect_uri": CALLBACK, "next": "/dashboard"})


async def _sso_finish(world: World, side: Side, api: httpx.AsyncClient) -> Call:
    """A sign-in begun, and the identity provider's answer to it (its code and the state)."""
    email = f"sso{world.n()}@example.com"  # an account in no tenant: its group adds one
    user = await world.make("/users", {"email": email, "password": PASSWORD})
    world.oidc.person = {"email": email, "groups": ["matrix"]}
    begun = await world.admin.post("/auth/sso/begin", json={"redirect_uri": CALLBACK})
    assert begun.status_code == 200, begun.text
    async with httpx.AsyncClient() as browser:
        authorized = await browser.get(begun.json()["authorize_url"])
    assert authorized.status_code == 302, authorized.text
    back = parse_qs(urlsplit(authorized.headers["location"]).query)
    body = {"code": back["code"][0], "state": back["state"][0], "pending": begun.json()["pending"]}
    return Call("POST", "/auth/sso/finish", body, target=user)


# --- what a list shows -----------------------------------------------------------------


def _ids(key: str = "id") -> Callable[[Any], set[str]]:
    return lambda answer: {str(row[key]) for row in answer["data"]}


def _requests(answer: Any) -> set[str]:
    """A usage sum as a marker: one request per project of each side (see matrix_world)."""
    points = [answer] if "requests" in answer else answer["data"]
    return {f"requests:{sum(p['requests'] for p in points)}"}


def _n(key: str, prefix: str = "") -> Body:
    """A body {key: a fresh value}."""
    return lambda w, s: {key: f"{prefix}{w.n()}" if prefix else 1 + w.n()}


async def _other_session(world: World, side: Side, api: httpx.AsyncClient) -> Call:
    """Another session of the caller's (as a second sign-in would start), to end; a made-up
    id for callers without an account."""
    me = await api.get("/auth/me")
    user = me.json().get("user") if me.status_code == 200 else None
    if user is None:
        return Call("DELETE", "/auth/sessions/none")
    async with session_factory(world.engine)() as session:
        started = await sessions.start(session, world.state.sessions, user["id"], None, None)
        await session.commit()
    return Call("DELETE", f"/auth/sessions/{started.session_id}", target=started.session_id)


def _list(path: str, permission: str, shows: Callable[[Any], set[str]], **kw: Any) -> Route:
    return Route("GET", path, permission, "global", params=(("limit", "500"),), shows=shows, **kw)


def _crud(
    name: str, path: str, item: str, create: Body, change: Body, make: Make, **kw: Any
) -> list[Route]:
    """The list, create, read, update and delete routes of a resource."""
    read, write = f"{path.strip('/')}:read", f"{path.strip('/')}:write"
    return [
        _list(path, read, _ids(), **kw),
        Route("POST", path, write, body=create, create=True, new=True, action=f"{name}.create"),
        Route("GET", f"{path}/{item}", read, **kw),
        Route("PATCH", f"{path}/{item}", write, body=change, action=f"{name}.update", **kw),
        Route("DELETE", f"{path}/{item}", write, make=make, action=f"{name}.delete"),
    ]


SCOPED = {"project_scoped": True}  # for _list and _crud

ROUTES: list[Route] = [
    Route("POST", "/auth/login", None, "public", custom=_login, action="auth.login",
          empty_diff=True),
    Route("POST", "/auth/logout", None, "self", action="auth.logout", empty_diff=True),
    Route("GET", "/auth/me", None, "self"),
    Route("POST", "/auth/password", None, "self", token_status=400, action="user.password_change",
          body=lambda w, s: {"current_password": PASSWORD, "new_password": PLANTED_PASSWORD}),
    Route("POST", "/auth/totp/setup", None, "self", token_status=400, action="user.totp_setup",
          empty_diff=True),
    Route("POST", "/auth/totp/enable", None, "self", token_status=400, custom=_totp_enable,
          action="user.totp_enable"),
    Route("POST", "/auth/totp/disable", None, "self", token_status=400, custom=_totp_disable,
          action="user.totp_disable"),
    # passkeys (tests/admin/test_identity_passkeys.py)
    Route("GET", "/auth/passkeys", None, "self", token_status=400),
    Route("POST", "/auth/passkeys/register/options", None, "self", token_status=400,
          action="user.passkey_options", empty_diff=True),
    Route("POST", "/auth/passkeys", None, "self", token_status=400, custom=_passkey_register,
          new=True, action="user.passkey_register"),
    Route("PATCH", "/auth/passkeys/{passkey_id}", None, "self", token_status=400,
          custom=_passkey_rename, action="user.passkey_rename"),
    Route("DELETE", "/auth/passkeys/{passkey_id}", None, "self", token_status=400,
          custom=_passkey_delete, action="user.passkey_delete"),
    Route("POST", "/auth/passkeys/login/options", None, "public",
          action="auth.passkey_options"),
    Route("POST", "/auth/passkeys/login", None, "public", custom=_passkey_login,
          action="auth.passkey_login", empty_diff=True),
    Route("POST", "/auth/verify-email/send", None, "self", token_status=400,
          action="user.verification_sent", empty_diff=True),
    # one's own sessions; an admin's view of a member's (tests/admin/test_identity_session_list.py)
    Route("GET", "/auth/sessions", None, "self", token_status=400),
    Route("DELETE", "/auth/sessions/{session_id}", None, "self", token_status=400,
          custom=_other_session, action="session.revoke"),
    Route("POST", "/auth/sessions/revoke-others", None, "self", token_status=400,
          action="user.sessions_revoke", empty_diff=True),
    Route("GET", "/users/{user_id}/sessions", "users:read"),
    Route("DELETE", "/users/{user_id}/sessions", "users:write", action="user.sessions_revoke",
          empty_diff=True),
    # invitations, the account mails' links, sign-up
    Route("POST", "/invitations", "users:write", new=True, action="user.invite",
          body=lambda w, s: {"email": f"invited{w.n()}@example.com", "tenant_id": s.tenant,
                             "role": "viewer"}),
    Route("POST", "/auth/invitation/accept", None, "public", custom=_accept_invitation,
          action="user.accept_invitation"),
    Route("POST", "/auth/password-reset", None, "public", custom=_reset_request,
          action="user.password_reset_request", empty_diff=True),
    Route("POST", "/auth/password-reset/confirm", None, "public", custom=_reset,
          action="user.password_reset"),
    Route("POST", "/auth/verify-email", None, "public", custom=_verify,
          action="user.verify_email"),
    Route("POST", "/signup", None, "public", custom=_signup, new=True, action="tenant.signup"),
    Route("GET", "/settings/signup", "tenants:read", "global"),
    # pending invitations, the mail outbox (tenant scoping: tests/admin/test_invitations.py)
    Route("GET", "/invitations", "users:read", "global"),
    Route("POST", "/invitations/{user_id}/resend", "users:write", make=_invited,
          action="user.invite"),
    Route("DELETE", "/invitations/{user_id}", "users:write", make=_invited,
          action="user.revoke_invitation"),
    Route("GET", "/mail/outbox", "users:read", "global"),
    # single sign-on (OpenID Connect, against tests/support/oidc_provider.py)
    Route("GET", "/auth/sso", None, "public"),
    Route("POST", "/auth/sso/begin", None, "public", custom=_sso_begin, action="auth.sso_begin",
          empty_diff=True),
    Route("POST", "/auth/sso/finish", None, "public", custom=_sso_finish,
          action="auth.sso_login"),
    # tenants, users, members
    _list("/tenants", "tenants:read", _ids()),
    Route("POST", "/tenants", "tenants:write", "global", platform_only=True, new=True,
          action="tenant.create",
          body=lambda w, s: {"slug": f"t{w.n()}", "name": "New"}),
    Route("GET", "/tenants/{tenant_id}", "tenants:read"),
    Route("PATCH", "/tenants/{tenant_id}", "tenants:write", body=_n("name", "T"),
          action="tenant.update"),
    Route("GET", "/tenants/{tenant_id}/preferences", "tenants:read"),
    Route("PUT", "/tenants/{tenant_id}/preferences", "tenants:write",
          body=lambda w, s: {"low_balance_usd": 1 + w.n()}, action="tenant.preferences"),
    _list("/users", "users:read", _ids("email")),
    Route("POST", "/users", "users:write", new=True, action="user.create",
          body=lambda w, s: {"email": f"made{w.n()}@example.com", "password": PLANTED_PASSWORD,
                             "tenant_id": s.tenant, "role": "viewer"}),
    Route("GET", "/users/{user_id}", "users:read"),
    Route("PATCH", "/users/{user_id}", "users:write", body=_n("name", "N"), action="user.update"),
    Route("POST", "/users/{user_id}/password", "users:write", make=_spare,
          body=lambda w, s: {"password": PLANTED_PASSWORD}, action="user.password_set"),
    Route("GET", "/tenants/{tenant_id}/members", "users:read"),
    Route("POST", "/tenants/{tenant_id}/members", "users:write", custom=_add_member,
          action="member.add"),
    Route("PATCH", "/tenants/{tenant_id}/members/{user_id}", "users:write", make=_spare,
          body=lambda w, s: {"role": "auditor"}, action="member.update"),
    Route("DELETE", "/tenants/{tenant_id}/members/{user_id}", "users:write", make=_spare,
          action="member.remove"),
    _list("/audit", "audit:read", _ids("tenant_id")),
    # the bundled model catalogue: any signed-in caller (its own data, no tenant's)
    Route("GET", "/catalogue", None, "self"),
    # usage
    _list("/usage/summary", "usage:read", _requests, **SCOPED),
    _list("/usage/timeseries", "usage:read", _requests, **SCOPED),
    _list("/requests", "usage:read", _ids("request_id"), **SCOPED),
    Route("GET", "/requests/{request_id}", "usage:read", project_scoped=True),
    # projects, keys, limits
    *_crud("project", "/projects", "{project_id}", _n("name", "p"),
           lambda w, s: {"limits": {"rpm": 1000 + w.n()}}, _project, **SCOPED),
    Route("GET", "/projects/{project_id}/limits", "limits:read", project_scoped=True),
    Route("PUT", "/projects/{project_id}/limits", "limits:write", project_scoped=True,
          body=lambda w, s: {"limits": {"tpm": 1 + w.n()}}, action="project.limits"),
    _list("/keys", "keys:read", _ids(), **SCOPED),
    Route("POST", "/projects/{project_id}/keys", "keys:write", project_scoped=True, new=True,
          action="key.create",
          body=lambda w, s: {"name": f"k{w.n()}", "key": f"{PLANTED_KEY}-{w.n()}"}),
    Route("GET", "/keys/{key_id}", "keys:read", project_scoped=True),
    Route("PATCH", "/keys/{key_id}", "keys:write", project_scoped=True, action="key.update",
          body=lambda w, s: {"limits": {"rpm": 1 + w.n()}}),
    Route("POST", "/keys/{key_id}/rotate", "keys:write", project_scoped=True, action="key.rotate"),
    Route("POST", "/keys/{key_id}/revoke", "keys:write", project_scoped=True, make=_key,
          action="key.revoke"),
    Route("DELETE", "/keys/{key_id}", "keys:write", project_scoped=True, make=_key,
          action="key.delete"),
    Route("GET", "/keys/{key_id}/limits", "limits:read", project_scoped=True),
    Route("PUT", "/keys/{key_id}/limits", "limits:write", project_scoped=True, action="key.limits",
          body=lambda w, s: {"limits": {"tpm": 1 + w.n()}}),
    # providers (a planted credential in what is written)
    *_crud("provider", "/providers", "{provider_id}",
           lambda w, s: {"slug": f"up{w.n()}", "type": "mock", "api_key": PLANTED_API_KEY,
                         "headers": {"x-upstream-token": PLANTED_API_KEY}},
           lambda w, s: {"region": f"r{w.n()}", "api_key": PLANTED_API_KEY}, _provider),
    Route("GET", "/providers/{provider_id}/models", "providers:read"),
    Route("GET", "/providers/{provider_id}/resources", "providers:read"),
    Route("POST", "/providers/{provider_id}/resources", "providers:write", new=True,
          body=lambda w, s: {"name": f"a{w.n()}", "api_key": PLANTED_API_KEY},
          action="provider_resource.create"),
    Route("GET", "/providers/{provider_id}/resources/{resource_id}", "providers:read"),
    Route("PATCH", "/providers/{provider_id}/resources/{resource_id}", "providers:write",
          body=lambda w, s: {"priority": w.n(), "api_key": PLANTED_API_KEY},
          action="provider_resource.update"),
    Route("DELETE", "/providers/{provider_id}/resources/{resource_id}", "providers:write",
          make=_resource, action="provider_resource.delete"),
    # on a provider of its own: once listed, an inventory binds the routes the others add
    Route("PUT", "/providers/{provider_id}/models", "providers:write", make=_provider,
          body=lambda w, s: {"models": [f"listed-{w.n()}"]}, action="provider.inventory"),
    _list("/providers/health", "providers:read", _ids("provider_id")),
    Route("POST", "/providers/{provider_id}/test", "providers:write", action="provider.test"),
    Route("POST", "/providers/{provider_id}/discover", "providers:write",
          action="provider.discover"),
    Route("GET", "/providers/{provider_id}/codex", "providers:read"),
    Route("DELETE", "/providers/{provider_id}/codex", "providers:write",
          action="provider.codex_sign_out", empty_diff=True),
    Route("POST", "/providers/{provider_id}/codex/device", "providers:write",
          custom=lambda w, s, api: _codex_device(w, s, poll=False),
          action="provider.codex_device", empty_diff=True),
    Route("POST", "/providers/{provider_id}/codex/device/poll", "providers:write",
          custom=lambda w, s, api: _codex_device(w, s, poll=True),
          action="provider.codex_sign_in"),
    # jobs
    _list("/jobs", "jobs:read", _ids()),
    Route("GET", "/jobs/{job_id}", "jobs:read"),
    Route("POST", "/jobs/{job_id}/cancel", "jobs:write", make=_job, action="job.cancel"),
    # models, routes, prices
    *_crud("model", "/models", "{model_id}",
           lambda w, s: {"name": f"m{w.n()}", "routes": [_route_body(w, s)]},
           lambda w, s: {"deadline_s": 100 + w.n()}, _model),
    Route("POST", "/models/{model_id}/routes", "models:write", body=_route_body, new=True,
          action="route.create"),
    Route("GET", "/models/{model_id}/routes/{route_id}", "models:read"),
    Route("PATCH", "/models/{model_id}/routes/{route_id}", "models:write", body=_n("weight"),
          action="route.update"),
    Route("DELETE", "/models/{model_id}/routes/{route_id}", "models:write", make=_route,
          action="route.delete"),
    Route("GET", "/models/{model_id}/prices", "prices:read"),
    Route("POST", "/models/{model_id}/prices", "prices:write", body=_price_body, new=True,
          action="price.create"),
    Route("DELETE", "/models/{model_id}/prices/{price_id}", "prices:write", make=_price,
          action="price.delete"),
    # webhooks: a project's signing secret (shown to its writers) and its deliveries
    Route("GET", "/projects/{project_id}/webhook-secret", "projects:write", project_scoped=True),
    Route("POST", "/projects/{project_id}/webhook-secret/rotate", "projects:write",
          project_scoped=True, action="project.webhook_secret_rotate"),
    Route("GET", "/webhooks/deliveries", "projects:read", project_scoped=True,
          custom=_deliveries),
    # routing policies and the gateway-wide setting
    *_crud("policy", "/policies", "{policy_id}", _n("name", "pol"),
           lambda w, s: {"regions": [f"r{w.n()}"]}, _policy),
    Route("GET", "/settings/routing", "policies:read", "global"),
    Route("PUT", "/settings/routing", "policies:write", "global", platform_only=True,
          body=lambda w, s: {"breaker": {"failures": 1 + w.n() % 999}},
          action="settings.routing", target="routing"),
    # billing: wallets, the ledger, reservations, refunds, adjustments, top-ups
    Route("GET", "/billing/{tenant_id}/wallet", "billing:read"),
    Route("PATCH", "/billing/{tenant_id}/wallet", "billing:write", action="wallet.update",
          body=lambda w, s: {"auto_topup_threshold_micros": 1_000 + w.n()}),
    Route("GET", "/billing/{tenant_id}/ledger", "billing:read"),
    Route("GET", "/billing/{tenant_id}/reservations", "billing:read"),
    Route("POST", "/billing/{tenant_id}/reservations/{request_id}/reconcile", "billing:write",
          make=_metering_failed, body=lambda w, s: {"cost_micros": 1},
          action="reservation.reconcile"),
    Route("POST", "/billing/{tenant_id}/refunds", "billing:write", new=True,
          action="billing.refund",
          body=lambda w, s: {"amount_micros": 1 + w.n(), "reason": "r", "refund_id": f"rf{w.n()}"}),
    Route("POST", "/billing/{tenant_id}/adjustments", "billing:write", new=True,
          platform_only=True, action="billing.adjustment",
          body=lambda w, s: {"amount_micros": 1 + w.n(), "reason": "r",
                             "adjustment_id": f"ad{w.n()}"}),
    Route("GET", "/billing/{tenant_id}/orders", "billing:read"),
    Route("GET", "/billing/{tenant_id}/orders/{order_id}", "billing:read", make=_order),
    Route("POST", "/billing/{tenant_id}/checkout", "billing:write", new=True,
          action="order.checkout", body=lambda w, s: {"amount_usd": "10"}),
    Route("POST", "/billing/{tenant_id}/orders/{order_id}/refund", "billing:write",
          make=_paid_order, action="order.refund",
          body=lambda w, s: {"amount_usd": "1", "reason": "r", "refund_id": f"cr{w.n()}"}),
    Route("GET", "/billing/{tenant_id}/disputes", "billing:read"),
    # guardrails: policies, the dry run, the audit records of hits, the global binding
    *_crud("guardrail", "/guardrails", "{guardrail_id}", _guardrail_body,
           lambda w, s: {"description": f"d{w.n()}"}, _guardrail),
    _list("/guardrails/hits", "guardrails:read", _ids("request_id"), **SCOPED),
    Route("POST", "/guardrails/{guardrail_id}/test", "guardrails:read", action="guardrail.test",
          body=lambda w, s: {"text": f"mail {PLANTED_KEY} to a@example.com"}, empty_diff=True),
    Route("GET", "/settings/guardrails", "guardrails:read", "global"),
    Route("PUT", "/settings/guardrails", "guardrails:write", "global", platform_only=True,
          custom=_global_guardrails, action="settings.guardrails", target="guardrails"),
]  # fmt: skip
