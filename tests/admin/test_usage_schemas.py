"""The usage routes' bodies are documented (admin/usage_schemas.py) and the documented models
describe what the queries return: the same keys, the same values, nothing dropped."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.usage_query import RECORD_FIELDS
from llmrelay.admin.usage_schemas import (
    AttemptOut,
    PayloadOut,
    RequestDetail,
    RequestRecordOut,
    UsageFigures,
    UsagePoint,
)
from llmrelay.store import rollups
from llmrelay.store.db import session_factory
from llmrelay.store.models import RequestAttempt, RequestPayload, RequestRecord, UsageRollupDirty
from llmrelay.store.types import utcnow

FIGURES = set(UsageFigures.__annotations__)


def test_the_record_model_has_every_column_the_query_returns() -> None:
    """A column added to request_records must be added to the model too (else dropped)."""
    assert tuple(RequestRecordOut.model_fields) == RECORD_FIELDS
    assert set(RequestDetail.model_fields) == {*RECORD_FIELDS, "attempt_log", "payload"}


async def test_the_usage_routes_document_their_bodies(anonymous: httpx.AsyncClient) -> None:
    spec = (await anonymous.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]

    def body(path: str) -> dict[str, Any]:
        ok = spec["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]
        found: dict[str, Any] = schemas[ok["schema"]["$ref"].rsplit("/", 1)[1]]
        return found

    summary = body("/usage/summary")
    assert set(summary["required"]) == FIGURES
    assert {"requests", "input_tokens", "output_tokens", "cost_usd"} <= FIGURES
    assert set(body("/usage/timeseries")["required"]) == {"bucket", "group_by", "data"}
    point = schemas["UsagePoint"]
    assert {"group", "group_id"} <= set(point["properties"])
    assert not {"group", "group_id"} & set(point["required"])
    assert set(body("/requests")["required"]) == {"data", "next_cursor"}
    assert set(body("/requests/{request_id}")["required"]) >= {"attempt_log", "payload"}


async def _record(engine: AsyncEngine, project_id: str) -> None:
    now = utcnow()
    async with session_factory(engine)() as session:
        session.add(
            RequestRecord(
                request_id="req-1",
                created_at=now,
                project_id=project_id,
                endpoint="chat.completions",
                virtual_model="chat",
                provider="up",
                status_code=200,
                latency_ms=12.5,
                ttfb_ms=3.0,
                prompt_tokens=10,
                completion_tokens=4,
                input_tokens=10,
                output_tokens=4,
                cost_micros=18,
                usage_source="reported",
            )
        )
        session.add(
            RequestAttempt(
                request_id="req-1",
                attempt=1,
                created_at=now,
                provider="up",
                upstream_model="m1",
                kind="first",
                status_code=None,
                outcome="timeout",
                latency_ms=5.0,
            )
        )
        session.add(
            RequestPayload(
                request_id="req-1",
                created_at=now,
                request_body=b'{"model":"chat"}',
                response_body=b"\xff\xfe",
                request_bytes=16,
                response_bytes=2,
            )
        )
        session.add(UsageRollupDirty(hour=rollups.hour_of(now), version=1))
        await session.commit()


async def test_the_bodies_keep_every_key_and_value(
    admin: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    project = (await admin.post("/projects", json={"name": "web"})).json()["id"]
    await _record(engine, project)
    since = (utcnow() - timedelta(days=1)).isoformat()

    summary = (await admin.get("/usage/summary", params={"since": since})).json()
    assert set(summary) == FIGURES
    assert (summary["requests"], summary["input_tokens"], summary["cost_micros"]) == (1, 10, 18)
    assert summary["cost_usd"] == 18 / 1_000_000

    head = set(UsagePoint.__annotations__) - {"group", "group_id"}
    plain = (await admin.get("/usage/timeseries", params={"since": since})).json()
    assert (plain["bucket"], plain["group_by"]) == ("hour", None)
    assert [set(p) for p in plain["data"]] == [head]  # ungrouped: no group keys at all
    by_model = (await admin.get("/usage/timeseries", params={"group_by": "model"})).json()
    assert set(by_model["data"][0]) == head | {"group"}
    assert by_model["data"][0]["group"] == "chat"
    by_project = (await admin.get("/usage/timeseries", params={"group_by": "project"})).json()
    point = by_project["data"][0]
    assert (point["group"], point["group_id"]) == ("web", project)
    assert point["latency_ms"]["p50"] is not None

    page = (await admin.get("/requests")).json()
    assert page["next_cursor"] is None
    (row,) = page["data"]
    assert tuple(row) == RECORD_FIELDS
    assert (row["latency_ms"], row["stream"], row["created_at"][-1]) == (12.5, False, "Z")

    detail = (await admin.get("/requests/req-1")).json()
    assert {k: detail[k] for k in RECORD_FIELDS} == row
    (attempt,) = detail["attempt_log"]
    assert set(attempt) == set(AttemptOut.model_fields)
    assert (attempt["status_code"], attempt["outcome"]) == (None, "timeout")
    assert set(detail["payload"]) == set(PayloadOut.model_fields)
    assert detail["payload"]["request_encoding"] == "utf-8"
    assert detail["payload"]["response_encoding"] == "base64"
