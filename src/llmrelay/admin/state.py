"""What the admin routers share, filled in by the app's start-up (the engine and the sealer
exist only once the lifespan has run)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.admin_error import AdminError
from llmrelay.admin.identity.credentials import Passwords
from llmrelay.outbound.policy import OutboundPolicies
from llmrelay.settings import Environment, Settings
from llmrelay.store.crypto import Sealer

if TYPE_CHECKING:
    from llmrelay.billing.payments import Payments
    from llmrelay.jobs.probe import Prober
    from llmrelay.routing.breaker import Breakers
    from llmrelay.snapshot.signals import ConfigPublisher


@dataclass(frozen=True, slots=True)
class SessionPolicy:
    """Console sessions and sign-in throttling (Settings.session_* and login_*)."""

    idle_s: float = 12 * 3600.0
    absolute_s: float = 7 * 86400.0
    #: Secure cookies (HTTPS only): on when LLMRELAY_ENV=production.
    secure_cookies: bool = False
    max_failures_per_account: int = 5
    max_failures_per_ip: int = 20
    throttle_window_s: float = 900.0

    @classmethod
    def from_settings(cls, settings: Settings) -> SessionPolicy:
        return cls(
            idle_s=settings.session_idle_s,
            absolute_s=settings.session_absolute_s,
            secure_cookies=settings.env is Environment.PRODUCTION,
            max_failures_per_account=settings.login_max_failures_per_account,
            max_failures_per_ip=settings.login_max_failures_per_ip,
            throttle_window_s=settings.login_throttle_window_s,
        )


@dataclass(frozen=True, slots=True)
class AccountPolicy:
    """Account mails and self-service sign-up (Settings.public_url, signup_*, password_reset_*
    and the *_ttl_s lifetimes; admin/accounts, admin/signup)."""

    #: The console's base URL for links in mails; None: development uses the request's own
    #: base URL, production refuses to mail a link (a Host header must never make one).
    public_url: str | None = None
    production: bool = False
    signup_enabled: bool = False
    signup_prepaid: bool = True
    signup_free_credit_micros: int = 0
    signup_max_per_ip: int = 5
    signup_window_s: float = 3600.0
    reset_max_per_account: int = 3
    reset_max_per_ip: int = 20
    reset_window_s: float = 3600.0
    invitation_ttl_s: float = 7 * 86400.0
    verification_ttl_s: float = 2 * 86400.0
    password_reset_ttl_s: float = 3600.0
    #: Whether an SMTP server is configured (LLMRELAY_SMTP_URL): without one, mails wait in
    #: the outbox, and the answers that queue one say so.
    mail_configured: bool = False

    @classmethod
    def from_settings(cls, settings: Settings) -> AccountPolicy:
        return cls(
            public_url=settings.public_url,
            production=settings.env is Environment.PRODUCTION,
            signup_enabled=settings.signup_enabled,
            signup_prepaid=settings.signup_prepaid,
            signup_free_credit_micros=round(settings.signup_free_credit_usd * 1_000_000),
            signup_max_per_ip=settings.signup_max_per_ip,
            signup_window_s=settings.signup_window_s,
            reset_max_per_account=settings.password_reset_max_per_account,
            reset_max_per_ip=settings.password_reset_max_per_ip,
            reset_window_s=settings.password_reset_window_s,
            invitation_ttl_s=settings.invitation_ttl_s,
            verification_ttl_s=settings.verification_ttl_s,
            password_reset_ttl_s=settings.password_reset_ttl_s,
            mail_configured=settings.smtp_url is not None,
        )


@dataclass(slots=True)
class AdminState:
    admin_token: str | None
    engine: AsyncEngine | None = None
    #: Announces a committed config change to the replicas (snapshot/signals.py); None:
    #: they pick it up by polling.
    publisher: ConfigPublisher | None = None
    sessions: SessionPolicy = field(default_factory=SessionPolicy)
    #: Seals TOTP secrets (context = the user id) and provider credentials written through
    #: the API (context = the provider id); set at start-up with the engine.
    sealer: Sealer | None = None
    #: argon2 hashing of console passwords (admin/identity/credentials.py).
    passwords: Passwords = field(default_factory=Passwords)
    #: Probes a provider now (POST /providers/{id}/test); set at start-up with the engine.
    prober: Prober | None = None
    #: This process's circuit breakers (GET /providers/health shows their states).
    breakers: Breakers | None = None
    #: Wakes this process's job runner after a job was queued (None: no runner here).
    wake_jobs: Callable[[], None] | None = None
    #: Stripe top-ups (billing/payments.py); set at start-up with the engine.
    payments: Payments | None = None
    #: Invitations, verification and password-reset mails, sign-up (admin/accounts, signup).
    accounts: AccountPolicy = field(default_factory=AccountPolicy)
    #: Single sign-on (admin/sso/config.SsoConfig; None: off) and its provider's client.
    sso: Any = None
    sso_client: Any = None
    #: The outbound address policy a provider's base URL is judged by when it is saved
    #: (LLMRELAY_TENANT_OUTBOUND_ALLOW; outbound/policy.py).
    outbound: OutboundPolicies = field(default_factory=OutboundPolicies)
    #: LLMRELAY_AUDIT_ADMIN_READS: authenticated reads (GET, HEAD) are audited too.
    audit_reads: bool = False

    def database(self) -> AsyncEngine:
        if self.engine is None:
            raise AdminError(503, "the database is not open yet", "unavailable")
        return self.engine

    def probes(self) -> Prober:
        if self.prober is None:
            raise AdminError(503, "provider probes are not available yet", "unavailable")
        return self.prober

    def secrets(self) -> Sealer:
        if self.sealer is None:
            raise AdminError(503, "the secret key is not loaded yet", "unavailable")
        return self.sealer


#: The key of the AdminState a request is served with, in its ASGI scope (admin/app.py).
SCOPE_KEY = "llmrelay.admin_state"


def state_of(scope: Mapping[str, Any]) -> AdminState:
    """The AdminState the request is served with: the admin API is one app per process, each
    AdminState's requests carry theirs (admin/app.py, `AdminApp`)."""
    found: AdminState = scope[SCOPE_KEY]
    return found
