"""Self-service sign-up (`POST /api/admin/signup`, off unless LLMRELAY_SIGNUP_ENABLED=true): a
tenant, its default project, its wallet and a pending tenant admin in one transaction, with
the verification mail. May import admin.accounts, admin.audit, admin.errors, admin.identity,
admin.kit, billing.ledger, mail and store."""
