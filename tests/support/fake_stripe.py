"""A fake of the Stripe API, as a real HTTP server on loopback, for the billing tests.

It speaks what the gateway's Stripe calls need, the way the official `stripe` SDK sends and
reads them (form-encoded bodies with `a[b][0][c]` keys, `Authorization: Bearer sk_...`,
`Idempotency-Key`, JSON objects shaped as Stripe's API reference shows them):

    POST /v1/customers                                   a customer
    POST /v1/checkout/sessions                           a Checkout Session (mode payment)
    GET  /v1/checkout/sessions/{id}
    POST /v1/checkout/sessions/{id}/expire
    POST /v1/payment_intents                             an off-session payment (confirm=true)
    GET  /v1/payment_intents/{id}
    POST /v1/refunds                                     a refund of a payment to its card
    GET  /v1/refunds/{id}
    GET  /v1/disputes/{id}

Every succeeded payment has its Charge (`latest_charge`), which counts what was refunded of
it (`amount_refunded`) and whether it was disputed: a refund above what is left answers 400
`amount_too_large`, one of a fully refunded charge `charge_already_refunded`, one of a
disputed charge `charge_disputed`, as Stripe does.

A POST with an Idempotency-Key that was used before answers what it answered then (the same
object, `Idempotent-Replayed: true`), or a 400 `idempotency_error` when the parameters differ.

Test-side actions stand in for the payer and for Stripe's event delivery: `pay_session`
(the payer paid: the session is complete and paid, its PaymentIntent succeeded with a saved
card), `decline` (the card a later off-session payment uses is declined), `open_dispute`
and `close_dispute` (a card holder's chargeback, and its end: the `charge.dispute.created`
and `charge.dispute.closed` events to deliver), `refund_outage` (refund calls answer 500:
"before" nothing is made, "after" the refund is made and its answer lost), and `deliver`,
which POSTs an event to the webhook URL signed exactly as Stripe signs
(`Stripe-Signature: t=<ts>,v1=<hex HMAC-SHA256(secret, "<ts>.<payload>")>`), or signed with
another secret, with an old timestamp, or with its body changed after signing. An automatic
payment (an off-session PaymentIntent) sends its `payment_intent.succeeded` by itself when
`auto_webhooks` is on, as Stripe would.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import httpx
import orjson
from aiohttp import ClientSession, web

from llmrelay.billing.stripe_config import StripeConfig
from tests.support.background_app import BackgroundApp
from tests.support.ports import free_port

SECRET_KEY = "sk_test_fake_0123456789abcdef"
WEBHOOK_SECRET = "whsec_fake_0123456789abcdef"
_INDEX = re.compile(r"\[([^\]]*)\]")


def sign(payload: bytes, secret: str, timestamp: int | None = None) -> str:
    """The Stripe-Signature header for `payload`, as Stripe computes it."""
    at = int(time.time()) if timestamp is None else timestamp
    mac = hmac.new(secret.encode(), f"{at}.".encode() + payload, hashlib.sha256)
    return f"t={at},v1={mac.hexdigest()}"


def decode_form(body: str) -> dict[str, Any]:
    """`a[b][0][c]=1` form fields as nested dicts and lists (how the SDK encodes params)."""
    root: dict[str, Any] = {}
    for key, value in parse_qsl(body, keep_blank_values=True):
        head = key.split("[", 1)[0]
        path = [head, *_INDEX.findall(key)]
        node: Any = root
        for name in path[:-1]:
            child = node.get(name) if isinstance(node, dict) else None
            if child is None:
                child = {}
                node[name] = child
            node = child
        node[path[-1]] = value
    decoded: dict[str, Any] = _lists(root)
    return decoded


def _lists(value: Any) -> Any:
    """Dicts whose keys are 0..n-1 become lists; "true"/"false" stay strings (as sent)."""
    if not isinstance(value, dict):
        return value
    converted = {k: _lists(v) for k, v in value.items()}
    if converted and all(k.isdigit() for k in converted):
        return [converted[k] for k in sorted(converted, key=int)]
    return converted


def _error(status: int, kind: str, message: str, **extra: Any) -> web.Response:
    body = {"error": {"type": kind, "message": message, **extra}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


@dataclass
class FakeStripe:
    host: str = "127.0.0.1"
    port: int = field(default_factory=free_port)
    secret_key: str = SECRET_KEY
    webhook_secret: str = WEBHOOK_SECRET
    #: Where events go (the gateway's /api/billing/stripe/webhook); None: nowhere.
    webhook_url: str | None = None
    #: Off-session payments send their payment_intent.succeeded event by themselves.
    auto_webhooks: bool = True
    customers: dict[str, dict[str, Any]] = field(default_factory=dict)
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    intents: dict[str, dict[str, Any]] = field(default_factory=dict)
    charges: dict[str, dict[str, Any]] = field(default_factory=dict)
    refunds: dict[str, dict[str, Any]] = field(default_factory=dict)
    disputes: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: While set, POST /v1/refunds answers 500: "before" making the refund, or "after" it
    #: (made and kept under its Idempotency-Key, the answer lost).
    refund_outage: str | None = None
    #: Payment methods a payment is declined with.
    declined: set[str] = field(default_factory=set)
    #: Every API call: (method, path, params, Idempotency-Key).
    calls: list[tuple[str, str, dict[str, Any], str | None]] = field(default_factory=list)
    #: Events delivered: (event, the webhook's status).
    delivered: list[tuple[dict[str, Any], int]] = field(default_factory=list)
    _idempotent: dict[str, tuple[str, dict[str, Any], int, bytes]] = field(default_factory=dict)
    _served: BackgroundApp = field(default_factory=lambda: BackgroundApp("fake-stripe"))
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def gateway_env(self) -> dict[str, str]:
        """The settings that point a gateway's billing at this stand-in."""
        return {
            "LLMRELAY_STRIPE_SECRET_KEY": self.secret_key,
            "LLMRELAY_STRIPE_WEBHOOK_SECRET": self.webhook_secret,
            "LLMRELAY_STRIPE_API_BASE": self.base_url,
            "LLMRELAY_STRIPE_SUCCESS_URL": "https://console.example.com/billing/done",
            "LLMRELAY_STRIPE_CANCEL_URL": "https://console.example.com/billing/cancelled",
        }

    # -- life cycle ----------------------------------------------------------------------------

    def start(self) -> FakeStripe:
        self._served.start(self._app(), self.host, self.port)
        return self

    def stop(self) -> None:
        self._served.stop()

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/customers", self._create_customer)
        app.router.add_post("/v1/checkout/sessions", self._create_session)
        app.router.add_get("/v1/checkout/sessions/{id}", self._get_session)
        app.router.add_post("/v1/checkout/sessions/{id}/expire", self._expire_session)
        app.router.add_post("/v1/payment_intents", self._create_intent)
        app.router.add_get("/v1/payment_intents/{id}", self._get_intent)
        app.router.add_post("/v1/refunds", self._create_refund)
        app.router.add_get("/v1/refunds/{id}", self._get_refund)
        app.router.add_get("/v1/disputes/{id}", self._get_dispute)
        app.on_shutdown.append(self._cancel_sends)
        return app

    async def _cancel_sends(self, _app: web.Application) -> None:
        """Events still being sent when the server stops are dropped, not left running."""
        for task in list(self._tasks):
            task.cancel()

    # -- the API ---------------------------------------------------------------------------------

    def _authorised(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.secret_key}"

    async def _post(self, request: web.Request, make: Any) -> web.Response:
        """Authenticate, decode, honour the Idempotency-Key, then `make(params)`."""
        if not self._authorised(request):
            return _error(401, "invalid_request_error", "Invalid API Key provided")
        params = decode_form(await request.text())
        key = request.headers.get("Idempotency-Key")
        self.calls.append(("POST", request.path, params, key))
        if key is not None:
            with self._lock:
                seen = self._idempotent.get(key)
            if seen is not None:
                path, sent, status, body = seen
                if (path, sent) != (request.path, params):
                    return _error(
                        400,
                        "idempotency_error",
                        "Keys for idempotent requests can only be used with the same "
                        "parameters they were first used with.",
                    )
                return web.Response(
                    status=status,
                    body=body,
                    content_type="application/json",
                    headers={"Idempotent-Replayed": "true"},
                )
        response: web.Response = make(params)
        if key is not None:
            assert isinstance(response.body, bytes)
            with self._lock:
                self._idempotent[key] = (request.path, params, response.status, response.body)
        return response

    def _get(self, request: web.Request, store: dict[str, dict[str, Any]], kind: str) -> Any:
        if not self._authorised(request):
            return _error(401, "invalid_request_error", "Invalid API Key provided")
        object_id = request.match_info["id"]
        self.calls.append(("GET", request.path, dict(request.query), None))
        found = store.get(object_id)
        if found is None:
            return _error(
                404,
                "invalid_request_error",
                f"No such {kind}: '{object_id}'",
                code="resource_missing",
                param="id",
            )
        return web.json_response(found, dumps=lambda v: orjson.dumps(v).decode())

    async def _create_customer(self, request: web.Request) -> web.Response:
        def make(params: dict[str, Any]) -> web.Response:
            customer = {
                "id": f"cus_{secrets.token_hex(7)}",
                "object": "customer",
                "created": int(time.time()),
                "email": params.get("email"),
                "name": params.get("name"),
                "metadata": params.get("metadata", {}),
                "invoice_settings": {"default_payment_method": None},
                "livemode": False,
            }
            self.customers[customer["id"]] = customer
            return _json(customer)

        return await self._post(request, make)

    async def _create_session(self, request: web.Request) -> web.Response:
        def make(params: dict[str, Any]) -> web.Response:
            items = params.get("line_items") or []
            if params.get("mode") != "payment" or not items:
                return _error(400, "invalid_request_error", "mode payment with line_items")
            prices = [item["price_data"] for item in items]
            total = sum(
                int(p["unit_amount"]) * int(i.get("quantity", 1))
                for p, i in zip(prices, items, strict=True)
            )
            session_id = f"cs_test_{secrets.token_hex(12)}"
            now = int(time.time())
            session = {
                "id": session_id,
                "object": "checkout.session",
                "mode": "payment",
                "status": "open",
                "payment_status": "unpaid",
                "amount_subtotal": total,
                "amount_total": total,
                "currency": prices[0]["currency"],
                "customer": params.get("customer"),
                "client_reference_id": params.get("client_reference_id"),
                "metadata": params.get("metadata", {}),
                "payment_intent": None,
                "payment_intent_data": params.get("payment_intent_data", {}),
                "success_url": params.get("success_url"),
                "cancel_url": params.get("cancel_url"),
                "url": f"{self.base_url}/c/pay/{session_id}",
                "created": now,
                "expires_at": now + 86_400,
                "livemode": False,
            }
            self.sessions[session_id] = session
            return _json(_public_session(session))

        return await self._post(request, make)

    async def _get_session(self, request: web.Request) -> web.Response:
        response = self._get(request, self.sessions, "checkout.session")
        if response.status == 200:
            return _json(_public_session(self.sessions[request.match_info["id"]]))
        assert isinstance(response, web.Response)
        return response

    async def _expire_session(self, request: web.Request) -> web.Response:
        session_id = request.match_info["id"]

        def make(params: dict[str, Any]) -> web.Response:
            session = self.sessions.get(session_id)
            if session is None:
                return _error(
                    404, "invalid_request_error", f"No such checkout.session: '{session_id}'"
                )
            if session["status"] != "open":
                return _error(400, "invalid_request_error", "Only open sessions can be expired.")
            session["status"] = "expired"
            return _json(_public_session(session))

        return await self._post(request, make)

    async def _create_intent(self, request: web.Request) -> web.Response:
        def make(params: dict[str, Any]) -> web.Response:
            intent = self._intent(
                int(params["amount"]),
                params["currency"],
                params.get("customer"),
                params.get("payment_method"),
                params.get("metadata", {}),
            )
            if params.get("confirm") != "true":
                intent["status"] = "requires_confirmation"
                return _json(intent)
            if intent["payment_method"] in self.declined:
                intent["status"] = "requires_payment_method"
                error = {
                    "code": "card_declined",
                    "decline_code": "generic_decline",
                    "message": "Your card was declined.",
                    "type": "card_error",
                }
                intent["last_payment_error"] = error
                self._send_later("payment_intent.payment_failed", intent)
                return _error(402, "card_error", error["message"], code="card_declined",
                              decline_code="generic_decline", payment_intent=intent)  # fmt: skip
            intent["status"] = "succeeded"
            intent["amount_received"] = intent["amount"]
            self._charge(intent)
            self._send_later("payment_intent.succeeded", intent)
            return _json(intent)

        return await self._post(request, make)

    async def _get_intent(self, request: web.Request) -> web.Response:
        response = self._get(request, self.intents, "payment_intent")
        assert isinstance(response, web.Response)
        return response

    def _intent(
        self,
        amount: int,
        currency: str,
        customer: str | None,
        payment_method: str | None,
        metadata: dict[str, Any],
    ) -> dict[str, Any]:
        intent_id = f"pi_{secrets.token_hex(12)}"
        intent: dict[str, Any] = {
            "id": intent_id,
            "object": "payment_intent",
            "amount": amount,
            "amount_received": 0,
            "currency": currency,
            "customer": customer,
            "payment_method": payment_method,
            "metadata": metadata,
            "status": "requires_payment_method",
            "last_payment_error": None,
            "latest_charge": None,
            "setup_future_usage": None,
            "created": int(time.time()),
            "livemode": False,
        }
        self.intents[intent_id] = intent
        return intent

    def _charge(self, intent: dict[str, Any]) -> dict[str, Any]:
        """The Charge of a succeeded PaymentIntent (its `latest_charge`)."""
        charge: dict[str, Any] = {
            "id": f"ch_{secrets.token_hex(12)}",
            "object": "charge",
            "amount": intent["amount_received"],
            "amount_captured": intent["amount_received"],
            "amount_refunded": 0,
            "currency": intent["currency"],
            "customer": intent["customer"],
            "payment_intent": intent["id"],
            "payment_method": intent["payment_method"],
            "paid": True,
            "refunded": False,
            "disputed": False,
            "status": "succeeded",
            "created": int(time.time()),
            "livemode": False,
        }
        self.charges[charge["id"]] = charge
        intent["latest_charge"] = charge["id"]
        return charge

    async def _create_refund(self, request: web.Request) -> web.Response:
        outage = self.refund_outage
        if outage == "before":
            self.calls.append(("POST", request.path, {}, request.headers.get("Idempotency-Key")))
            return _error(500, "api_error", "An unknown error occurred (a stand-in outage)")

        def make(params: dict[str, Any]) -> web.Response:
            intent = self.intents.get(str(params.get("payment_intent") or ""))
            charge = None
            if intent is not None:
                charge = self.charges.get(str(intent.get("latest_charge") or ""))
            elif params.get("charge"):
                charge = self.charges.get(str(params["charge"]))
            if charge is None:
                return _error(
                    400,
                    "invalid_request_error",
                    f"No such payment_intent: '{params.get('payment_intent')}'",
                    code="resource_missing",
                    param="payment_intent",
                )
            left = charge["amount"] - charge["amount_refunded"]
            amount = int(params.get("amount", left))
            if charge["disputed"]:
                return _error(
                    400,
                    "invalid_request_error",
                    f"Charge {charge['id']} has been charged back; cannot issue a refund.",
                    code="charge_disputed",
                )
            if left <= 0:
                return _error(
                    400,
                    "invalid_request_error",
                    f"Charge {charge['id']} has already been refunded.",
                    code="charge_already_refunded",
                )
            if amount > left:
                return _error(
                    400,
                    "invalid_request_error",
                    f"Refund amount (${amount / 100:.2f}) is greater than unrefunded amount "
                    f"on charge (${left / 100:.2f})",
                    code="amount_too_large",
                    param="amount",
                )
            charge["amount_refunded"] += amount
            charge["refunded"] = charge["amount_refunded"] == charge["amount"]
            refund = {
                "id": f"re_{secrets.token_hex(12)}",
                "object": "refund",
                "amount": amount,
                "balance_transaction": f"txn_{secrets.token_hex(12)}",
                "charge": charge["id"],
                "created": int(time.time()),
                "currency": charge["currency"],
                "destination_details": {"card": {"type": "refund"}, "type": "card"},
                "failure_reason": None,
                "metadata": params.get("metadata", {}),
                "payment_intent": charge["payment_intent"],
                "reason": params.get("reason"),
                "receipt_number": None,
                "source_transfer_reversal": None,
                "status": "succeeded",
                "transfer_reversal": None,
            }
            self.refunds[refund["id"]] = refund
            return _json(refund)

        answer = await self._post(request, make)
        if outage == "after":
            return _error(500, "api_error", "An unknown error occurred (a stand-in outage)")
        return answer

    async def _get_refund(self, request: web.Request) -> web.Response:
        response = self._get(request, self.refunds, "refund")
        assert isinstance(response, web.Response)
        return response

    async def _get_dispute(self, request: web.Request) -> web.Response:
        response = self._get(request, self.disputes, "dispute")
        assert isinstance(response, web.Response)
        return response

    def _send_later(self, kind: str, obj: dict[str, Any]) -> None:
        """Deliver an event about `obj` shortly after the call that made it answered."""
        if not self.auto_webhooks or self.webhook_url is None:
            return
        event = self.event(kind, dict(obj))

        async def send() -> None:
            await asyncio.sleep(0.2)
            payload = orjson.dumps(event)
            async with ClientSession() as client:
                headers = {
                    "Stripe-Signature": sign(payload, self.webhook_secret),
                    "Content-Type": "application/json",
                }
                assert self.webhook_url is not None
                async with client.post(self.webhook_url, data=payload, headers=headers) as answer:
                    self.delivered.append((event, answer.status))

        task = asyncio.get_running_loop().create_task(send())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- test-side actions (called from the test's thread) -------------------------------------

    def pay_session(self, session_id: str, *, amount: int | None = None) -> dict[str, Any]:
        """The payer paid on the Checkout page: the session is complete and paid and its
        PaymentIntent succeeded with a card saved for off-session use. Returns the
        `checkout.session.completed` event to deliver. `amount`: what Stripe took, when a
        test wants it to differ from the session's total."""
        session = self.sessions[session_id]
        paid = amount if amount is not None else session["amount_total"]
        method = f"pm_{secrets.token_hex(12)}"
        intent = self._intent(
            paid, session["currency"], session["customer"], method,
            dict(session["payment_intent_data"].get("metadata", {})),
        )  # fmt: skip
        intent.update(status="succeeded", amount_received=paid, setup_future_usage="off_session")
        self._charge(intent)
        session.update(
            status="complete", payment_status="paid", payment_intent=intent["id"], amount_total=paid
        )
        return self.event("checkout.session.completed", _public_session(session))

    def open_dispute(
        self,
        intent_id: str,
        *,
        amount: int | None = None,
        reason: str = "fraudulent",
        status: str = "needs_response",
    ) -> dict[str, Any]:
        """The card holder disputed the payment (`amount` cents, the whole charge when
        None): returns the `charge.dispute.created` event to deliver."""
        charge = self.charges[self.intents[intent_id]["latest_charge"]]
        charge["disputed"] = True
        dispute = {
            "id": f"dp_{secrets.token_hex(12)}",
            "object": "dispute",
            "amount": charge["amount"] if amount is None else amount,
            "balance_transactions": [],
            "charge": charge["id"],
            "created": int(time.time()),
            "currency": charge["currency"],
            "evidence": {"uncategorized_text": None},
            "evidence_details": {
                "due_by": int(time.time()) + 7 * 86_400,
                "has_evidence": False,
                "past_due": False,
                "submission_count": 0,
            },
            "is_charge_refundable": False,
            "livemode": False,
            "metadata": {},
            "payment_intent": intent_id,
            "reason": reason,
            "status": status,
        }
        self.disputes[dispute["id"]] = dispute
        return self.event("charge.dispute.created", dict(dispute))

    def close_dispute(self, dispute_id: str, *, won: bool) -> dict[str, Any]:
        """The dispute ended (`won` for the merchant, else lost): returns the
        `charge.dispute.closed` event to deliver."""
        dispute = self.disputes[dispute_id]
        dispute["status"] = "won" if won else "lost"
        return self.event("charge.dispute.closed", dict(dispute))

    def event(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": f"evt_{secrets.token_hex(12)}",
            "object": "event",
            "api_version": "2025-09-30.clover",
            "created": int(time.time()),
            "data": {"object": obj},
            "livemode": False,
            "pending_webhooks": 1,
            "request": {"id": None, "idempotency_key": None},
            "type": kind,
        }

    def deliver(
        self,
        event: dict[str, Any],
        *,
        secret: str | None = None,
        timestamp: int | None = None,
        tamper: bool = False,
    ) -> httpx.Response:
        """POST `event` to the webhook URL, signed as Stripe signs (with `secret`, at
        `timestamp`); `tamper`: the body changed after it was signed."""
        assert self.webhook_url is not None
        payload = orjson.dumps(event)
        header = sign(payload, secret or self.webhook_secret, timestamp)
        if tamper:
            payload = payload.replace(b'"livemode":false', b'"livemode":true ')
        answer = httpx.post(
            self.webhook_url,
            content=payload,
            headers={"Stripe-Signature": header, "Content-Type": "application/json"},
            timeout=10,
        )
        self.delivered.append((event, answer.status_code))
        return answer


def _public_session(session: dict[str, Any]) -> dict[str, Any]:
    """A session as the API shows it (the create parameters it keeps are not fields)."""
    return {k: v for k, v in session.items() if k != "payment_intent_data"}


def _json(value: dict[str, Any]) -> web.Response:
    return web.Response(body=orjson.dumps(value), content_type="application/json")


def stripe_config(fake: FakeStripe, **overrides: Any) -> StripeConfig:
    """The gateway's Stripe settings pointed at `fake` (top-ups from 5 to 1,000 USD)."""
    values: dict[str, Any] = {
        "secret_key": fake.secret_key,
        "webhook_secret": fake.webhook_secret,
        "api_base": fake.base_url,
        "success_url": "https://console.example.com/billing/done",
        "cancel_url": "https://console.example.com/billing/cancelled",
        "min_topup_micros": 5_000_000,
        "max_topup_micros": 1_000_000_000,
    }
    values.update(overrides)
    return StripeConfig(**values)
