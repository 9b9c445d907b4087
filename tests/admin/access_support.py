"""Helpers the identity and access tests share: users and memberships written straight to the
real database, and console clients signed in through the real /auth/login."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pyotp
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.app import create_admin
from llmrelay.admin.identity.credentials import Passwords
from llmrelay.admin.state import AdminState
from llmrelay.store.db import session_factory
from llmrelay.store.models import Project, Tenant
from llmrelay.store.models_access import Membership, User

PASSWORD = "correct horse battery staple"
#: Cheap argon2 parameters: the tests sign in hundreds of times (the defaults take ~0.5 s of
#: one core per hash). A hash made with them verifies with any Passwords.
FAST_PASSWORDS = Passwords(time_cost=1, memory_cost=1024, parallelism=1)


@pytest.fixture(autouse=True)
def fast_passwords(admin_state: AdminState) -> None:
    """Import into a test module to make its admin app hash cheaply."""
    admin_state.passwords = FAST_PASSWORDS


async def add_tenant(engine: AsyncEngine, slug: str, *, require_2fa: bool = False) -> str:
    async with session_factory(engine)() as session:
        tenant = Tenant(slug=slug, name=slug.title(), require_2fa=require_2fa)
        session.add(tenant)
        await session.commit()
        return tenant.id


async def add_project(engine: AsyncEngine, tenant_id: str, name: str) -> str:
    async with session_factory(engine)() as session:
        project = Project(tenant_id=tenant_id, name=name)
        session.add(project)
        await session.commit()
        return project.id


async def add_user(
    engine: AsyncEngine,
    email: str,
    roles: Mapping[str, str] | None = None,
    *,
    platform_admin: bool = False,
    projects: Mapping[str, list[str]] | None = None,
    password: str = PASSWORD,
) -> str:
    """A user with a membership per tenant in `roles` (tenant id -> role name)."""
    async with session_factory(engine)() as session:
        user = User(
            email=email,
            password_hash=FAST_PASSWORDS.hash(password),
            platform_admin=platform_admin,
        )
        session.add(user)
        await session.flush()
        for tenant_id, role in (roles or {}).items():
            project_ids = (projects or {}).get(tenant_id)
            session.add(
                Membership(user_id=user.id, tenant_id=tenant_id, role=role, project_ids=project_ids)
            )
        await session.commit()
        return user.id


def client(state: AdminState, **headers: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=create_admin(state))
    return httpx.AsyncClient(transport=transport, base_url="http://admin", headers=headers)


async def login(
    api: httpx.AsyncClient, email: str, password: str = PASSWORD, **extra: str
) -> httpx.Response:
    return await api.post("/auth/login", json={"email": email, "password": password, **extra})


@asynccontextmanager
async def console(
    state: AdminState, email: str, password: str = PASSWORD, **extra: str
) -> AsyncIterator[httpx.AsyncClient]:
    """A client signed in as `email`, sending its CSRF token on every request."""
    async with client(state) as api:
        answer = await login(api, email, password, **extra)
        assert answer.status_code == 200, answer.text
        api.headers["X-CSRF-Token"] = answer.json()["csrf_token"]
        yield api


def totp_code(secret: str, steps_ahead: int = 0) -> str:
    """The code of the current time step, or of one `steps_ahead` (one is still accepted)."""
    return pyotp.TOTP(secret).at(time.time() + 30 * steps_ahead)


async def audit_rows(engine: AsyncEngine, **where: Any) -> list[dict[str, Any]]:
    clauses = " AND ".join(f"{name} = :{name}" for name in where) or "1 = 1"
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(f"SELECT * FROM audit_log WHERE {clauses} ORDER BY id"), where
        )
        return [dict(row._mapping) for row in rows]
