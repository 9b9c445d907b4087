"""The identity and access routers of the admin API (sign-in and sessions, tenants and their
preferences, users and memberships, invitations and the account mails, sign-up, the audit
log) and the audit middleware, mounted by admin/app.py in one call."""

from __future__ import annotations

from fastapi import FastAPI

from llmrelay.admin.accounts import endpoints as accounts
from llmrelay.admin.audit import AuditMiddleware
from llmrelay.admin.audit_log import endpoints as audit_log
from llmrelay.admin.identity import endpoints as identity
from llmrelay.admin.identity import passkey_routes, session_routes
from llmrelay.admin.invitations import endpoints as invitations
from llmrelay.admin.outbox import endpoints as outbox
from llmrelay.admin.preferences import endpoints as preferences
from llmrelay.admin.signup import endpoints as signup
from llmrelay.admin.sso import endpoints as sso
from llmrelay.admin.tenants import endpoints as tenants
from llmrelay.admin.users import endpoints as users


def include(app: FastAPI) -> None:
    for router in (
        sso.router,  # before identity: /auth/sso is not an identity route
        identity.router,
        session_routes.router,
        passkey_routes.router,
        invitations.router,  # before accounts: GET /invitations is its own
        accounts.router,
        outbox.router,
        signup.router,
        tenants.router,
        preferences.router,
        users.router,
        audit_log.router,
    ):
        app.include_router(router)
    # Inside FastAPI's error handling: it sees the status of every handled error (400, 403,
    # 409...); an unhandled one is written as 500 before it propagates.
    app.add_middleware(AuditMiddleware)
