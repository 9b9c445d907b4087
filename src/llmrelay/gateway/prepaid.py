"""The prepaid reservation of one model call (only calls of a prepaid tenant come here:
`KeySnap.prepaid`, one check in Dispatcher.answer). Which routes the call can reach is the
gateway's knowledge (pin, routing policy, fallback models); what they may cost and the
transaction are billing's (billing/estimate.py, billing/prepaid.py). Billing's refusals
become the client protocol's errors here, in one place:

    InsufficientBalance, NoWallet   402 insufficient_balance
    Unpriced                        402 model_not_priced
    RequestIdUsed                   409 request_id_reused
    LedgerUnavailable               503 billing_unavailable (retryable; never served unbilled)

A request whose id this process minted (gateway/ids.MINTED_ID) is admitted in memory
against its wallet's allowance (billing/allowance.py); one with the client's own id reserves
with a transaction, which proves the id unused.

Compiled (compiled_modules.py), as is billing's side of a request admitted in memory: a
prepaid request's own cost is held to within a quarter of an unbilled one's
(docs/performance.md, "One wallet at the gateway's rate").
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Final

from llmrelay.billing.errors import (
    InsufficientBalance,
    LedgerUnavailable,
    NoWallet,
    RequestIdUsed,
    Unpriced,
)
from llmrelay.billing.estimate import ReservePolicy, input_bound, reservation
from llmrelay.billing.prepaid import Prepaid
from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.capabilities import price_for
from llmrelay.gateway.errors import (
    BillingUnavailable,
    PaymentRequired,
    RequestIdReused,
)
from llmrelay.gateway.executor import candidates
from llmrelay.gateway.ids import MINTED_ID
from llmrelay.metering.estimate import prompt_chars
from llmrelay.providers.base import Operation
from llmrelay.snapshot.model import ModelSnap, PolicySnap, RouteSnap, Snapshot

#: Operations that generate no output (the reservation is the prompt's alone).
_EMBEDDINGS: Final = frozenset(
    {Operation.EMBEDDINGS, Operation.GEMINI_EMBED, Operation.GEMINI_BATCH_EMBED}
)


def reachable(
    snapshot: Snapshot,
    tenant_id: str,
    model: ModelSnap,
    pinned: str | None,
    policy: PolicySnap | None,
) -> list[tuple[ModelSnap, Sequence[RouteSnap]]]:
    """The models (the one asked for, then its fallbacks unless pinned) and the routes of
    each the call may be sent to, as the planner would choose them."""
    found: list[tuple[ModelSnap, Sequence[RouteSnap]]] = [
        (model, candidates(model, pinned, policy))
    ]
    if pinned is not None:
        return found
    for name in (*model.fallbacks, *model.context_fallbacks):
        other = snapshot.model(tenant_id, name)
        if other is None or other is model or other.embedding != model.embedding:
            continue
        found.append((other, candidates(other, None, policy)))
    return found


def budget_hold(
    policy: ReservePolicy,
    record: CallRecord,
    operation: Operation,
    payload: dict[str, Any],
    snapshot: Snapshot,
    model: ModelSnap,
    pinned: str | None,
    route_policy: PolicySnap | None,
) -> int:
    """What a call of a key or project with a monthly budget holds from the budget until it
    settles: the prepaid reservation (the most it can cost on any route it may reach), so
    budgets are hard caps on the same prices and output limits as wallets; its prompt is
    bounded by its characters, not counted (the count's regex walk costs milliseconds for a
    long prompt, on every budgeted request). 0 when a reachable route has no price: such a
    call is metered at cost 0 anyway (docs/limits.md)."""
    try:
        return reservation(
            payload,
            reachable(snapshot, record.tenant_id or "", model, pinned, route_policy),
            price_for,
            time.time(),
            policy,
            generates=operation not in _EMBEDDINGS,
            tokens_in=prompt_chars(payload),
        )
    except Unpriced:
        return 0


async def reserve(
    prepaid: Prepaid | None,
    record: CallRecord,
    operation: Operation,
    payload: dict[str, Any],
    snapshot: Snapshot,
    model: ModelSnap,
    pinned: str | None,
    policy: PolicySnap | None,
) -> None:
    """Reserve for the call before any provider is asked; the call's record is marked so
    its end settles (gateway/ending.py). Raises the errors in the module's table.

    A call whose id this process minted is first admitted in memory with its prompt bounded
    by its characters (`prompt_chars`, at least the count: the reservation only grows), which
    costs no regex walk over the prompt: the count took 5-10 µs for a short chat and
    milliseconds for an agent's long one, on every prepaid request. Only when the wallet's
    allowance cannot take that bound is the prompt counted, so a refusal (and any grant it
    waits for) is decided on the reservation billing/estimate.py documents."""
    if prepaid is None:
        raise BillingUnavailable("prepaid billing is not running in this process")
    tenant_id = record.tenant_id or ""
    request_id = record.request_id
    routes = reachable(snapshot, tenant_id, model, pinned, policy)
    generates = operation not in _EMBEDDINGS
    minted = MINTED_ID.get() == request_id
    try:
        # Without leases (LLMRELAY_BILLING_LEASES=false) nothing is admitted in memory.
        if minted and prepaid.leases is not None:
            now, budgets = time.time(), prepaid.policy
            bound = reservation(
                payload, routes, price_for, now, budgets, generates=generates,
                tokens_in=input_bound(payload),
            )  # fmt: skip

            def exact() -> int:
                """The reservation on the counted prompt, should the bound stand in the way
                of another request (billing/allowance.Leases.true_up)."""
                try:
                    return reservation(
                        payload, routes, price_for, now, budgets, generates=generates
                    )
                except Unpriced:  # (priced a moment ago at the same time: not expected)
                    return bound

            project_id, key_id = record.project_id, record.key_id
            if prepaid.admit_quickly(tenant_id, request_id, bound, project_id, key_id, exact):
                record.reserved = True
                return
        amount = reservation(
            payload, routes, price_for, time.time(), prepaid.policy, generates=generates
        )
    except Unpriced as unpriced:
        prepaid.count_refusal("unpriced")
        raise PaymentRequired(str(unpriced), code="model_not_priced", param="model") from None
    try:
        await prepaid.reserve(
            tenant_id,
            request_id,
            amount,
            project_id=record.project_id,
            key_id=record.key_id,
            minted=minted,
        )
    except (InsufficientBalance, NoWallet) as refused:
        prepaid.count_refusal("insufficient")
        raise PaymentRequired(str(refused)) from None
    except RequestIdUsed as reused:
        raise RequestIdReused(str(reused), param="x-request-id") from None
    except LedgerUnavailable as unavailable:
        raise BillingUnavailable(str(unavailable), headers={"Retry-After": "1"}) from None
    record.reserved = True
