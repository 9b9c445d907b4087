"""Re-sealing every sealed value under the current key, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.store.bootstrap import current_generation, ensure_default_tenant
from llmrelay.store.crypto import Sealer, key_id_of
from llmrelay.store.db import session_factory
from llmrelay.store.models import Provider
from llmrelay.store.rotation import RotationError, RotationReport, rotate
from llmrelay.store.sealed import SEALED_COLUMNS, SealedColumn

OLD = Sealer("old-secret-key-of-reasonable-length-0001")
NEW_KEY = "new-secret-key-of-reasonable-length-0002"
NEW = Sealer(NEW_KEY)
ROTATING = Sealer(NEW_KEY, ["old-secret-key-of-reasonable-length-0001"])
STRANGER = Sealer("a-stranger-key-of-reasonable-length-0003")


async def _seed(engine: AsyncEngine, sealed: dict[str, tuple[Sealer, str] | None]) -> None:
    """Providers by id: the Sealer and context their credentials are sealed with, or None."""
    async with session_factory(engine).begin() as session:
        tenant = await ensure_default_tenant(session)
        for provider_id, how in sealed.items():
            row = Provider(id=provider_id, tenant_id=tenant.id, slug=provider_id, type="mock")
            if how is not None:
                sealer, context = how
                row.credentials_sealed = sealer.seal(b'{"api_key": "sk-1"}', context=context)
                row.credentials_key_id = sealer.key_id
            session.add(row)


async def _rows(engine: AsyncEngine) -> dict[str, tuple[str | None, str | None]]:
    async with session_factory(engine)() as session:
        rows = await session.execute(
            select(Provider.id, Provider.credentials_sealed, Provider.credentials_key_id)
        )
        return {row.id: (row.credentials_sealed, row.credentials_key_id) for row in rows}


async def _generation(engine: AsyncEngine) -> int:
    async with session_factory(engine)() as session:
        return await current_generation(session)


async def _rotate(
    engine: AsyncEngine,
    sealer: Sealer = ROTATING,
    columns: tuple[SealedColumn, ...] = SEALED_COLUMNS,
    dry_run: bool = False,
) -> RotationReport:
    async with session_factory(engine).begin() as session:
        return await rotate(session, sealer, columns, dry_run=dry_run)


async def test_old_values_are_resealed_once_and_the_generation_moves(
    engine: AsyncEngine,
) -> None:
    await _seed(engine, {"p-a": (OLD, "p-a"), "p-b": (NEW, "p-b"), "p-c": None})
    before = await _rows(engine)
    generation = await _generation(engine)

    report = await _rotate(engine)

    assert [(c.column, c.resealed, c.current) for c in report.columns] == [
        ("providers.credentials_sealed", 1, 1),
        ("provider_resources.credentials_sealed", 0, 0),  # no provider has resources here
        ("users.totp_secret_sealed", 0, 0),  # no console user has TOTP here
        ("projects.webhook_secret_sealed", 0, 0),  # nor any webhook a secret, nor a job a body
        ("wallets.payment_method_sealed", 0, 0),
        ("email_outbox.body_sealed", 0, 0),
        ("codex_accounts.tokens_sealed", 0, 0),  # nor any ChatGPT account its tokens
        ("jobs.payload_sealed", 0, 0),
        ("jobs.result_sealed", 0, 0),
    ]
    assert report.generation == generation + 1 == await _generation(engine)
    after = await _rows(engine)
    sealed, key_id = after["p-a"]
    assert sealed is not None and sealed != before["p-a"][0]
    assert key_id == key_id_of(sealed) == NEW.key_id
    assert NEW.open(sealed, context="p-a") == b'{"api_key": "sk-1"}'  # no old key needed
    assert after["p-b"] == before["p-b"]  # already current: untouched
    assert after["p-c"] == (None, None)

    again = await _rotate(engine)  # idempotent: nothing written, the generation stays
    assert again.resealed == 0 and again.generation is None
    assert await _rows(engine) == after
    assert await _generation(engine) == generation + 1


async def test_an_unknown_key_aborts_naming_the_key_and_row_and_changes_nothing(
    engine: AsyncEngine,
) -> None:
    # "p-a" sorts first: a one-pass rotation would have rewritten it before failing on "p-z"
    await _seed(engine, {"p-a": (OLD, "p-a"), "p-z": (STRANGER, "p-z")})
    before, generation = await _rows(engine), await _generation(engine)
    with pytest.raises(RotationError) as caught:
        await _rotate(engine)
    message = str(caught.value)
    assert STRANGER.key_id in message
    assert "providers.credentials_sealed of row id=p-z" in message
    assert await _rows(engine) == before
    assert await _generation(engine) == generation


async def test_a_value_that_fails_authentication_aborts(engine: AsyncEngine) -> None:
    await _seed(engine, {"p-a": (OLD, "another-row")})  # sealed for another context
    before = await _rows(engine)
    with pytest.raises(RotationError, match=r"row id=p-a .*cannot be opened"):
        await _rotate(engine)
    assert await _rows(engine) == before


async def test_a_dry_run_counts_but_writes_nothing(engine: AsyncEngine) -> None:
    await _seed(engine, {"p-a": (OLD, "p-a")})
    before, generation = await _rows(engine), await _generation(engine)
    report = await _rotate(engine, dry_run=True)
    assert report.resealed == 1 and report.generation is None
    assert await _rows(engine) == before
    assert await _generation(engine) == generation


async def test_a_registered_column_uses_its_own_context_function(engine: AsyncEngine) -> None:
    """What another sealed column registers: here the providers table again, sealed with a
    context derived from the id (as a TOTP secret sealed with `user:<id>` would be)."""
    spec = SealedColumn(
        table="providers",
        id_column="id",
        sealed_column="credentials_sealed",
        context=lambda row_id: f"user:{row_id}",
    )
    await _seed(engine, {"u-1": (OLD, "user:u-1")})
    report = await _rotate(engine, columns=(spec,))
    assert report.resealed == 1
    sealed, key_id = (await _rows(engine))["u-1"]
    assert sealed is not None and NEW.open(sealed, context="user:u-1")
    assert key_id == OLD.key_id  # no key_id_column registered: left alone
