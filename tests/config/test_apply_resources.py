"""Provider resources in the YAML: applied as the whole set (added, changed, removed by
name), idempotent, their keys sealed under their own ids, and left alone by a file that
does not list them."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.store.db import session_factory
from llmrelay.store.models import ProviderResource
from tests.config.test_apply import SEALER, _apply, _dump

ENV = {"KEY_A": "sk-account-a-0000000000aaaa", "KEY_B": "sk-account-b-0000000000bbbb"}


def _file(resources: str | None) -> str:
    listed = "" if resources is None else f"\n    resources: {resources}"
    return f"""
providers:
  - slug: pool
    type: openai{listed}
models:
  - name: pooled
    routes: [{{provider: pool, upstream_model: gpt-4o-mini}}]
"""


async def _stored(engine: AsyncEngine) -> list[tuple[str, int, int | None, bool]]:
    async with session_factory(engine)() as session:
        rows = await session.scalars(select(ProviderResource).order_by(ProviderResource.name))
        return [(r.name, r.priority, r.rpm, r.disabled) for r in rows]


async def test_resources_apply_as_a_whole_set(engine: AsyncEngine) -> None:
    both = (
        "[{name: a, api_key: '${KEY_A}', rpm: 10},"
        " {name: b, api_key: '${KEY_B}', priority: 1, disabled: true}]"
    )
    first = await _apply(engine, _file(both), ENV)
    assert "created provider pool" in first.changes
    assert await _stored(engine) == [("a", 0, 10, False), ("b", 1, None, True)]
    everything = repr(await _dump(engine))
    assert ENV["KEY_A"] not in everything and ENV["KEY_B"] not in everything
    async with session_factory(engine)() as session:
        row = await session.scalar(select(ProviderResource).where(ProviderResource.name == "a"))
        assert row is not None and row.credentials_sealed is not None
        assert SEALER.open(row.credentials_sealed, context=row.id) == (
            b'{"api_key":"sk-account-a-0000000000aaaa","headers":{}}'
        )

    again = await _apply(engine, _file(both), ENV)
    assert not again.changed  # idempotent: nothing re-sealed, the generation stays

    untouched = await _apply(engine, _file(None), ENV)  # not listed: left as stored
    assert not untouched.changed
    assert [name for name, *_ in await _stored(engine)] == ["a", "b"]

    fewer = await _apply(engine, _file("[{name: b, api_key: '${KEY_B}', priority: 2}]"), ENV)
    assert "updated provider pool (resources)" in fewer.changes
    assert await _stored(engine) == [("b", 2, None, False)]
