"""/api/admin/tenants/{tenant_id}/preferences: a tenant's default and fallback models (read by
the data plane through the snapshot) and its low-balance alert threshold (its wallet's). May
import admin.access, admin.audit, admin.kit, admin.tenants, billing.ledger and store."""
