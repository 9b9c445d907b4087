"""Structured JSON logs on stderr (structlog), one line per event, credentials redacted.

Two sources write lines: the gateway's own structlog loggers, and the standard library's
`logging` (uvicorn, aiohttp, SQLAlchemy, asyncio...). Both go through the same processors
(level, timestamp, request id, exception text, redaction) and the same JSON renderer, so every
line on stderr is one JSON object and no line escapes redaction.
"""

from __future__ import annotations

import logging
import logging.config
import sys
from contextvars import ContextVar
from typing import Any

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from llmrelay.observability.redact import redact_processor

#: The id of the request being handled, set once at ingress (gateway.entry.GatewayApp for the data
#: plane, gateway.ingress.IngressMiddleware for the rest) and read by `add_request_id`.
#:
#: A ContextVar of our own rather than `structlog.contextvars.bind_contextvars`: setting it
#: costs about 0.17 us per request against 0.45 us (bind_contextvars builds the variable's
#: name and looks it up each time), and the data plane pays it on every request while only
#: the rare request that logs reads it. Uvicorn runs each request in its own task, whose
#: context is a copy taken when the task starts, so nothing needs resetting: a later request
#: on the same connection starts without the previous id (tests/observability).
REQUEST_ID: ContextVar[str | None] = ContextVar("llmrelay_request_id", default=None)


def add_request_id(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    """Put the current request's id on the line (an explicit `request_id=` wins). Lines
    logged outside a request (start-up, background tasks) have none."""
    request_id = REQUEST_ID.get()
    if request_id is not None and "request_id" not in event_dict:
        event_dict["request_id"] = request_id
    return event_dict


def _shared_processors() -> list[Processor]:
    """What both structlog's and the standard library's lines get before rendering."""
    return [
        structlog.contextvars.merge_contextvars,
        add_request_id,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]


def _final_processors() -> list[Processor]:
    """Exception text first, so that redaction sees it; redaction last before rendering."""
    return [
        structlog.processors.format_exc_info,
        redact_processor,
        structlog.processors.JSONRenderer(),
    ]


def stdlib_formatter() -> structlog.stdlib.ProcessorFormatter:
    """The formatter of the standard library's handler (a factory named in `logging_config`,
    so uvicorn's worker processes build it from the config too)."""
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*_shared_processors(), structlog.stdlib.add_logger_name],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *_final_processors(),
        ],
    )


def _level(level: str) -> int:
    numeric = logging.getLevelName(level.upper())
    return numeric if isinstance(numeric, int) else logging.INFO


def logging_config(level: str) -> dict[str, Any]:
    """The standard library's configuration (`logging.config.dictConfig`), also handed to
    uvicorn as its `log_config` so it does not install its own plain-text handlers.

    LLMRELAY_LOG_LEVEL applies to uvicorn's loggers; the other libraries stay at INFO or
    above whatever it says, because their DEBUG output is library internals that include SQL
    parameters and payloads (aiosqlite logs every statement with its values)."""
    numeric = _level(level)
    name = logging.getLevelName(numeric)
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "llmrelay.observability.logging.stdlib_formatter"}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
                "formatter": "json",
            }
        },
        "root": {"handlers": ["stderr"], "level": logging.getLevelName(max(numeric, logging.INFO))},
        "loggers": {
            # Listed so that uvicorn's own handlers (from an earlier configuration, or from
            # `uvicorn --factory` run directly) are removed: their lines go to the root's.
            "uvicorn": {"handlers": [], "level": name, "propagate": True},
            "uvicorn.error": {"handlers": [], "level": name, "propagate": True},
            # No access log: a line per request costs the data plane (server.py turns it off;
            # this keeps it off when the configuration is applied again at start-up).
            "uvicorn.access": {"handlers": [], "level": name, "propagate": False},
            "alembic": {"level": "WARNING"},
        },
    }


def configure_logging(level: str) -> None:
    """Configure both structlog and the standard library (idempotent: called by `serve`
    before uvicorn starts and again at the application's start-up, which is the first
    chance when the app is run by `uvicorn --factory` directly)."""
    logging.config.dictConfig(logging_config(level))
    logging.captureWarnings(True)  # a library's warning is a log line too, not raw stderr
    structlog.configure(
        processors=[*_shared_processors(), *_final_processors()],
        wrapper_class=structlog.make_filtering_bound_logger(_level(level)),
        # One write per line (print() makes two), so a library's line written from another
        # thread cannot land between a line and its newline.
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
