"""`POST /api/billing/stripe/webhook`: where Stripe delivers its events. Public (Stripe
holds no admin credential): what authenticates a delivery is its `Stripe-Signature`,
verified with the endpoint's signing secret before anything is read or stored.

    400  the signature (or the timestamp it signs) does not verify, or the body is not an
         event: nothing stored, nothing credited
    503  top-ups are not configured, or Stripe or the database could not be reached to
         re-check and record it: Stripe delivers it again later
    200  handled: `{"received": true, "outcome": ...}` (credited, duplicate, ignored,
         mismatch, failed, expired, pending; a dispute's held, won, lost)
"""

from __future__ import annotations

from typing import Final

import orjson
import structlog
from sqlalchemy.exc import SQLAlchemyError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from llmrelay.billing.errors import InvalidWebhook, PaymentProviderError, PaymentsNotConfigured
from llmrelay.billing.payments import Payments

log = structlog.get_logger(__name__)

PATH: Final = "/api/billing/stripe/webhook"
#: Stripe's events are a few kilobytes; anything far larger is not one.
MAX_BODY_BYTES: Final = 1024 * 1024


def _answer(status: int, body: dict[str, object]) -> Response:
    return Response(orjson.dumps(body), status, media_type="application/json")


def _error(status: int, kind: str, message: str) -> Response:
    return _answer(status, {"error": {"message": message, "type": kind}})


class StripeWebhookRoute:
    """The ASGI endpoint; `payments` is set once the process has started."""

    def __init__(self) -> None:
        self.payments: Payments | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        response = await self._handle(request)
        await response(scope, receive, send)

    async def _handle(self, request: Request) -> Response:
        payments = self.payments
        if payments is None or payments.stripe is None:
            return _error(503, "unavailable", "Stripe top-ups are not configured here")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                return _error(413, "invalid_request", "the body is too large for an event")
        try:
            outcome = await payments.receive(body, request.headers.get("stripe-signature"))
        except InvalidWebhook as refused:
            payments.count_bad_signature()
            log.warning("stripe_webhook_refused", reason=str(refused)[:200])
            return _error(400, "invalid_signature", str(refused))
        except PaymentsNotConfigured as missing:
            return _error(503, "unavailable", str(missing))
        except PaymentProviderError as unreachable:
            log.warning("stripe_webhook_recheck_failed", error=str(unreachable))
            return _error(503, "unavailable", "Stripe could not be asked to re-check it")
        except (SQLAlchemyError, OSError) as failed:
            log.warning("stripe_webhook_database_failed", error=str(failed)[:300])
            return _error(503, "unavailable", "the database could not record it")
        return _answer(200, {"received": True, "outcome": outcome})
