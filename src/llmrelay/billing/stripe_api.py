"""The Stripe calls prepaid top-ups make, through the official `stripe` SDK (async, over
aiohttp), as plain dicts: create a customer, a Checkout Session or an off-session
PaymentIntent (each with an Idempotency-Key: the order id, so a retried call never makes a
second payment), read them back, expire a session, read a dispute, refund a payment to its
card (Idempotency-Key: the card refund's id), and verify a webhook's signature.

Stripe's failures become PaymentProviderError with `retryable` set for the ones another
attempt may get past (connection, rate limit, Stripe's own 5xx).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import aiohttp
import orjson
import stripe
from stripe import StripeClient, StripeError, WebhookSignature

from llmrelay.billing.errors import InvalidWebhook, PaymentProviderError, PaymentsNotConfigured
from llmrelay.billing.stripe_config import PRODUCT_NAME, StripeConfig, cents

T = TypeVar("T")


def _retryable(error: StripeError) -> bool:
    if isinstance(error, stripe.APIConnectionError | stripe.RateLimitError):
        return True
    status = error.http_status
    return status is None or status >= 500 or status == 409  # 409: an idempotent call in flight


class StripeApi:
    def __init__(self, config: StripeConfig) -> None:
        self.config = config
        # aiohttp, as the upstream transport uses (its own session, made on first use).
        self._http = stripe.AIOHTTPClient(timeout=aiohttp.ClientTimeout(total=20.0))
        self._client = StripeClient(
            config.secret_key,
            base_addresses={"api": config.api_base},
            http_client=self._http,
            max_network_retries=2,
        )

    async def close(self) -> None:
        await cast(Any, self._http).close_async()  # untyped in some stripe releases

    async def _call(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except StripeError as error:
            message = error.user_message or str(error)
            raise PaymentProviderError(
                f"Stripe refused {what}: {message}", retryable=_retryable(error)
            ) from error

    async def create_customer(self, tenant_id: str, tenant_name: str) -> str:
        """The tenant's customer at Stripe (one per tenant: the key is the tenant id)."""
        customer = await self._call(
            "to create the customer",
            lambda: self._client.v1.customers.create_async(
                {"name": tenant_name, "metadata": {"tenant_id": tenant_id}},
                {"idempotency_key": f"customer:{tenant_id}"},
            ),
        )
        return str(customer.id)

    async def create_checkout_session(
        self, order_id: str, tenant_id: str, amount_micros: int, customer_id: str
    ) -> dict[str, Any]:
        """A Checkout Session paying `amount_micros` for the order, saving the card for
        later off-session payments (auto top-up). Idempotency-Key: the order id."""
        config = self.config
        if not config.success_url or not config.cancel_url:
            raise PaymentsNotConfigured(
                "set LLMRELAY_STRIPE_SUCCESS_URL and LLMRELAY_STRIPE_CANCEL_URL for Checkout"
            )
        metadata = {"order_id": order_id, "tenant_id": tenant_id}
        params: Any = {
            "mode": "payment",
            "customer": customer_id,
            "client_reference_id": order_id,
            "metadata": metadata,
            "line_items": [
                {
                    "quantity": 1,
                    "price_data": {
                        "currency": config.currency,
                        "unit_amount": cents(amount_micros),
                        "product_data": {"name": PRODUCT_NAME},
                    },
                }
            ],
            "payment_intent_data": {"setup_future_usage": "off_session", "metadata": metadata},
            "success_url": config.success_url,
            "cancel_url": config.cancel_url,
        }
        session = await self._call(
            "to create the Checkout session",
            lambda: self._client.v1.checkout.sessions.create_async(
                params, {"idempotency_key": order_id}
            ),
        )
        return session.to_dict()

    async def retrieve_session(self, session_id: str) -> dict[str, Any]:
        session = await self._call(
            "to read the Checkout session",
            lambda: self._client.v1.checkout.sessions.retrieve_async(session_id),
        )
        return session.to_dict()

    async def expire_session(self, session_id: str) -> dict[str, Any]:
        session = await self._call(
            "to expire the Checkout session",
            lambda: self._client.v1.checkout.sessions.expire_async(session_id),
        )
        return session.to_dict()

    async def create_off_session_payment(
        self,
        order_id: str,
        tenant_id: str,
        amount_micros: int,
        customer_id: str,
        payment_method: str,
    ) -> dict[str, Any]:
        """Charge the saved payment method now, without the customer (auto top-up).
        Idempotency-Key: the order id. A decline raises PaymentProviderError (not retryable)."""
        intent = await self._call(
            "the automatic top-up",
            lambda: self._client.v1.payment_intents.create_async(
                {
                    "amount": cents(amount_micros),
                    "currency": self.config.currency,
                    "customer": customer_id,
                    "payment_method": payment_method,
                    "off_session": True,
                    "confirm": True,
                    "metadata": {"order_id": order_id, "tenant_id": tenant_id},
                },
                {"idempotency_key": order_id},
            ),
        )
        return intent.to_dict()

    async def retrieve_intent(self, intent_id: str) -> dict[str, Any]:
        intent = await self._call(
            "to read the payment",
            lambda: self._client.v1.payment_intents.retrieve_async(intent_id),
        )
        return intent.to_dict()

    async def retrieve_dispute(self, dispute_id: str) -> dict[str, Any]:
        dispute = await self._call(
            "to read the dispute",
            lambda: self._client.v1.disputes.retrieve_async(dispute_id),
        )
        return dispute.to_dict()

    async def create_refund(
        self,
        card_refund_id: str,
        payment_intent: str,
        amount_micros: int,
        metadata: dict[str, str],
    ) -> dict[str, Any]:
        """Refund part or all of a payment to its card. Idempotency-Key `refund:<card
        refund id>`: asked again (a retry after a timeout), Stripe answers the refund it
        made, never a second one."""
        refund = await self._call(
            "the refund",
            lambda: self._client.v1.refunds.create_async(
                {
                    "payment_intent": payment_intent,
                    "amount": cents(amount_micros),
                    "reason": "requested_by_customer",
                    "metadata": metadata,
                },
                {"idempotency_key": f"refund:{card_refund_id}"},
            ),
        )
        return refund.to_dict()

    def verify_event(self, payload: bytes, signature: str | None) -> dict[str, Any]:
        """The event a webhook delivered, once its `Stripe-Signature` is verified with the
        SDK (HMAC-SHA256 with the endpoint's secret, timestamp within the tolerance).
        Raises InvalidWebhook."""
        secret = self.config.webhook_secret
        if not secret:
            raise PaymentsNotConfigured("LLMRELAY_STRIPE_WEBHOOK_SECRET is not set")
        try:
            WebhookSignature.verify_header(
                payload, signature, secret, tolerance=self.config.webhook_tolerance_s
            )
        except stripe.SignatureVerificationError as refused:
            raise InvalidWebhook(f"Stripe-Signature: {refused}") from None
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise InvalidWebhook("the body is not JSON") from None
        if not isinstance(event, dict) or not isinstance(event.get("id"), str):
            raise InvalidWebhook("the body is not a Stripe event object")
        return event
