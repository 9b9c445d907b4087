"""Account life cycle by mail: invitations, email verification and password resets (single-use
link tokens, only their SHA-256 kept), and the throttles of the public routes. May import
admin.access, admin.audit, admin.errors, admin.identity, admin.kit, admin.users, mail and
store."""
