"""Running the ASGI app under uvicorn (uvloop + httptools; chosen by bench/, see
docs/performance.md), with graceful shutdown on SIGTERM: stop accepting, let running
requests and streams finish up to LLMRELAY_DRAIN_TIMEOUT_S, flush records, exit 0. With
LLMRELAY_ADMIN_LISTEN a second socket is bound for the control plane (listeners.py)."""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors.multiprocess import Multiprocess

from llmrelay.observability.logging import configure_logging, logging_config
from llmrelay.server_protocol import GuardedHttpToolsProtocol
from llmrelay.settings import Settings

#: The ASGI app, built by each serving process from the environment.
APP = "llmrelay.app:app_from_env"


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
    options: dict[str, Any] = {
        "factory": True,
        "host": host,
        "port": port,
        "workers": workers if workers > 1 else None,
        "loop": "uvloop",
        # httptools, with header and body timeouts and a head size cap (server_protocol.py)
        "http": GuardedHttpToolsProtocol,
        # No WebSocket route exists: "auto" would import the websockets package (and keep it
        # resident) only to refuse upgrades that "none" refuses too.
        "ws": "none",
        "lifespan": "on",
        "proxy_headers": False,  # X-Forwarded-For is judged by LLMRELAY_TRUSTED_PROXIES only
        "access_log": False,
        "log_config": logging_config(settings.log_level),
        "log_level": settings.log_level.lower(),
        "timeout_graceful_shutdown": int(settings.drain_timeout_s),
        "timeout_keep_alive": 75,
        "server_header": False,
        "date_header": False,
    }
    admin = settings.admin_address
    if admin is None and workers == 1:
        uvicorn.run(APP, **options)
    else:
        _run_on_sockets(options, admin)


class _Supervisor(Multiprocess):
    """uvicorn's supervisor of `--workers N`, which also closes its own copy of the listening
    sockets when it stops: else the kernel would still accept connections on them while the
    workers drain, connections no worker would ever serve."""

    def terminate_all(self) -> None:
        for sock in self.sockets:
            sock.close()
        super().terminate_all()


def _run_on_sockets(options: dict[str, Any], admin: tuple[str, int] | None) -> None:
    """What `uvicorn.run` does, with the admin listener's socket (if any) bound beside the
    data plane's: one server, or each of `--workers N`, serves both (listeners.py)."""
    config = uvicorn.Config(APP, **options)
    sockets = [config.bind_socket()]
    if admin is not None:
        admin_config = uvicorn.Config(APP, **{**options, "host": admin[0], "port": admin[1]})
        sockets.append(admin_config.bind_socket())
    if config.workers > 1:
        _Supervisor(config, sockets=sockets).run()
        return
    config.load_app()
    server = uvicorn.Server(config)
    server.run(sockets=sockets)
    if not server.started:
        sys.exit(STARTUP_FAILURE)
