"""Two replicas never spend one account's refresh token twice (docs/codex.md, "Tokens"), on
real PostgreSQL: the refresh takes a row lock on the account (SELECT ... FOR UPDATE) and
compares its token generation, so a replica that read the same due tokens waits for the
first one's refresh and takes the tokens it stored instead of asking the issuer again (the
stand-in issuer, like the real one, refuses a spent refresh token: `refresh_token_reused`).

Each replica is its own CodexAccounts over its own engine (its own connections), as two
gateway processes are; the issuer is the stand-in ChatGPT issuer over real HTTP, slowed so
the second replica arrives while the first still holds the lock."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import replace

import orjson
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.codex_vault import DatabaseVault, sign_in
from llmrelay.config.apply import apply_config
from llmrelay.config.loader import parse_config
from llmrelay.providers.codex.accounts import CodexAccounts
from llmrelay.providers.codex.oauth import Tokens
from llmrelay.snapshot.builder import provider_snap
from llmrelay.snapshot.model import ProviderSnap
from llmrelay.store.crypto import Sealer
from llmrelay.store.db import create_engine, session_factory
from llmrelay.store.models import Provider
from llmrelay.store.models_codex import CodexAccount
from tests.support.mock_codex import CLIENT_ID, MockCodex

pytestmark = pytest.mark.postgres

SEALER = Sealer("codex-refresh-lock-tests-secret-key-0123456789")
CEILING_S = 60.0


@pytest.fixture
def codex() -> Iterator[MockCodex]:
    server = MockCodex(token_ttl_s=120).start()  # under the 300 s margin: due at once
    yield server
    server.stop()


async def _signed_in(engine: AsyncEngine, codex: MockCodex) -> ProviderSnap:
    """The provider signed in, as the attempts to its account's resource see it."""
    yaml = f"""
providers:
  - {{slug: codex, type: openai_codex, base_url: "{codex.backend}"}}
models:
  - name: codex
    routes: [{{provider: codex, upstream_model: gpt-5-codex}}]
"""
    async with session_factory(engine)() as session, session.begin():
        await apply_config(session, parse_config(yaml, "gw.yaml", {}), SEALER, source="gw.yaml")
        provider = (await session.scalars(select(Provider))).one()
        tokens = Tokens.from_json(orjson.dumps(codex.tokens()))
        _, resource = await sign_in(
            session, SEALER, provider.id, tokens, issuer=codex.issuer, client_id=CLIENT_ID
        )
        return replace(provider_snap(provider, SEALER), resource_id=resource.id)


async def _until(check: object, what: str) -> None:
    ends = time.monotonic() + CEILING_S
    while not check():  # type: ignore[operator]
        if time.monotonic() > ends:
            raise AssertionError(f"not within {CEILING_S}s: {what}")
        await asyncio.sleep(0.01)


async def test_two_replicas_refresh_one_account_once(
    postgres_engine: AsyncEngine, postgres_url: str, codex: MockCodex
) -> None:
    snap = await _signed_in(postgres_engine, codex)
    codex.token_delay_s = 1.0  # the first refresh holds the row lock this long
    engines = [create_engine(postgres_url) for _ in range(2)]
    replicas = [
        CodexAccounts(DatabaseVault(session_factory(engine), SEALER), issuer=codex.issuer)
        for engine in engines
    ]
    try:
        first = asyncio.create_task(replicas[0].account(snap))
        # the first replica is at the issuer, inside the lock: the second reads the same
        # due tokens (generation 1) and refreshes too
        await _until(lambda: "refresh_token" in codex.grants, "the first refresh begun")
        second = await replicas[1].account(snap)
        held = await first
    finally:
        for replica in replicas:
            await replica.close()
        for engine in engines:
            await engine.dispose()
    assert codex.grants.count("refresh_token") == 1  # the issuer was asked once
    assert codex.refreshed == [codex.account_id]
    assert held.generation == second.generation == 2
    assert held.tokens == second.tokens  # the second took the tokens the first stored
    async with session_factory(postgres_engine)() as session:
        row = (await session.scalars(select(CodexAccount))).one()
        assert row.token_generation == 2
        stored = Tokens.from_json(SEALER.open(row.tokens_sealed, context=row.id))
    assert stored == held.tokens


async def test_a_replica_holding_old_tokens_takes_the_stored_ones_after_a_401(
    postgres_engine: AsyncEngine, postgres_url: str, codex: MockCodex
) -> None:
    """Replica A refreshed; replica B, still holding the spent tokens, is refused by the
    backend and asks for newer ones: it finds A's in the database (generation moved) and
    spends no refresh token."""
    snap = await _signed_in(postgres_engine, codex)
    engines = [create_engine(postgres_url) for _ in range(2)]
    a, b = (
        CodexAccounts(DatabaseVault(session_factory(engine), SEALER), issuer=codex.issuer)
        for engine in engines
    )
    try:
        b.margin_s = 0  # B does not find them due: it serves the tokens it read
        old = await b.account(snap)
        assert old.generation == 1
        refreshed = await a.account(snap)  # A refreshes (due under its margin)
        assert refreshed.generation == 2
        newer = await b.refreshed(snap, old)  # the backend refused B's old token
    finally:
        for replica in (a, b):
            await replica.close()
        for engine in engines:
            await engine.dispose()
    assert newer.tokens == refreshed.tokens
    assert codex.grants.count("refresh_token") == 1
