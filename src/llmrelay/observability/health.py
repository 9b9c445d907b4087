"""`/livez`, `/readyz`, `/healthz` and `/metrics` for probes and Prometheus."""

from __future__ import annotations

import asyncio
import hmac

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.types import Receive, Scope, Send

from llmrelay.observability.metrics import Metrics
from llmrelay.snapshot.holder import SnapshotHolder
from llmrelay.snapshot.reload import LiveReload

_DB_CHECK_TIMEOUT_S = 2.0


async def _send(send: Send, status: int, body: bytes, content_type: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type), (b"cache-control", b"no-store")],
        }
    )
    await send({"type": "http.response.body", "body": body})


class Health:
    def __init__(self, metrics: Metrics, metrics_token: str | None) -> None:
        self.engine: AsyncEngine | None = None
        self.snapshots: SnapshotHolder | None = None
        #: Live reload (the config signal listener), for the details of `/readyz`.
        self.live_reload: LiveReload | None = None
        self._metrics = metrics
        self._metrics_token = metrics_token

    async def livez(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _send(send, 200, b'{"status":"ok"}', b"application/json")

    async def readyz(self, scope: Scope, receive: Receive, send: Send) -> None:
        database = await self._database_ok()
        snapshots = self.snapshots
        loaded = snapshots is not None and snapshots.loaded
        report: dict[str, object] = {
            "status": "ok" if database and loaded else "unavailable",
            "database": "ok" if database else "unreachable",
            "snapshot": "loaded" if loaded else "missing",
        }
        if snapshots is not None and loaded:
            report["snapshot_generation"] = snapshots.current.generation
            report["snapshot_age_s"] = round(snapshots.age_s(), 3)
        if snapshots is not None and snapshots.last_error:
            # The newest generation could not be built: the one above is still served.
            report["snapshot_last_error"] = snapshots.last_error
            report["snapshot_failed_generation"] = snapshots.failed_generation
            report["snapshot_build_failures"] = snapshots.failed_builds
        if self.live_reload is not None:
            report["config_signal"] = self.live_reload.describe()
        await _send(
            send, 200 if database and loaded else 503, orjson.dumps(report), b"application/json"
        )

    async def metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._metrics_token is not None and not self._authorised(scope):
            await _send(send, 401, b'{"error":"metrics need a bearer token"}', b"application/json")
            return
        await _send(
            send, 200, generate_latest(self._metrics.registry), CONTENT_TYPE_LATEST.encode()
        )

    def _authorised(self, scope: Scope) -> bool:
        expected = f"Bearer {self._metrics_token}".encode()
        for name, value in scope["headers"]:
            if name == b"authorization":
                return hmac.compare_digest(value, expected)
        return False

    async def _database_ok(self) -> bool:
        if self.engine is None:
            return False
        try:
            async with asyncio.timeout(_DB_CHECK_TIMEOUT_S), self.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except Exception:  # noqa: BLE001 - any failure means "not ready"
            return False
        return True
