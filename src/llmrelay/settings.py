"""Process settings from the environment: the only place that reads it.

Everything else receives a `Settings` built once at start-up, so a value cannot change
under a running process and tests can build their own without touching `os.environ`.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

MIB = 1024 * 1024
SECRET_KEY_MIN_BYTES = 32


class Environment(StrEnum):
    DEVELOPMENT = "development"
    PRODUCTION = "production"


class RedisFailurePolicy(StrEnum):
    FAIL_OPEN = "fail_open"
    FAIL_CLOSED = "fail_closed"


#: LLMRELAY_SMTP_STARTTLS (see Settings.smtp_starttls).
SmtpStartTls = Literal["auto", "required", "off"]


class SettingsError(ValueError):
    """A setting is missing or unsafe; the message names it."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LLMRELAY_", frozen=True, extra="ignore")

    database_url: str = "sqlite:///./llmrelay.db"
    redis_url: str | None = None
    secret_key: str | None = None
    admin_token: str | None = None
    bootstrap_admin_email: str | None = None
    bootstrap_admin_password: str | None = None
    env: Environment = Environment.DEVELOPMENT
    max_body_bytes: int = Field(default=16 * MIB, gt=0)
    trusted_proxies: Annotated[
        tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...], NoDecode
    ] = ()
    limits_on_redis_failure: RedisFailurePolicy = RedisFailurePolicy.FAIL_OPEN
    metrics_token: str | None = None
    # Extensions beyond the contract.
    drain_timeout_s: float = Field(default=30.0, ge=0)
    #: Slow and oversized clients (server_protocol.py, docs/security.md): a request head must
    #: be complete within LLMRELAY_HEADER_TIMEOUT_S of the connection opening (or of its first
    #: byte on a kept-alive connection) and no larger than LLMRELAY_MAX_HEADER_BYTES (else
    #: 408 / 431 and the connection is closed); a request body must be complete within
    #: LLMRELAY_BODY_TIMEOUT_S of its head (else 408 in the route's protocol, nothing sent to
    #: a provider). Raise the body limit for large bodies over slow links.
    header_timeout_s: float = Field(default=10.0, gt=0)
    body_timeout_s: float = Field(default=60.0, gt=0)
    max_header_bytes: int = Field(default=64 * 1024, ge=1024)
    #: Slow readers (server_protocol.py): an answer waiting to be written to a client is
    #: buffered up to LLMRELAY_CLIENT_WRITE_BUFFER_BYTES per connection; past it the gateway
    #: stops reading the provider (back-pressure) until the client has read most of it, and a
    #: client that leaves it full for LLMRELAY_SLOW_READER_TIMEOUT_S is cut (its request
    #: recorded, status 499 `client_too_slow`).
    slow_reader_timeout_s: float = Field(default=60.0, gt=0)
    client_write_buffer_bytes: int = Field(default=64 * 1024, ge=4096)
    #: A second listener, `host:port` (`[v6 address]:port`), for the control plane: the
    #: admin API, the console and /metrics are served there and not on the data-plane port,
    #: which keeps the model API and the health endpoints (docs/operations.md, "Admin
    #: listener"). Unset: everything on the one port. `serve --admin-listen` sets it too.
    admin_listen: str | None = None
    snapshot_poll_s: float = Field(default=2.0, gt=0)
    #: How often the event loop's lag is sampled for `llmrelay_event_loop_lag_seconds`
    #: (observability/loop_lag.py); 0 turns the sampler off.
    loop_lag_sample_s: float = Field(default=0.1, ge=0)
    log_level: str = "info"
    record_queue_size: int = Field(default=50_000, gt=0)
    #: Where request records wait while the database is unreachable (see `spool_path`).
    spool_dir: Path | None = None
    #: Each ended request's record and wallet-lease settle written to a local file in the
    #: spool directory until their batches commit (gateway/journal.py), so a killed process
    #: loses neither; false: they wait in memory only (about a second's worth at risk).
    journal: bool = True
    #: Output tokens a tpm reservation assumes for a request that sets no max tokens.
    tpm_default_output_tokens: int = Field(default=512, ge=0)
    #: On PostgreSQL without Redis, share the limits through the database (exact across
    #: replicas and workers; limits/postgres.py); false: each process counts alone (its
    #: 1/N share with `serve --workers N`), as before migration 0024.
    limits_on_database: bool = True
    #: Set by `serve --workers N` for its workers: without Redis each enforces 1/N of
    #: every limit (see docs/limits.md).
    workers: int = Field(default=1, ge=1)
    #: Request records older than this many days are deleted (unset: kept forever).
    record_retention_days: float | None = Field(default=None, gt=0)
    #: How often record and payload retention run (periodic jobs: one replica each round).
    retention_interval_s: float = Field(default=3600.0, gt=0)
    #: Captured payloads (keys with `capture: full`) older than this many days are deleted;
    #: unset: kept as long as their records. Never longer than the records either way.
    payload_retention_days: float | None = Field(default=None, gt=0)
    #: Provider health probes (jobs/probe.py): the waits before the next probe of a provider
    #: that is not online, after its 1st, 2nd, ... failed probe (seconds, comma-separated;
    #: the last repeats): 5, 10 and 30 minutes, then hourly.
    probe_delays_s: Annotated[tuple[float, ...], NoDecode] = (300.0, 600.0, 1800.0, 3600.0)
    #: How often the prices of virtual models without a price of their own are brought in
    #: line with the bundled catalogue (jobs/price_sync.py; a day).
    price_sync_interval_s: float = Field(default=86400.0, gt=0)
    #: The most of each captured body (request, response) that is kept; the rest is cut off.
    capture_max_bytes: int = Field(default=MIB, gt=0)
    #: The most characters of text guardrails screen in one request or answer; a body with
    #: more (for a key with rules in force) is refused with 413, never passed unscreened.
    guardrails_max_chars: int = Field(default=1_000_000, gt=0)
    #: False: no request records are written (for benchmarks and experiments only: usage,
    #: the usage API and budgets after a restart all read the records).
    record_requests: bool = True
    #: How often the hours with new records get their usage rollups recomputed.
    rollup_interval_s: float = Field(default=30.0, gt=0)
    #: A secret key that opens values sealed before the last rotation, never seals a new one
    #: (store/crypto.py; `llmrelay rotate-secret` re-seals them under LLMRELAY_SECRET_KEY).
    previous_secret_key: str | None = None
    #: Browser origins allowed to call /api/admin/* (comma-separated `scheme://host[:port]`,
    #: or `*`); none: no CORS headers at all. Never applied to /v1 (see admin/cors.py).
    cors_origins: Annotated[tuple[str, ...], NoDecode] = ()
    #: Whether those origins may send cookies; unset: true when origins are listed.
    cors_allow_credentials: bool | None = None
    #: Console sessions end after this long without a request, and this long after sign-in
    #: whatever happens (admin/identity/sessions.py).
    session_idle_s: float = Field(default=12 * 3600.0, gt=0)
    session_absolute_s: float = Field(default=7 * 86400.0, gt=0)
    #: Sign-in throttling: this many failures per account, or per client IP, within the window
    #: refuse further attempts (429) until the oldest failure leaves it.
    login_max_failures_per_account: int = Field(default=5, ge=1)
    login_max_failures_per_ip: int = Field(default=20, ge=1)
    login_throttle_window_s: float = Field(default=900.0, gt=0)
    #: Audit reads too: every authenticated GET of the admin API leaves an audit row (action
    #: `GET <route>`), not only changes. Off by default (a row per page view).
    audit_admin_reads: bool = False
    #: Durable jobs (jobs/): `serve` runs them in process unless this is false (then run
    #: `llmrelay worker` beside it); how many at once per process; a claim's lease (a worker
    #: silent this long is taken for dead and its job is run again); how often idle runners
    #: look for due jobs; how long finished jobs are kept.
    jobs_in_process: bool = True
    jobs_concurrency: int = Field(default=4, ge=1)
    jobs_lease_s: float = Field(default=60.0, ge=1)
    jobs_poll_s: float = Field(default=1.0, gt=0)
    jobs_keep_finished_s: float = Field(default=7 * 86400.0, gt=0)
    #: How often finished jobs past their expiry (a background response's TTL) are deleted.
    jobs_prune_interval_s: float = Field(default=300.0, gt=0)
    #: An idle runner's waits grow from LLMRELAY_JOBS_POLL_S up to this: what a job queued by
    #: another process (a replica with LLMRELAY_JOBS_IN_PROCESS=false) may wait at most.
    jobs_idle_poll_s: float = Field(default=5.0, gt=0)
    #: Background responses and queued generations (jobs/): kept this long from submission
    #: (a day), then deleted with their answer; one not finished by then fails `expired`.
    background_ttl_s: float = Field(default=86400.0, gt=0)
    #: Webhooks (jobs/webhooks/): hosts a webhook URL may name although they resolve to a
    #: private, link-local or otherwise internal address (comma-separated hostnames and
    #: CIDRs); loopback is never reached unless LLMRELAY_WEBHOOK_ALLOW_LOOPBACK is true too.
    webhook_allowed_hosts: Annotated[tuple[str, ...], NoDecode] = ()
    webhook_allow_loopback: bool = False
    #: The outbound address policy (outbound/): networks (CIDRs) and host names that providers
    #: and webhooks configured by a tenant may reach although they are private, loopback,
    #: link-local or otherwise internal (comma-separated). Cloud metadata addresses open only
    #: to an entry that names them: their host name, or the single address (/32, /128), for
    #: tenants and for the operator's own providers alike (docs/security.md).
    tenant_outbound_allow: Annotated[tuple[str, ...], NoDecode] = ()
    #: The waits between a failed delivery and its next attempt (seconds, comma-separated):
    #: one attempt more than waits (default: 8 attempts over about 27 hours).
    webhook_retry_schedule_s: Annotated[tuple[float, ...], NoDecode] = (
        5.0,
        300.0,
        1800.0,
        7200.0,
        18000.0,
        36000.0,
        36000.0,
    )
    #: One delivery attempt's limit (connect, send, the receiver's answer).
    webhook_timeout_s: float = Field(default=10.0, gt=0)
    #: Prepaid billing (docs/billing.md). The output a reservation assumes when a request
    #: sets no max tokens (the catalogue's `max_output` for the model, never more than this);
    #: a flat reservation for routes without a price (0: a prepaid request that could reach
    #: one is refused, 402 model_not_priced); the longest a reservation may wait for the
    #: database before the request is refused (503); settles waiting in memory at most.
    billing_default_max_output_tokens: int = Field(default=4096, ge=1)
    billing_unpriced_reserve_micros: int = Field(default=0, ge=0)
    billing_reserve_timeout_s: float = Field(default=5.0, gt=0)
    billing_settle_queue_size: int = Field(default=100_000, gt=0)
    #: Wallet leases (billing/allowance.py): a process reserves a chunk of a wallet (about
    #: `billing_lease_requests` reservations of the request that asked) and admits requests
    #: against it in memory; renewed while in use, reclaimed by reconciliation after
    #: `billing_lease_ttl_s` (and half of it again) without renewal. Off: one transaction per
    #: request, as before.
    billing_leases: bool = True
    billing_lease_requests: int = Field(default=64, ge=1)
    billing_lease_ttl_s: float = Field(default=120.0, gt=0)
    #: The reconciliation job (billing_reconcile): how often it runs; how long a top-up
    #: order may stay pending before it is looked up at Stripe; the margin past the longest
    #: model deadline after which a reservation still held is settled from its record.
    billing_reconcile_interval_s: float = Field(default=300.0, gt=0)
    billing_order_pending_s: float = Field(default=300.0, ge=0)
    billing_reservation_margin_s: float = Field(default=600.0, ge=0)
    #: Stripe (top-ups). The secret API key (sk_...), the webhook endpoint's signing secret
    #: (whsec_...), the API's address (a test server's in tests), where Checkout sends the
    #: payer back, the smallest and largest top-up in USD, and how old a webhook's signed
    #: timestamp may be.
    stripe_secret_key: str | None = None
    stripe_webhook_secret: str | None = None
    stripe_api_base: str = "https://api.stripe.com"
    stripe_success_url: str | None = None
    stripe_cancel_url: str | None = None
    stripe_min_topup_usd: Decimal = Field(default=Decimal(5), gt=0)
    stripe_max_topup_usd: Decimal = Field(default=Decimal(10_000), gt=0)
    stripe_webhook_tolerance_s: int = Field(default=300, ge=1)
    #: Mail (mail/): the SMTP server, `smtp://user:pass@host:587` (STARTTLS when offered) or
    #: `smtps://user:pass@host:465` (TLS from the first byte); unset: mails stay `pending`
    #: in the outbox (a warning says so) and go out once it is set.
    smtp_url: str | None = None
    #: `auto` (STARTTLS when the server offers it), `required` (refuse to send without it),
    #: `off` (never; loopback test servers only). smtps:// ignores it (always TLS).
    smtp_starttls: SmtpStartTls = Field(default="auto")
    #: A CA file to verify the SMTP server's certificate with (else the system's CAs).
    smtp_ca_file: Path | None = None
    smtp_timeout_s: float = Field(default=30.0, gt=0)
    #: The From of every mail: `Name <address>` or an address.
    mail_from: str = "llmrelay <noreply@localhost>"
    #: Development only: with no SMTP server, also log each mail's text (links included) to
    #: the console. Refused when LLMRELAY_ENV=production.
    mail_log: bool = False
    #: The first retry of a refused or failed send waits this long, doubling up to an hour.
    mail_retry_base_s: float = Field(default=30.0, ge=0)
    #: A mail still pending this long after it was queued is marked failed, not sent.
    mail_max_age_s: float = Field(default=2 * 86400.0, gt=0)
    #: The console's base URL as users reach it (`https://gateway.example.com`): every link
    #: a mail carries starts with it. Required in production for mails with links.
    public_url: str | None = None
    #: openai_codex providers (docs/codex.md): the ChatGPT OAuth issuer new sign-ins go to
    #: (an account refreshes at the issuer it signed in with), the OAuth client id (the
    #: public Codex CLI's), and how long before its expiry an access token is refreshed.
    codex_issuer: str = "https://auth.openai.com"
    codex_client_id: str = "app_EMoamEEZ73f0CkXaXp7hrann"
    codex_refresh_margin_s: float = Field(default=300.0, ge=0)
    #: The model API's base URL as applications reach it (`https://api.example.com`, no
    #: `/v1`): the console's Quickstart snippets and Playground use it. Unset: the address
    #: the browser reached the console at (right unless LLMRELAY_ADMIN_LISTEN puts the
    #: console on another port or host than the model API).
    public_api_url: str | None = None
    #: Browser origins allowed to call the model API (`/v1/*`) with CORS (comma-separated
    #: `scheme://host[:port]`); unset: the console's origin (LLMRELAY_PUBLIC_URL) when
    #: LLMRELAY_PUBLIC_API_URL names another origin, else none (no CORS headers at all).
    data_plane_cors_origins: Annotated[tuple[str, ...] | None, NoDecode] = None
    #: Self-service sign-up (`POST /api/admin/signup`): off unless true. A new tenant's wallet
    #: is prepaid (requests need a balance) unless LLMRELAY_SIGNUP_PREPAID=false, and starts
    #: with LLMRELAY_SIGNUP_FREE_CREDIT_USD (a ledger adjustment; 0: none).
    signup_enabled: bool = False
    signup_prepaid: bool = True
    signup_free_credit_usd: float = Field(default=0.0, ge=0, le=1_000_000)
    #: Sign-ups per client IP within the window (429 beyond).
    signup_max_per_ip: int = Field(default=5, ge=1)
    signup_window_s: float = Field(default=3600.0, gt=0)
    #: Password-reset requests per address and per client IP within the window (429 beyond).
    password_reset_max_per_account: int = Field(default=3, ge=1)
    password_reset_max_per_ip: int = Field(default=20, ge=1)
    password_reset_window_s: float = Field(default=3600.0, gt=0)
    #: How long the links of account mails work.
    invitation_ttl_s: float = Field(default=7 * 86400.0, gt=0)
    verification_ttl_s: float = Field(default=2 * 86400.0, gt=0)
    password_reset_ttl_s: float = Field(default=3600.0, gt=0)
    #: How often the low-balance and budget alerts look for wallets and budgets to mail about.
    alerts_interval_s: float = Field(default=60.0, gt=0)
    #: Single sign-on with OpenID Connect (admin/sso/, docs/console.md "Single sign-on"):
    #: the provider's issuer URL (its discovery document is read from it) and this gateway's
    #: client there; unset: no single sign-on. The secret is left out for a public client.
    oidc_issuer: str | None = None
    oidc_client_id: str | None = None
    oidc_client_secret: str | None = None
    #: Scopes asked for besides `openid`.
    oidc_scopes: str = "email profile groups"
    #: The ID token claim that lists the person's groups.
    oidc_groups_claim: str = "groups"
    #: `group=role` or `group=tenant-slug:role`, comma-separated (`platform_admin` makes a
    #: platform admin); a person's memberships follow them on every sign-in.
    oidc_role_map: str = ""
    #: The role, in the default tenant, of someone none of whose groups is mapped; unset:
    #: such a person is refused.
    oidc_default_role: str | None = None
    #: The sign-in button says "Sign in with <this>".
    oidc_name: str = "single sign-on"
    #: Only these email domains may sign in by single sign-on (comma-separated; empty: any).
    oidc_allowed_domains: str = ""
    #: The web console at `/` (console/); false: `/` and the console's pages answer the
    #: JSON 404 (an API-only gateway). The data plane never reaches it either way.
    console: bool = True

    @field_validator("admin_listen", mode="before")
    @classmethod
    def _check_admin_listen(cls, value: object) -> object:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        text = str(value).strip()
        match = _LISTEN.fullmatch(text)
        if match is None or not 0 < int(match["port"]) < 65536:
            raise ValueError(
                f"LLMRELAY_ADMIN_LISTEN: {text!r} is not host:port ([address]:port for IPv6), "
                "with a port from 1 to 65535"
            )
        return text

    @property
    def admin_address(self) -> tuple[str, int] | None:
        """LLMRELAY_ADMIN_LISTEN as (host, port); None when there is no admin listener."""
        if self.admin_listen is None:
            return None
        match = _LISTEN.fullmatch(self.admin_listen)
        assert match is not None  # checked when the settings were read
        return match["host"].strip("[]"), int(match["port"])

    @field_validator(
        "smtp_url",
        "public_url",
        "public_api_url",
        "oidc_issuer",
        "oidc_client_id",
        "oidc_client_secret",
        "oidc_default_role",
        mode="before",
    )
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("smtp_url")
    @classmethod
    def _check_smtp_url(cls, value: str | None) -> str | None:
        if value is not None and not _SMTP_URL.fullmatch(value):
            raise ValueError(
                "LLMRELAY_SMTP_URL: smtp://[user:password@]host[:port] or "
                "smtps://[user:password@]host[:port]"
            )
        return value

    @field_validator("public_url")
    @classmethod
    def _check_public_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip().rstrip("/")
        if not _PUBLIC_URL.fullmatch(value):
            raise ValueError(
                "LLMRELAY_PUBLIC_URL: the console's base URL, http(s)://host[:port][/path], "
                "no query or fragment"
            )
        return value

    @field_validator("public_api_url")
    @classmethod
    def _check_public_api_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip().rstrip("/")
        if value.endswith("/v1"):
            value = value[: -len("/v1")]
        if not _PUBLIC_URL.fullmatch(value):
            raise ValueError(
                "LLMRELAY_PUBLIC_API_URL: the model API's base URL, http(s)://host[:port][/path],"
                " no query or fragment"
            )
        return value

    @field_validator("data_plane_cors_origins", mode="before")
    @classmethod
    def _parse_data_plane_origins(cls, value: object) -> tuple[str, ...] | None:
        if value is None:
            return None
        items = value.split(",") if isinstance(value, str) else list(value)  # type: ignore[call-overload]
        found = tuple(str(item).strip().rstrip("/") for item in items if str(item).strip())
        for origin in found:
            if not _ORIGIN.fullmatch(origin):
                raise ValueError(
                    f"LLMRELAY_DATA_PLANE_CORS_ORIGINS: {origin!r} is not scheme://host[:port]"
                )
        return found

    @property
    def data_plane_origins(self) -> tuple[str, ...]:
        """The origins the model API answers CORS requests from (see the setting)."""
        if self.data_plane_cors_origins is not None:
            return self.data_plane_cors_origins
        if self.public_api_url is None or self.public_url is None:
            return ()
        console, api = _origin_of(self.public_url), _origin_of(self.public_api_url)
        return (console,) if console != api else ()

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _parse_cidrs(
        cls, value: object
    ) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        if value is None or value == "":
            return ()
        items = value.split(",") if isinstance(value, str) else list(value)  # type: ignore[call-overload]
        try:
            return tuple(ipaddress.ip_network(str(i).strip(), strict=False) for i in items if i)
        except ValueError as exc:
            raise ValueError(f"LLMRELAY_TRUSTED_PROXIES: {exc}") from exc

    @field_validator("webhook_allowed_hosts", "tenant_outbound_allow", mode="before")
    @classmethod
    def _parse_hosts(cls, value: object, info: ValidationInfo) -> tuple[str, ...]:
        """Hostnames (lower-cased, no trailing dot) and CIDRs, checked here so a typo
        stops the process at start rather than leaving a webhook refused."""
        if value is None or value == "":
            return ()
        variable = f"LLMRELAY_{(info.field_name or '').upper()}"
        items = value.split(",") if isinstance(value, str) else list(value)  # type: ignore[call-overload]
        hosts = []
        for item in (str(i).strip().lower().rstrip(".") for i in items):
            if not item:
                continue
            if "/" in item:
                try:
                    ipaddress.ip_network(item, strict=False)
                except ValueError as exc:
                    raise ValueError(f"{variable}: {exc}") from exc
            elif not _HOSTNAME.fullmatch(item):
                raise ValueError(f"{variable}: {item!r} is neither a hostname nor a CIDR")
            hosts.append(item)
        return tuple(hosts)

    @field_validator("webhook_retry_schedule_s", mode="before")
    @classmethod
    def _parse_schedule(cls, value: object) -> tuple[float, ...]:
        items = value.split(",") if isinstance(value, str) else list(value)  # type: ignore[call-overload]
        try:
            waits = tuple(float(str(i).strip()) for i in items if str(i).strip())
        except ValueError as exc:
            raise ValueError(f"LLMRELAY_WEBHOOK_RETRY_SCHEDULE_S: {exc}") from exc
        if any(wait < 0 for wait in waits):
            raise ValueError("LLMRELAY_WEBHOOK_RETRY_SCHEDULE_S: a wait cannot be negative")
        return waits

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _parse_origins(cls, value: object) -> tuple[str, ...]:
        """An origin is what a browser sends in `Origin`: scheme, host and port, no path;
        a trailing `/` is dropped, since no browser would ever send it."""
        if value is None or value == "":
            return ()
        items = value.split(",") if isinstance(value, str) else list(value)  # type: ignore[call-overload]
        origins = []
        for item in (str(i).strip().rstrip("/") for i in items):
            if not item:
                continue
            if item != "*" and not _ORIGIN.fullmatch(item):
                raise ValueError(
                    f"LLMRELAY_CORS_ORIGINS: {item!r} is not an origin "
                    "(scheme://host[:port], no path) or *"
                )
            origins.append(item)
        return tuple(origins)

    @field_validator("probe_delays_s", mode="before")
    @classmethod
    def _parse_delays(cls, value: object) -> tuple[float, ...]:
        items = value.split(",") if isinstance(value, str) else list(value)  # type: ignore[call-overload]
        try:
            delays = tuple(float(str(i).strip()) for i in items if str(i).strip())
        except ValueError as exc:
            raise ValueError(f"LLMRELAY_PROBE_DELAYS_S: {exc}") from exc
        if not delays or any(delay <= 0 for delay in delays):
            raise ValueError("LLMRELAY_PROBE_DELAYS_S: one or more waits, each above 0 seconds")
        return delays

    @property
    def cors_credentials(self) -> bool:
        """LLMRELAY_CORS_ALLOW_CREDENTIALS, defaulting to true when origins are listed."""
        if self.cors_allow_credentials is None:
            return bool(self.cors_origins)
        return self.cors_allow_credentials

    @property
    def sqlite_path(self) -> Path | None:
        """The SQLite file, or None when the database is not a SQLite file."""
        if not self.database_url.startswith("sqlite"):
            return None
        path = self.database_url.split(":///", 1)[1] if ":///" in self.database_url else ""
        if not path or path == ":memory:":
            return None
        return Path(path)

    @property
    def spool_path(self) -> Path | None:
        """LLMRELAY_SPOOL_DIR; else `<database file>.spool` next to a SQLite file, so the
        records wait beside the database they belong to; else `./llmrelay-spool`. None for
        an in-memory SQLite database: its records cannot outlive the process anyway."""
        if self.spool_dir is not None:
            return self.spool_dir
        db_path = self.sqlite_path
        if db_path is not None:
            return db_path.with_name(db_path.name + ".spool")
        if self.database_url.startswith("sqlite"):
            return None
        return Path("llmrelay-spool")


_LISTEN = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[^:\s\[\]]+):(?P<port>\d{1,5})")
_ORIGIN = re.compile(r"https?://[^/\s?#]+")
_HOSTNAME = re.compile(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*")
_SMTP_URL = re.compile(r"smtps?://([^@/\s]+@)?[^@/:\s]+(:\d{1,5})?/?")
_PUBLIC_URL = re.compile(r"https?://[^/\s?#]+(/[^\s?#]*)?")


def resolve_secret_key(settings: Settings) -> str:
    """The secret key to encrypt credentials with.

    Development without LLMRELAY_SECRET_KEY generates one once and keeps it next to the
    SQLite file (or in the working folder for other databases), so a restart can still
    decrypt what the last run stored.
    """
    if settings.secret_key:
        return settings.secret_key
    if settings.env is Environment.PRODUCTION:
        raise SettingsError("LLMRELAY_SECRET_KEY is required when LLMRELAY_ENV=production")
    db_path = settings.sqlite_path
    key_file = (
        db_path.with_name(db_path.name + ".secret-key") if db_path else Path(".llmrelay-secret-key")
    )
    if key_file.exists():
        return key_file.read_text().strip()
    key_file.parent.mkdir(parents=True, exist_ok=True)
    value = secrets.token_urlsafe(48)
    key_file.touch(mode=0o600)
    key_file.write_text(value + "\n")
    return value


def _origin_of(url: str) -> str:
    """`scheme://host[:port]` of a URL (a path dropped)."""
    scheme, _, rest = url.partition("://")
    return f"{scheme.lower()}://{rest.split('/', 1)[0].lower()}"
