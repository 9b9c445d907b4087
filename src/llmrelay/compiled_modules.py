"""Which modules the build compiles with mypyc, and the digest that ties a build to them.

Plain standard library only: setup.py reads this file before anything is installed, and
llmrelay/_compiled.py at every start. The list is the data plane's request path (a module
off it gains nothing from compiling); see docs/performance.md, "Compiled hot path".

What these modules' source keeps to, because mypyc compiles it differently from CPython
(tests/test_compiled_modules.py checks all but the last):
- no async generators (mypyc has none);
- one exception type per `except ... as name` within a function (a second type under the
  same name raises TypeError);
- no class attributes set in the body of a class that extends a class outside this list
  (they are not seen: such classes, the gateway's errors among them, live elsewhere);
- module constants are `Final` (else every read is a dict look-up and a boxed value), but
  not a fixed-length tuple whose first item is a float (mypyc's check of such a static is
  inverted: it always reads as unset; `Final[tuple[float, ...]]` is fine), nor one the tests
  replace with monkeypatch (compiled code no longer reads the module attribute);
- a class built per request is a plain class with `__slots__`, not a dataclass: mypyc keeps
  a dataclass's generated `__init__` in Python (several times the cost of a compiled one).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

COMPILED = (
    "llmrelay.billing.allowance",
    "llmrelay.billing.charge",
    "llmrelay.billing.estimate",
    "llmrelay.billing.lease_store",
    "llmrelay.billing.lease_writer",
    "llmrelay.billing.prepaid",
    "llmrelay.billing.rows_sql",
    "llmrelay.deadlines",
    "llmrelay.gateway.asgi",
    "llmrelay.gateway.auth",
    "llmrelay.gateway.call",
    "llmrelay.gateway.capture",
    "llmrelay.gateway.conversation",
    "llmrelay.gateway.dispatch",
    "llmrelay.gateway.ending",
    "llmrelay.gateway.entry",
    "llmrelay.gateway.endpoints",
    "llmrelay.gateway.executor",
    "llmrelay.gateway.gemini_relay",
    "llmrelay.gateway.ids",
    "llmrelay.gateway.ingress",
    "llmrelay.gateway.messages",
    "llmrelay.gateway.messages_relay",
    "llmrelay.gateway.planner",
    "llmrelay.gateway.prepaid",
    "llmrelay.gateway.record_writers",
    "llmrelay.gateway.recorder",
    "llmrelay.gateway.relay",
    "llmrelay.gateway.requests",
    "llmrelay.gateway.rescue",
    "llmrelay.gateway.rescue_events",
    "llmrelay.gateway.rescue_gemini",
    "llmrelay.gateway.rescue_messages",
    "llmrelay.gateway.rescue_point",
    "llmrelay.gateway.rescue_responses",
    "llmrelay.gateway.responses",
    "llmrelay.gateway.response_head",
    "llmrelay.gateway.responses_relay",
    "llmrelay.gateway.row_queue",
    "llmrelay.gateway.stream_relay",
    "llmrelay.gateway.watch",
    "llmrelay.limits.base",
    "llmrelay.limits.estimate",
    "llmrelay.limits.local",
    "llmrelay.limits.postgres",
    "llmrelay.limits.redis",
    "llmrelay.limits.releases",
    "llmrelay.limits.replies",
    "llmrelay.limits.resilient",
    "llmrelay.limits.resp",
    "llmrelay.limits.scopes",
    "llmrelay.metering.cost",
    "llmrelay.metering.estimate",
    "llmrelay.metering.usage",
    "llmrelay.observability.request_stats",
    "llmrelay.protocols.anthropic",
    "llmrelay.protocols.anthropic_chat_messages",
    "llmrelay.protocols.anthropic_chat_stream",
    "llmrelay.protocols.anthropic_reasoning",
    "llmrelay.protocols.anthropic_request",
    "llmrelay.protocols.chat_anthropic",
    "llmrelay.protocols.chat_anthropic_messages",
    "llmrelay.protocols.chat_anthropic_stream",
    "llmrelay.protocols.openai",
    "llmrelay.protocols.sse",
    "llmrelay.providers.anthropic",
    "llmrelay.providers.anthropic_stream",
    "llmrelay.providers.base",
    "llmrelay.providers.bridges",
    "llmrelay.providers.headers",
    "llmrelay.providers.http",
    "llmrelay.providers.messages_bridge",
    "llmrelay.providers.openai",
    "llmrelay.providers.presets",
    "llmrelay.providers.registry",
    "llmrelay.providers.translated",
    "llmrelay.routing.affinity",
    "llmrelay.routing.breaker",
    "llmrelay.routing.strategies",
    "llmrelay.snapshot.holder",
    "llmrelay.snapshot.model",
)


def source_path(src: Path, module: str) -> Path:
    return src.joinpath(*module.split(".")).with_suffix(".py")


def source_digest(src: Path) -> str:
    """SHA-256 over the compiled modules' names and sources (`src`: the folder holding the
    `llmrelay` package)."""
    digest = hashlib.sha256()
    for module in COMPILED:
        digest.update(module.encode() + b"\0")
        digest.update(source_path(src, module).read_bytes() + b"\0")
    return digest.hexdigest()
