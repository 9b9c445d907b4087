"""Money that goes back to a card holder: refunds to the card an admin asks for
(billing/card_refunds.py does them) and the disputes Stripe reports (billing/disputes.py);
this words their refusals in the admin API's errors and shapes their answers."""

from __future__ import annotations

from typing import Any

from llmrelay.admin.billing.schemas import CardRefundIn, CardRefundOut, DisputeOut, usd
from llmrelay.admin.errors import AdminError
from llmrelay.admin.kit.problems import Conflict, Invalid, NotFound
from llmrelay.billing import card_refunds, disputes
from llmrelay.billing.errors import PaymentProviderError, PaymentsNotConfigured
from llmrelay.billing.payments import Payments


async def refund_to_card(
    payments: Payments | None,
    tenant_id: str,
    order_id: str,
    body: CardRefundIn,
    refund_id: str,
    actor: str,
) -> CardRefundOut:
    if payments is None:
        raise AdminError(503, "refunds are not available yet (starting)", "unavailable")
    try:
        done = await card_refunds.refund_to_card(
            payments, tenant_id, order_id, body.micros, refund_id, reason=body.reason, actor=actor
        )
    except card_refunds.UnknownOrder as error:
        raise NotFound(str(error)) from None
    except card_refunds.InvalidRefund as error:
        raise Invalid(str(error), error.field) from None
    except card_refunds.RefundIdReused as error:
        raise Conflict(str(error)) from None
    except PaymentsNotConfigured as error:
        raise AdminError(503, str(error), "unavailable") from None
    except PaymentProviderError as error:
        if error.retryable:
            raise AdminError(
                503,
                f"{error}: the refund is pending; ask again with the same refund_id (the wallet "
                "is debited once, Stripe refunds once)",
                "unavailable",
            ) from None
        raise AdminError(
            502, f"{error}: nothing was refunded, the wallet's debit was given back",
            "payment_provider_error",
        ) from None  # fmt: skip
    return refund_out(done.row, done.applied, done.balance_micros)


def refund_out(row: Any, applied: bool, balance: int) -> CardRefundOut:
    return CardRefundOut(
        id=row.id,
        refund_id=row.refund_id,
        tenant_id=row.tenant_id,
        order_id=row.order_id,
        amount_micros=row.amount_micros,
        amount_usd=usd(row.amount_micros) or "",
        status=row.status,
        stripe_refund_id=row.stripe_refund_id,
        failure=row.failure,
        reason=row.reason,
        applied=applied,
        balance_micros=balance,
        balance_usd=usd(balance) or "",
        created_at=row.created_at,
    )


def dispute_out(row: Any) -> DisputeOut:
    return DisputeOut(
        id=row.id,
        tenant_id=row.tenant_id,
        order_id=row.order_id,
        charge_id=row.charge_id,
        amount_micros=row.amount_micros,
        amount_usd=usd(row.amount_micros) or "",
        reason=row.reason,
        status=row.status,
        stripe_status=row.stripe_status,
        created_at=row.created_at,
        closed_at=row.closed_at,
    )


__all__ = ["dispute_out", "disputes", "refund_out", "refund_to_card"]
