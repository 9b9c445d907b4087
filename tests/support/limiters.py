"""A shared limiter (Redis or PostgreSQL) for a test, on its own keys or database."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from redis.asyncio import Redis

from llmrelay.limits.base import Limiter
from llmrelay.limits.local import LocalLimiter
from llmrelay.limits.postgres import DatabaseLimiter
from llmrelay.limits.redis import RedisLimiter
from tests.conftest import need_postgres, need_redis
from tests.support.migrated import migrated_postgres_database
from tests.support.services import REDIS_URL


@asynccontextmanager
async def started_limiter(kind: str) -> AsyncIterator[Limiter]:
    """ "local", "redis" (keys under a prefix of its own, deleted after) or "database" (a
    migrated database of its own); started, and closed after."""
    if kind == "database":
        need_postgres()
        async with migrated_postgres_database() as url:
            database = DatabaseLimiter(url)
            await database.start()
            try:
                yield database
            finally:
                await database.close()
        return
    if kind == "local":
        local = LocalLimiter()
        await local.start()
        try:
            yield local
        finally:
            await local.close()
        return
    need_redis()
    prefix = f"test:limiter:{uuid.uuid4().hex}:"
    redis = RedisLimiter(REDIS_URL, prefix=prefix, timeout_s=2.0)
    await redis.start()
    try:
        yield redis
    finally:
        await redis.close()
        raw = Redis.from_url(REDIS_URL)
        keys = [k async for k in raw.scan_iter(match=f"{prefix}*")]
        if keys:
            await raw.delete(*keys)
        await raw.aclose()
