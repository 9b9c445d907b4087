"""Running the ASGI app under uvicorn (uvloop + httptools; chosen by bench/, see
docs/performance.md), with graceful shutdown on SIGTERM: stop accepting, let running
requests and streams finish up to LLMRELAY_DRAIN_TIMEOUT_S, flush records, exit 0."""

from __future__ import annotations

import uvicorn

from llmrelay.settings import Settings


def run_server(settings: Settings, *, host: str, port: int, workers: int) -> None:
    uvicorn.run(
        "llmrelay.app:app_from_env",
        factory=True,
        host=host,
        port=port,
        workers=workers if workers > 1 else None,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_level=settings.log_level.lower(),
        timeout_graceful_shutdown=int(settings.drain_timeout_s),
        timeout_keep_alive=75,
        server_header=False,
        date_header=False,
    )
