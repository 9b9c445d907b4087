"""How a webhook event is signed: HMAC-SHA256 with the project's secret over
`{event id}.{timestamp}.{raw body}`, sent as `X-Webhook-Signature: v1=<hex>` with
`X-Webhook-Id` and `X-Webhook-Timestamp` (Unix seconds). The id and timestamp are signed too,
so a receiver that checks the signature and the timestamp's age refuses a replayed event, and
one that remembers event ids refuses a repeated delivery. docs/api.md shows a receiver's check.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Final

VERSION: Final = "v1"


def signed_content(event_id: str, timestamp: int, body: bytes) -> bytes:
    return f"{event_id}.{timestamp}.".encode() + body


def signature(secret: str, event_id: str, timestamp: int, body: bytes) -> str:
    """The header's value: `v1=` and the hex digest."""
    digest = hmac.new(secret.encode(), signed_content(event_id, timestamp, body), hashlib.sha256)
    return f"{VERSION}={digest.hexdigest()}"


def verify(
    secret: str,
    event_id: str,
    timestamp: int,
    body: bytes,
    header: str,
    *,
    now: int,
    tolerance_s: int = 300,
) -> bool:
    """What a receiver checks (for tests and the docs' example): a `v1=` signature of this
    id, timestamp and body, the timestamp within `tolerance_s` of `now`."""
    if abs(now - timestamp) > tolerance_s:
        return False
    expected = signature(secret, event_id, timestamp, body)
    return any(hmac.compare_digest(expected, part.strip()) for part in header.split(","))
