"""One default TLS context per test process, shared by every httpx and httpx2 client.

Why: an httpx (or httpx2, which the openai and anthropic SDKs use) client builds a new
`ssl.SSLContext` and loads the whole CA bundle into it when it is made, whether or not it
ever speaks TLS: 17-20 ms of CPU a client. The suite makes thousands of them (every
one-call `httpx.get`, every SDK client; a gateway's readiness poll alone made two dozen a
start), some two minutes of CPU a run on two cores. A client that asks for the default
verification (`verify=True`, no client certificate) now gets one context built the same
way, once per process and per TLS environment (SSL_CERT_FILE, SSL_CERT_DIR). A client given
its own context, a CA file or `verify=False` still builds its own. Only the test side's
clients are affected: the gateway under test does not use httpx."""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable
from types import ModuleType
from typing import Any

import httpx._transports.default as httpx_transports
import httpx2._transports.default as httpx2_transports

__all__ = ["httpx2_transports", "httpx_transports", "share_default_contexts"]

ContextFactory = Callable[..., ssl.SSLContext]


def _shared(original: ContextFactory) -> ContextFactory:
    contexts: dict[tuple[bool, str | None, str | None], ssl.SSLContext] = {}

    def create_ssl_context(
        verify: Any = True, cert: Any = None, trust_env: bool = True
    ) -> ssl.SSLContext:
        if verify is not True or cert is not None:
            return original(verify=verify, cert=cert, trust_env=trust_env)
        key = (trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        context = contexts.get(key)
        if context is None:
            context = contexts[key] = original(verify=True, cert=None, trust_env=trust_env)
        return context

    create_ssl_context.original = original  # type: ignore[attr-defined]
    return create_ssl_context


def share_default_contexts() -> None:
    """Install the sharing in httpx's and httpx2's transports (once; idempotent)."""
    modules: tuple[ModuleType, ...] = (httpx_transports, httpx2_transports)
    for module in modules:
        factory = module.create_ssl_context
        if not hasattr(factory, "original"):
            setattr(module, "create_ssl_context", _shared(factory))  # noqa: B010
