"""What mail tests share: settings for an SMTP sink, the mail and alert jobs run in process by a
real job runner, the outbox as stored, and the token a mailed link carries."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.jobs.registry import job_kinds
from llmrelay.jobs.runner import JobRunner, RunnerOptions
from llmrelay.mail.outbox import open_body
from llmrelay.settings import Settings
from llmrelay.store.crypto import Sealer

FAST = RunnerOptions(concurrency=4, lease_s=5.0, poll_s=0.05, housekeeping_s=0.2)
_TOKEN = re.compile(r"[?&]token=([A-Za-z0-9_-]+)")


@dataclass(frozen=True)
class MailServices:
    """What the mail and alert jobs read from the process's services."""

    settings: Settings


def mail_settings(smtp_url: str | None, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "smtp_url": smtp_url,
        "mail_from": "llmrelay <noreply@gateway.example>",
        "mail_retry_base_s": 0.0,
        "smtp_timeout_s": 5.0,
        "public_url": "https://console.example",
    }
    return Settings(**(values | overrides))


def runner(engine: AsyncEngine, sealer: Sealer, settings: Settings) -> JobRunner:
    """Every job kind of this version, as `serve` runs them (no periodic schedules: tests
    queue what they run)."""
    return JobRunner(
        engine, job_kinds(), sealer=sealer, services=MailServices(settings), options=FAST
    )


async def outbox(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT * FROM email_outbox ORDER BY created_at, id"))
        return [dict(row._mapping) for row in rows]


async def mail_text(engine: AsyncEngine, sealer: Sealer, to: str, kind: str) -> str:
    """The text of the last mail of `kind` to `to`, opened from the outbox."""
    rows = [r for r in await outbox(engine) if r["to_address"] == to and r["kind"] == kind]
    assert rows, f"no {kind} mail to {to}"
    row = rows[-1]
    return open_body(sealer, row["id"], row["body_sealed"]).text


def token_in(text_with_link: str) -> str:
    found = _TOKEN.search(text_with_link)
    assert found is not None, f"no link with a token in: {text_with_link!r}"
    return found.group(1)
