"""Running the ASGI app under uvicorn (uvloop + httptools; chosen by bench/, see
docs/performance.md), with graceful shutdown on SIGTERM: stop accepting, let running
requests and streams finish up to LLMRELAY_DRAIN_TIMEOUT_S, flush records, exit 0."""

from __future__ import annotations

import os
import signal
from types import FrameType

import uvicorn

from llmrelay.observability.logging import configure_logging, logging_config
from llmrelay.settings import Settings


def _ignore(signum: int, frame: FrameType | None) -> None:
    """Uvicorn already shut down gracefully; nothing left to do for the signal."""


def run_server(settings: Settings, *, host: str, port: int, workers: int) -> None:
    # uvicorn handles SIGTERM/SIGINT while serving, then re-raises the signal under the
    # handler that was installed before it started. A no-op handler there turns the
    # finished graceful shutdown into a normal exit with status 0.
    signal.signal(signal.SIGTERM, _ignore)
    # The workers build their settings from the environment: each learns how many share
    # the in-process limits (see limits/local.py).
    os.environ["LLMRELAY_WORKERS"] = str(workers)
    # JSON lines from the first one: uvicorn's own (and its workers') go through the same
    # handler as ours instead of its plain-text default (observability/logging.py).
    configure_logging(settings.log_level)
    uvicorn.run(
        "llmrelay.app:app_from_env",
        factory=True,
        host=host,
        port=port,
        workers=workers if workers > 1 else None,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        proxy_headers=False,  # X-Forwarded-For is judged by LLMRELAY_TRUSTED_PROXIES only
        access_log=False,
        log_config=logging_config(settings.log_level),
        log_level=settings.log_level.lower(),
        timeout_graceful_shutdown=int(settings.drain_timeout_s),
        timeout_keep_alive=75,
        server_header=False,
        date_header=False,
    )
