"""The rules of tenant preferences. The models named must be the tenant's own virtual models
(400 naming the field otherwise; and a model named here cannot be deleted:
admin/models/repository.users_of). The low-balance threshold is the wallet's
`low_balance_micros`: the wallet is made (not prepaid) if the tenant has none, and a new
threshold re-arms the alert. Any change moves the tenant's version. Flushes, never commits."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.kit import lookups
from llmrelay.admin.kit.problems import Invalid
from llmrelay.admin.preferences.schemas import PreferencesIn, PreferencesOut
from llmrelay.billing import ledger
from llmrelay.store.models import Tenant
from llmrelay.store.models_billing import Wallet
from llmrelay.store.types import utcnow

MODEL_FIELDS = ("default_model", "fallback_model")


async def read(session: AsyncSession, tenant: Tenant) -> PreferencesOut:
    stored = tenant.preferences or {}
    threshold = await session.scalar(
        select(Wallet.low_balance_micros).where(Wallet.tenant_id == tenant.id)
    )
    return PreferencesOut(
        tenant_id=tenant.id,
        default_model=stored.get("default_model"),
        fallback_model=stored.get("fallback_model"),
        low_balance_usd=None if threshold is None else threshold / 1_000_000,
        version=tenant.version,
    )


async def update_preferences(session: AsyncSession, tenant: Tenant, data: PreferencesIn) -> bool:
    """Apply the fields sent; whether anything changed."""
    sent = data.model_fields_set
    names = await lookups.model_names(session, tenant.id)
    stored = dict(tenant.preferences or {})
    changed = False
    for field in MODEL_FIELDS:
        if field not in sent:
            continue
        value = getattr(data, field)
        if value is not None and value not in names:
            raise Invalid(f"{field}: no model {value!r} in this tenant", field)
        if stored.get(field) != value:
            changed = True
            if value is None:
                stored.pop(field, None)
            else:
                stored[field] = value
    if changed:
        tenant.preferences = stored or None
    if "low_balance_usd" in sent:
        changed = await _threshold(session, tenant.id, data.low_balance_usd) or changed
    if changed:
        tenant.updated_at = utcnow()  # the version (ETag) moves with the wallet's part too
        await session.flush()
    return changed


async def _threshold(session: AsyncSession, tenant_id: str, usd: float | None) -> bool:
    micros = None if usd is None else round(usd * 1_000_000)
    current = await session.scalar(
        select(Wallet.low_balance_micros).where(Wallet.tenant_id == tenant_id)
    )
    if current == micros:
        return False
    await ledger.ensure_wallet(await session.connection(), tenant_id, prepaid=False)
    await session.execute(
        update(Wallet)
        .where(Wallet.tenant_id == tenant_id)
        .values(low_balance_micros=micros, low_balance_alerted_at=None, updated_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    return True
