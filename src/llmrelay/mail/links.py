"""The links mails carry: the console's base URL (LLMRELAY_PUBLIC_URL) and the console page
each kind of link opens. A token travels in the query string (`?token=`); the page posts it
to the admin API (docs/billing.md, "Mail, accounts, sign-up, preferences and alerts")."""

from __future__ import annotations

from urllib.parse import urlencode

#: Console pages a mail links to.
ACCEPT_INVITATION = "/accept-invitation"
VERIFY_EMAIL = "/verify-email"
RESET_PASSWORD = "/reset-password"
SIGN_IN = "/"
BILLING = "/billing"
USAGE = "/usage"

#: Where alert mails point when LLMRELAY_PUBLIC_URL is unset (development only: production
#: refuses to start with SMTP but without it, startup_checks.py).
DEVELOPMENT_BASE = "http://127.0.0.1:8080"


def link(base: str, path: str, **query: str) -> str:
    url = base.rstrip("/") + path
    return f"{url}?{urlencode(query)}" if query else url
