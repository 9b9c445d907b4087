"""API keys' last_used_at, written by the recorder from its batches, on SQLite and PostgreSQL."""

from __future__ import annotations

import time

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.recorder import Recorder
from llmrelay.store.db import session_factory
from llmrelay.store.key_use import KeyUse
from llmrelay.store.models import ApiKey
from tests.config.test_apply import _apply
from tests.config.test_loader import GOOD

TWO_KEYS = GOOD.replace(
    "expires_at: 2030-01-01T00:00:00Z\n",
    "expires_at: 2030-01-01T00:00:00Z\n      - {name: idle, key: idle-key-0123456789abcdef}\n",
)


def _record(request_id: str, key_id: str | None, created: float) -> CallRecord:
    record = CallRecord(request_id, "chat.completions", time.perf_counter())
    record.key_id, record.created = key_id, created
    return record


async def _keys(engine: AsyncEngine) -> list[ApiKey]:
    async with session_factory(engine)() as session:
        return list(await session.scalars(select(ApiKey).order_by(ApiKey.name)))


async def _record_all(engine: AsyncEngine, records: list[CallRecord]) -> Recorder:
    recorder = Recorder(engine, gather_s=0.01)
    recorder.start()
    for record in records:
        recorder.record(record.row(1.0))
    await recorder.stop(timeout_s=10)
    assert recorder.written == len(records)
    return recorder


async def test_last_used_at_is_the_newest_record_and_never_moves_back(
    engine: AsyncEngine,
) -> None:
    await _apply(engine, TWO_KEYS)
    used, unused = (await _keys(engine))[:2]
    assert used.last_used_at is None
    now = time.time()
    # Out of order within the batch (records queue as requests end), and one without a key.
    await _record_all(
        engine,
        [
            _record("r1", used.id, now - 30),
            _record("r2", used.id, now - 10),
            _record("r3", used.id, now - 20),
            _record("r4", None, now),
        ],
    )
    after = {key.id: key for key in await _keys(engine)}
    stamp = after[used.id].last_used_at
    assert stamp is not None and abs(stamp.timestamp() - (now - 10)) < 0.001
    assert after[unused.id].last_used_at is None
    # A use is not a change: no new version (no If-Match goes stale), no updated_at.
    assert (after[used.id].version, after[used.id].updated_at) == (used.version, used.updated_at)

    # An older record written later (a replayed spool) leaves it; a newer one moves it.
    await _record_all(engine, [_record("r5", used.id, now - 100)])
    assert (await _keys(engine))[0].last_used_at == stamp
    await _record_all(engine, [_record("r6", used.id, now + 5)])
    moved = (await _keys(engine))[0].last_used_at
    assert moved is not None and abs(moved.timestamp() - (now + 5)) < 0.001


async def test_one_update_per_key_per_batch_and_unwritten_times_carry_over(
    engine: AsyncEngine,
) -> None:
    use = KeyUse(engine, key_at=0, time_at=1, convert_time=float)
    sent = use.statements([("b", 2.0), ("a", 1.0), ("b", 3.0), (None, 9.0), ("a", 0.5)])
    updates = [params for sql, params in sent if sql == use.sql]
    if engine.dialect.name == "postgresql":  # one executemany, after a lock timeout
        assert len(sent) == 2 and "lock_timeout" in sent[0][0]
        assert updates == [[(1.0, "a"), (3.0, "b")]]
    else:
        assert updates == [(1.0, "a", 1.0), (3.0, "b", 3.0)]
    # Not written (the database was away): the next batch carries those times too.
    assert use.statements([("c", 4.0), ("a", 0.1)])
    assert use.pending == {"a": 1.0, "b": 3.0, "c": 4.0}
    use.written()
    assert use.statements([]) == [] and use.pending == {}
