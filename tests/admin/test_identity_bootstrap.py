"""The first platform-admin account, created once at start-up, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.identity.bootstrap import DEVELOPMENT_EMAIL, ensure_bootstrap_admin
from llmrelay.settings import Settings
from tests.admin.access_support import FAST_PASSWORDS


async def _users(engine: AsyncEngine) -> list[tuple[str, bool]]:
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT email, platform_admin FROM users"))
        return [(r[0], bool(r[1])) for r in rows]


async def test_created_once_from_the_settings(engine: AsyncEngine) -> None:
    settings = Settings(
        bootstrap_admin_email="Root@Example.com", bootstrap_admin_password="a long bootstrap pw"
    )
    made = await ensure_bootstrap_admin(engine, settings, FAST_PASSWORDS)
    assert made is not None and made.email == "root@example.com"
    assert made.generated_password is None
    assert await ensure_bootstrap_admin(engine, settings, FAST_PASSWORDS) is None
    other = Settings(bootstrap_admin_email="b@example.com", bootstrap_admin_password="x" * 12)
    assert await ensure_bootstrap_admin(engine, other, FAST_PASSWORDS) is None
    assert await _users(engine) == [("root@example.com", True)]
    async with engine.connect() as conn:
        stored = (await conn.execute(text("SELECT password_hash FROM users"))).scalar_one()
    assert stored.startswith("$argon2id$") and FAST_PASSWORDS.verify(stored, "a long bootstrap pw")


async def test_development_generates_and_prints_a_password(
    engine: AsyncEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    made = await ensure_bootstrap_admin(engine, Settings(), FAST_PASSWORDS)
    assert made is not None and made.email == DEVELOPMENT_EMAIL
    assert made.generated_password and len(made.generated_password) >= 20
    printed = capsys.readouterr().err
    assert made.generated_password in printed and DEVELOPMENT_EMAIL in printed
    assert await ensure_bootstrap_admin(engine, Settings(), FAST_PASSWORDS) is None
    assert capsys.readouterr().err == ""  # printed once only


async def test_production_without_a_password_creates_nothing(engine: AsyncEngine) -> None:
    settings = Settings(env="production", bootstrap_admin_email="root@example.com")
    assert await ensure_bootstrap_admin(engine, settings, FAST_PASSWORDS) is None
    assert await _users(engine) == []
