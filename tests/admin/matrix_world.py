"""The world the permission matrix and the audit tests run in, built once per test module and
backend through the real API (the admin token): two tenants ("own", the callers' tenant, and
"other") with the same rows each (two projects with a key and a request record each, a
provider, a model with a route, a policy, a viewer), an account per role in the own tenant (a
developer limited to the own tenant's first project), and a signed-in client per caller."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
import pytest
import pytest_asyncio
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.access import Role
from llmrelay.admin.app import create_admin
from llmrelay.admin.sso.client import ProviderClient
from llmrelay.admin.sso.config import SsoConfig
from llmrelay.admin.state import AccountPolicy, AdminState
from llmrelay.billing.payments import Payments
from llmrelay.codex_vault import DatabaseVault
from llmrelay.deadlines import Deadlines
from llmrelay.jobs.probe import Prober
from llmrelay.providers.codex.accounts import CodexAccounts
from llmrelay.providers.http import HttpTransport
from llmrelay.providers.registry import ProviderRegistry
from llmrelay.store import rollups
from llmrelay.store.db import create_engine, session_factory
from llmrelay.store.models import RequestRecord, UsageRollupDirty
from llmrelay.store.models_access import AuditEntry, Membership, User
from llmrelay.store.models_guardrails import GuardrailHit
from llmrelay.store.types import utcnow
from tests.admin.access_support import FAST_PASSWORDS, PASSWORD, login
from tests.admin.conftest import ADMIN_TOKEN, SEALER
from tests.admin.route_table import (
    ANONYMOUS,
    CALLERS,
    PUBLIC_URL,
    TOKEN,
    Side,
    World,
    queue_job,
)
from tests.conftest import need_postgres
from tests.support.fake_stripe import FakeStripe, stripe_config
from tests.support.migrated import migrated_postgres_database, migrated_sqlite_url
from tests.support.mock_codex import MockCodex
from tests.support.oidc_provider import OidcProvider

#: Sign-up on, and the account routes' throttles out of the way of the matrix's many calls
#: from one client address.
OPEN = AccountPolicy(
    public_url=PUBLIC_URL,  # passkeys' relying party
    signup_enabled=True,
    signup_max_per_ip=1_000_000,
    reset_max_per_account=1_000_000,
    reset_max_per_ip=1_000_000,
)


async def _side(admin: httpx.AsyncClient, engine: AsyncEngine, slug: str) -> Side:
    async def post(path: str, body: dict[str, Any], **params: str) -> dict[str, Any]:
        answer = await admin.post(path, json=body, params=params)
        assert answer.status_code == 201, f"{path}: {answer.text}"
        made: dict[str, Any] = answer.json()
        return made

    tenant = (await post("/tenants", {"slug": slug, "name": slug.title()}))["id"]
    project = (await post("/projects", {"name": "web"}, tenant_id=tenant))["id"]
    outside = (await post("/projects", {"name": "batch"}, tenant_id=tenant))["id"]
    key = (await post(f"/projects/{project}/keys", {"name": "web-key"}))["id"]
    outside_key = (await post(f"/projects/{outside}/keys", {"name": "batch-key"}))["id"]
    provider = (await post("/providers", {"slug": "up", "type": "mock"}, tenant_id=tenant))["id"]
    resource = (await post(f"/providers/{provider}/resources", {"name": "acct"}))["id"]
    model = await post(
        "/models",
        {"name": "chat", "routes": [{"provider": "up", "upstream_model": "x"}]},
        tenant_id=tenant,
    )
    policy = (await post("/policies", {"name": "eu-only"}, tenant_id=tenant))["id"]
    pii = {"name": "pii", "rules": [{"detector": "pii", "action": "mask"}]}
    guardrail = (await post("/guardrails", pii, tenant_id=tenant))["id"]
    member_email = f"member@{slug}.example.com"
    member = await post(
        "/users",
        {"email": member_email, "password": PASSWORD, "tenant_id": tenant, "role": "viewer"},
    )
    request_ids = (f"req-{slug}-web", f"req-{slug}-batch")
    async with session_factory(engine)() as session:
        for request_id, project_id in zip(request_ids, (project, outside), strict=True):
            session.add(
                RequestRecord(
                    request_id=request_id,
                    created_at=utcnow(),
                    tenant_id=tenant,
                    project_id=project_id,
                    endpoint="chat.completions",
                    status_code=200,
                    latency_ms=5.0,
                )
            )
            session.add(
                GuardrailHit(
                    request_id=request_id,
                    seq=0,
                    created_at=utcnow(),
                    tenant_id=tenant,
                    project_id=project_id,
                    key_id="k",
                    policy_id=guardrail,
                    policy="pii",
                    rule="pii",
                    detector="email",
                    action="mask",
                    location="request",
                    field="messages[0].content",
                    count=1,
                    matched_chars=16,
                )
            )
        session.add(
            AuditEntry(
                at=utcnow(),
                actor_kind="token",
                tenant_id=tenant,
                action="seed",
                status_code=200,
                diff={},
            )
        )
        await session.commit()
    job = await queue_job(engine, tenant, "matrix")
    return Side(
        tenant=tenant,
        project=project,
        outside=outside,
        key=key,
        outside_key=outside_key,
        provider=provider,
        provider_slug="up",
        model=model["id"],
        route=model["routes"][0]["id"],
        resource=resource,
        policy=policy,
        guardrail=guardrail,
        member=member["id"],
        member_email=member_email,
        request_id=request_ids[0],
        outside_request_id=request_ids[1],
        job=job,
    )


async def add_account(world: World, caller: str, email: str) -> str:
    """An account of the caller's kind: the flag for a platform admin, else a membership of
    the own tenant with the caller's role (a developer limited to the own project)."""
    async with session_factory(world.engine)() as session:
        user = User(
            email=email,
            password_hash=FAST_PASSWORDS.hash(PASSWORD),
            platform_admin=caller == Role.PLATFORM_ADMIN.value,
        )
        session.add(user)
        await session.flush()
        if caller != Role.PLATFORM_ADMIN.value:
            projects = [world.own.project] if caller == Role.DEVELOPER.value else None
            session.add(
                Membership(
                    user_id=user.id, tenant_id=world.own.tenant, role=caller, project_ids=projects
                )
            )
        await session.commit()
        return user.id


@asynccontextmanager
async def caller_client(world: World, caller: str, email: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client as `caller`: the admin token, no credentials, or a console session (CSRF token
    sent) of the account `email`."""
    if caller == TOKEN:
        async with world.client(Authorization=f"Bearer {ADMIN_TOKEN}") as api:
            yield api
        return
    async with world.client() as api:
        if caller != ANONYMOUS:
            answer = await login(api, email)
            assert answer.status_code == 200, answer.text
            api.headers["X-CSRF-Token"] = answer.json()["csrf_token"]
        yield api


@asynccontextmanager
async def build_world(engine: AsyncEngine) -> AsyncIterator[World]:
    state = AdminState(
        ADMIN_TOKEN, engine=engine, sealer=SEALER, passwords=FAST_PASSWORDS, accounts=OPEN
    )
    oidc = OidcProvider().start()  # single sign-on against a real local provider
    state.sso = SsoConfig(
        issuer=oidc.issuer,
        client_id=oidc.client_id,
        client_secret=oidc.client_secret,
        scopes=("openid", "email"),
        groups_claim="groups",
        role_map={"matrix": [(None, Role.VIEWER)]},
        default_role=None,
        name="Matrix IdP",
        allowed_domains=(),
    )
    state.sso_client = ProviderClient(state.sso)
    try:
        async with _payments(engine) as payments:  # top-ups (billing) against a fake Stripe
            state.payments = payments
            async with _world(state, engine) as world:
                world.oidc = oidc
                yield world
    finally:
        oidc.stop()


@asynccontextmanager
async def _payments(engine: AsyncEngine) -> AsyncIterator[Payments]:
    stripe = FakeStripe().start()
    payments = Payments.from_config(engine, SEALER, stripe_config(stripe))
    try:
        yield payments
    finally:
        await payments.close()
        stripe.stop()


@asynccontextmanager
async def _world(state: AdminState, engine: AsyncEngine) -> AsyncIterator[World]:
    codex = MockCodex().start()  # openai_codex sign-ins against the stand-in issuer
    accounts = CodexAccounts(DatabaseVault(session_factory(engine), SEALER), issuer=codex.issuer)
    providers = ProviderRegistry(
        HttpTransport(Deadlines(asyncio.get_running_loop())), codex=accounts
    )
    state.prober = Prober(engine, SEALER, providers, delays_s=(300.0,))
    app = create_admin(state)
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with httpx.AsyncClient(
        transport=transport, base_url="http://admin", headers=headers
    ) as admin:
        own, other = await _side(admin, engine, "own"), await _side(admin, engine, "other")
        world = World(state, engine, admin, own, other, app, codex=codex)
        async with session_factory(engine)() as session:  # as the recorder does for records
            session.add(UsageRollupDirty(hour=rollups.hour_of(utcnow()), version=1))
            await session.commit()
        for role in Role:
            await add_account(world, role.value, f"{role.value}@example.com")
        try:
            yield world
        finally:
            await providers.close()
            codex.stop()


# --- fixtures (import them into a test module) ---------------------------------------


#: Parametrize a test module's tests with `world` (indirect, module scope) over these; or
#: pair the PostgreSQL world with fewer cases than the SQLite one (it builds slower).
SQLITE = "sqlite"
POSTGRESQL = pytest.param("postgresql", marks=pytest.mark.postgres)
BACKENDS = [SQLITE, POSTGRESQL]


class Worlds:
    """Each backend's world and its signed-in callers, built at the first test that needs
    them and kept to the module's end.

    Why not a module-scoped fixture parametrized by backend: pytest keeps one instance of it
    at a time, so it is torn down and built again at every change of backend, and a random test
    order changes backend at nearly every test (the matrix took 29 minutes instead of 2.5 in
    a random order)."""

    def __init__(self, stack: AsyncExitStack, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._stack = stack
        self._tmp = tmp_path_factory
        self._worlds: dict[str, World] = {}
        self._callers: dict[str, dict[str, httpx.AsyncClient]] = {}

    async def world(self, backend: str) -> World:
        if backend not in self._worlds:
            if backend == SQLITE:
                url = await migrated_sqlite_url(self._tmp.mktemp("matrix"))
            else:
                need_postgres()
                url = await self._stack.enter_async_context(migrated_postgres_database())
            engine = create_engine(url)
            self._stack.push_async_callback(engine.dispose)
            self._worlds[backend] = await self._stack.enter_async_context(build_world(engine))
        return self._worlds[backend]

    async def callers(self, world: World) -> dict[str, httpx.AsyncClient]:
        """One signed-in client per caller in `world` (one of ours)."""
        backend = next(name for name, built in self._worlds.items() if built is world)
        if backend not in self._callers:
            self._callers[backend] = {
                caller: await self._stack.enter_async_context(
                    caller_client(world, caller, f"{caller}@example.com")
                )
                for caller in CALLERS
            }
        return self._callers[backend]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def worlds(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Worlds]:
    async with AsyncExitStack() as stack:
        yield Worlds(stack, tmp_path_factory)


@pytest_asyncio.fixture(loop_scope="module")
async def world(request: pytest.FixtureRequest, worlds: Worlds) -> World:
    """The world on the backend the test is parametrized with (SQLite unless it is)."""
    return await worlds.world(getattr(request, "param", SQLITE))


@pytest_asyncio.fixture(loop_scope="module")
async def callers(world: World, worlds: Worlds) -> dict[str, httpx.AsyncClient]:
    """One signed-in client per caller, in the test's world."""
    return await worlds.callers(world)
