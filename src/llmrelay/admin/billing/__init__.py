"""/api/admin/billing/{tenant_id}/...: a tenant's wallet, its ledger, reservations, refunds,
adjustments and top-up orders (endpoints, service, repository, schemas). The money moves
through billing/ (ledger, payments); may import admin.access, admin.audit, admin.kit, store
and billing."""
