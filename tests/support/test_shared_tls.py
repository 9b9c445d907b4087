"""The suite's shared default TLS context (shared_tls.py): shared where the default is asked
for, never where a client asked for its own."""

from __future__ import annotations

import ssl
from typing import Any

import httpx
import httpx2

from tests.support import shared_tls


def _context(client: Any) -> ssl.SSLContext:
    context: ssl.SSLContext = client._transport._pool._ssl_context
    return context


def test_default_clients_share_one_context_and_others_keep_their_own() -> None:
    for transports in (shared_tls.httpx_transports, shared_tls.httpx2_transports):
        create: Any = getattr(transports, "create_ssl_context")  # noqa: B009
        first = create()
        assert create(verify=True) is first
        assert first.verify_mode is ssl.CERT_REQUIRED and first.check_hostname
        assert first.get_ca_certs(), "the CA bundle is loaded"
        unverified = create(verify=False)
        assert unverified is not first and unverified.verify_mode is ssl.CERT_NONE
        own = ssl.create_default_context()
        assert create(verify=own) is own
    with httpx.Client() as one, httpx.Client() as two, httpx2.Client() as three:
        assert _context(one) is _context(two)
        assert _context(three) is getattr(shared_tls.httpx2_transports, "create_ssl_context")()  # noqa: B009
