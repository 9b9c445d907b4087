"""The database schema. Every change here needs an Alembic revision in migrations/versions."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
    true,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, declared_attr, mapped_column

from llmrelay.store.types import BigIntPK, JSONDoc, UTCDateTime, utcnow

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

DEFAULT_TENANT_SLUG = "default"

#: Who set a provider's base URL (`providers.declared_by`): the outbound address policy
#: judges a tenant's provider by stricter rules than the operator's (outbound/policy.py).
OPERATOR_DECLARED = "operator"
TENANT_DECLARED = "tenant"

#: A key's payload capture: "off" (the default) or "full" (request and response bodies).
CAPTURE_OFF = "off"
CAPTURE_FULL = "full"


def new_id() -> str:
    return uuid.uuid4().hex


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime, dict[str, Any]: JSONDoc}


class Timestamped:
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class Versioned:
    """An optimistic-concurrency counter (migration 0012): every ORM UPDATE or DELETE checks
    the version it read and moves it, so two writers cannot silently overwrite each other.
    The admin API shows it as the ETag and wants it back in If-Match."""

    version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")

    @declared_attr.directive
    def __mapper_args__(cls) -> dict[str, Any]:
        return {"version_id_col": cls.version}


class Tenant(Versioned, Timestamped, Base):
    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    slug: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    #: Members must have two-factor authentication on to act in the tenant (migration 0011).
    require_2fa: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    #: Tenant preferences (migration 0014): {"default_model", "fallback_model"}; None = none.
    preferences: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc, nullable=True)


class RoutingPolicy(Versioned, Timestamped, Base):
    """Constraints on the routes a key may reach, bound to a key, a project or the gateway
    (the `routing` setting's `policy_id`); the most specific binding applies alone."""

    __tablename__ = "routing_policies"
    __table_args__ = (UniqueConstraint("tenant_id", "name"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))
    #: Allowlists of provider slugs, route tags and provider regions; None = any.
    providers: Mapped[list[str] | None] = mapped_column(JSONDoc, nullable=True)
    tags: Mapped[list[str] | None] = mapped_column(JSONDoc, nullable=True)
    regions: Mapped[list[str] | None] = mapped_column(JSONDoc, nullable=True)
    #: Replaces the strategy of every model the bound keys call; None = the model's own.
    strategy: Mapped[str | None] = mapped_column(String(32))


class Project(Versioned, Timestamped, Base):
    __tablename__ = "projects"
    __table_args__ = (UniqueConstraint("tenant_id", "name"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))
    #: Virtual model names the project may use; None = every model.
    allowed_models: Mapped[list[str] | None] = mapped_column(JSONDoc, nullable=True)
    rpm: Mapped[int | None]
    tpm: Mapped[int | None]
    concurrency: Mapped[int | None]
    monthly_budget_micros: Mapped[int | None] = mapped_column(BigInteger)
    #: The project's routing policy binding. No ON DELETE action: a bound policy cannot be
    #: deleted (unbinding it silently would widen the keys' routes).
    routing_policy_id: Mapped[str | None] = mapped_column(ForeignKey("routing_policies.id"))
    #: The secret that signs the project's webhook events (jobs/webhooks.py), sealed
    #: (context = the project id); made on first use, rotated through the admin API (0013).
    webhook_secret_sealed: Mapped[str | None] = mapped_column(Text)


class ApiKey(Versioned, Timestamped, Base):
    __tablename__ = "api_keys"
    __table_args__ = (UniqueConstraint("project_id", "name"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    project_id: Mapped[str] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(200))
    #: SHA-256 hex digest of the whole key; the key itself is never stored.
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    last_four: Mapped[str] = mapped_column(String(4))
    status: Mapped[str] = mapped_column(String(16), default="active")
    expires_at: Mapped[datetime | None]
    allowed_models: Mapped[list[str] | None] = mapped_column(JSONDoc, nullable=True)
    ip_allowlist: Mapped[list[str]] = mapped_column(JSONDoc, default=list)
    #: The APIs the key may call (names from apikeys.SCOPES); null = every API (0017).
    scopes: Mapped[list[str] | None] = mapped_column(JSONDoc, nullable=True)
    rpm: Mapped[int | None]
    tpm: Mapped[int | None]
    concurrency: Mapped[int | None]
    monthly_budget_micros: Mapped[int | None] = mapped_column(BigInteger)
    #: Who owns the row: "config" (declarative file), "generated", "demo" or "api".
    source: Mapped[str] = mapped_column(String(16), default="config")
    last_used_at: Mapped[datetime | None]
    #: The key's own routing policy binding; it wins over the project's (see Project).
    routing_policy_id: Mapped[str | None] = mapped_column(ForeignKey("routing_policies.id"))
    #: Payload capture, CAPTURE_OFF or CAPTURE_FULL (see RequestPayload).
    capture: Mapped[str] = mapped_column(String(8), default=CAPTURE_OFF, server_default="off")
    #: Set on the row that keeps a rotated-out secret alive for its grace period: the key
    #: it is a secret of (admin/keys/service.py rotate_key). Revoking, disabling or deleting
    #: that key ends this secret too (migration 0016).
    rotated_from_id: Mapped[str | None] = mapped_column(
        ForeignKey("api_keys.id", ondelete="CASCADE"), index=True
    )


class Provider(Versioned, Timestamped, Base):
    __tablename__ = "providers"
    __table_args__ = (UniqueConstraint("tenant_id", "slug"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    slug: Mapped[str] = mapped_column(String(64))
    type: Mapped[str] = mapped_column(String(32))
    base_url: Mapped[str | None] = mapped_column(String(500))
    #: AES-GCM sealed JSON {"api_key": ..., "headers": {...}}; see store/crypto.py.
    credentials_sealed: Mapped[str | None] = mapped_column(Text)
    credentials_key_id: Mapped[str | None] = mapped_column(String(16))
    api_key_last_four: Mapped[str | None] = mapped_column(String(4))
    timeout_s: Mapped[float | None] = mapped_column(Float)
    connect_timeout_s: Mapped[float | None] = mapped_column(Float)
    first_token_timeout_s: Mapped[float | None] = mapped_column(Float)
    stream_idle_timeout_s: Mapped[float | None] = mapped_column(Float)
    api_version: Mapped[str | None] = mapped_column(String(32))
    #: A free-form region label that routing policies can require.
    region: Mapped[str | None] = mapped_column(String(64))
    #: A known OpenAI-compatible server (providers/presets.py), or None.
    preset: Mapped[str | None] = mapped_column(String(32))
    #: The upstream models this provider offers (admin API inventory; migration 0012):
    #: [{"id": "gpt-4o-mini", ...}], or None when nobody listed them.
    model_inventory: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONDoc, nullable=True)
    #: Who set its base URL last (migration 0020): "operator" (the YAML config, the admin
    #: token, a platform admin) or "tenant" (a tenant's admin). Chooses the outbound address
    #: policy its connections are judged by (outbound/policy.py).
    declared_by: Mapped[str] = mapped_column(
        String(16), default=OPERATOR_DECLARED, server_default=OPERATOR_DECLARED
    )


class ProviderResource(Versioned, Timestamped, Base):
    """One account or credential of a provider (migration 0028): a provider with resources
    sends each attempt with one of them, chosen by priority, then by the route's strategy,
    each with its own health (a breaker of its own) and quota buckets. A provider without
    any uses its own credential, as it always did (gateway/resources.py)."""

    __tablename__ = "provider_resources"
    __table_args__ = (UniqueConstraint("provider_id", "name"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    provider_id: Mapped[str] = mapped_column(
        ForeignKey("providers.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(64))
    #: AES-GCM sealed JSON {"api_key": ..., "headers": {...}} under the resource's own id,
    #: as a provider's (store/credentials.py).
    credentials_sealed: Mapped[str | None] = mapped_column(Text)
    credentials_key_id: Mapped[str | None] = mapped_column(String(16))
    api_key_last_four: Mapped[str | None] = mapped_column(String(4))
    priority: Mapped[int] = mapped_column(Integer, default=0)
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    #: An administrator's switch: a disabled resource is never tried, whatever its health.
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    #: Its quota buckets: requests and tokens per minute (None: no bucket).
    rpm: Mapped[int | None] = mapped_column(Integer)
    tpm: Mapped[int | None] = mapped_column(Integer)
    position: Mapped[int] = mapped_column(Integer, default=0)


class VirtualModel(Versioned, Timestamped, Base):
    __tablename__ = "virtual_models"
    __table_args__ = (UniqueConstraint("tenant_id", "name"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))
    strategy: Mapped[str] = mapped_column(String(32), default="priority")
    retry_attempts: Mapped[int] = mapped_column(Integer, default=1)
    retry_backoff_ms: Mapped[int] = mapped_column(Integer, default=200)
    deadline_s: Mapped[float] = mapped_column(Float, default=300.0)
    fallbacks: Mapped[list[str]] = mapped_column(JSONDoc, default=list)
    context_fallbacks: Mapped[list[str]] = mapped_column(JSONDoc, default=list)
    embedding: Mapped[bool] = mapped_column(Boolean, default=False)
    #: Sticky routing per conversation (migration 0017): on, and how long an idle
    #: conversation keeps its route.
    affinity_enabled: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    affinity_ttl_s: Mapped[float] = mapped_column(Float, default=3600.0, server_default="3600")
    #: Mid-stream rescue (migration 0023): off unless the operator opts in.
    stream_rescue: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class Route(Versioned, Timestamped, Base):
    __tablename__ = "routes"
    __table_args__ = (UniqueConstraint("model_id", "provider_id", "upstream_model"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    model_id: Mapped[str] = mapped_column(
        ForeignKey("virtual_models.id", ondelete="CASCADE"), index=True
    )
    provider_id: Mapped[str] = mapped_column(
        ForeignKey("providers.id", ondelete="CASCADE"), index=True
    )
    upstream_model: Mapped[str] = mapped_column(String(200))
    priority: Mapped[int] = mapped_column(Integer, default=0)
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    tag: Mapped[str | None] = mapped_column(String(64))
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    #: Order in the declaring list; strategy "fixed" follows it.
    position: Mapped[int] = mapped_column(Integer, default=0)
    #: What the upstream model can do (config `capabilities`; keys left out are unknown).
    capabilities: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc, nullable=True)
    #: What this route costs: {"input": micro-USD per Mtok, "output": ...} (strategy cost_first).
    pricing: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc, nullable=True)


#: `PriceVersion.source` of versions the price sync job made from the bundled catalogue
#: (the others: "config" from `llmrelay apply`, "api" from the admin API).
CATALOGUE_SOURCE = "catalogue"


class PriceVersion(Base):
    """A model's prices from a moment on; never updated, superseded by a newer row."""

    __tablename__ = "price_versions"
    __table_args__ = (Index(None, "model_id", "effective_from"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    model_id: Mapped[str] = mapped_column(ForeignKey("virtual_models.id", ondelete="CASCADE"))
    effective_from: Mapped[datetime]
    #: Integer micro-USD per million tokens, by bucket; None = not priced.
    input_micros_per_mtok: Mapped[int | None] = mapped_column(BigInteger)
    output_micros_per_mtok: Mapped[int | None] = mapped_column(BigInteger)
    cached_input_micros_per_mtok: Mapped[int | None] = mapped_column(BigInteger)
    cache_write_micros_per_mtok: Mapped[int | None] = mapped_column(BigInteger)
    source: Mapped[str] = mapped_column(String(16), default="config")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class GatewaySetting(Base):
    """Gateway-wide settings from the declarative config: `routing` holds the breaker
    settings and `policy_id`, the global routing policy binding (absent: none)."""

    __tablename__ = "gateway_settings"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[dict[str, Any]]
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class ConfigGeneration(Base):
    """One row whose counter moves whenever configuration changes; replicas poll it."""

    __tablename__ = "config_generation"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    generation: Mapped[int] = mapped_column(BigInteger, default=0)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class RequestRecord(Base):
    """One row per data-plane request, written in batches off the request path.

    On PostgreSQL the table is partitioned by month of `created_at` (migration 0009,
    store/partitions.py), and a partitioned table's unique keys must include the partition
    key: there the primary key is (id, created_at) and request ids are unique together with
    created_at. The keys below are SQLite's; the `partition_key` info tells the recorder's
    INSERT which conflict target PostgreSQL needs (gateway/record_writers.py)."""

    __tablename__ = "request_records"
    __table_args__ = (
        Index(None, "project_id", "created_at"),
        {"info": {"partition_key": "created_at"}},
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    request_id: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(index=True)
    tenant_id: Mapped[str | None] = mapped_column(String(32))
    project_id: Mapped[str | None] = mapped_column(String(32))
    key_id: Mapped[str | None] = mapped_column(String(32))
    endpoint: Mapped[str] = mapped_column(String(64))
    virtual_model: Mapped[str | None] = mapped_column(String(200))
    provider: Mapped[str | None] = mapped_column(String(64))
    upstream_model: Mapped[str | None] = mapped_column(String(200))
    stream: Mapped[bool] = mapped_column(Boolean, default=False)
    status_code: Mapped[int] = mapped_column(Integer)
    error_code: Mapped[str | None] = mapped_column(String(64))
    latency_ms: Mapped[float] = mapped_column(Float)
    ttfb_ms: Mapped[float | None] = mapped_column(Float)
    prompt_tokens: Mapped[int | None]
    completion_tokens: Mapped[int | None]
    #: Upstream attempts (retries and failovers included) and the route that answered last.
    attempts: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    route_id: Mapped[str | None] = mapped_column(String(32))
    #: The routing policy in force for the key (none bound: None).
    policy_id: Mapped[str | None] = mapped_column(String(32))
    #: What the request cost by the price in force (micro-USD): the sum of the buckets
    #: below; 0 with price_source "unknown" when no price was known (None: older rows).
    cost_micros: Mapped[int | None] = mapped_column(BigInteger)
    #: "openai", "anthropic" or "gemini": the client's protocol (`endpoint` says which one).
    protocol: Mapped[str | None] = mapped_column(String(16))
    #: Usage in billing buckets, mutually exclusive (metering/usage.py); prompt_tokens is
    #: their input sum and completion_tokens equals output_tokens. reasoning_tokens is
    #: within output_tokens.
    input_tokens: Mapped[int | None]
    cached_input_tokens: Mapped[int | None]
    cache_write_tokens: Mapped[int | None]
    output_tokens: Mapped[int | None]
    reasoning_tokens: Mapped[int | None]
    #: "reported" (by the provider), "estimated" (counted here) or "none" (no output).
    usage_source: Mapped[str] = mapped_column(String(16), server_default="none")
    input_cost_micros: Mapped[int | None] = mapped_column(BigInteger)
    cached_input_cost_micros: Mapped[int | None] = mapped_column(BigInteger)
    cache_write_cost_micros: Mapped[int | None] = mapped_column(BigInteger)
    output_cost_micros: Mapped[int | None] = mapped_column(BigInteger)
    #: The price version used (a price_versions id, `route:<id>` or `catalogue:<id>@<date>`)
    #: and where it came from: model, route, catalogue or unknown.
    price_version: Mapped[str | None] = mapped_column(String(80))
    price_source: Mapped[str | None] = mapped_column(String(16))
    client_ip: Mapped[str | None] = mapped_column(String(64))
    user_agent: Mapped[str | None] = mapped_column(String(200))
    #: The provider resource (account) that answered last; None without resources (0028).
    resource_id: Mapped[str | None] = mapped_column(String(32))


class RequestAttempt(Base):
    """One upstream attempt of a request that needed more than one, or whose attempt
    failed (a request its first attempt answered is described by its record alone)."""

    __tablename__ = "request_attempts"
    __table_args__ = (UniqueConstraint("request_id", "attempt"),)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    request_id: Mapped[str] = mapped_column(String(64), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime]
    route_id: Mapped[str | None] = mapped_column(String(32))
    provider: Mapped[str | None] = mapped_column(String(64))
    upstream_model: Mapped[str | None] = mapped_column(String(200))
    #: "first", "retry" (same route again) or "fallback" (another route or model)
    kind: Mapped[str] = mapped_column(String(16))
    #: The provider's HTTP status, or None when there was none (connection error, timeout)
    status_code: Mapped[int | None] = mapped_column(Integer)
    #: What went wrong ("ok" for the attempt that answered)
    outcome: Mapped[str] = mapped_column(String(64))
    latency_ms: Mapped[float] = mapped_column(Float)
    #: What the attempt used and cost, when it produced output: the answering attempt, or a
    #: part of a stream that broke off and was continued elsewhere (mid-stream rescue; its
    #: usage estimated when its provider reported none). Null for attempts that failed
    #: before any output (they cost nothing).
    input_tokens: Mapped[int | None] = mapped_column(Integer)
    output_tokens: Mapped[int | None] = mapped_column(Integer)
    cost_micros: Mapped[int | None] = mapped_column(BigInteger)
    #: The provider resource the attempt used (None without resources; 0028).
    resource_id: Mapped[str | None] = mapped_column(String(32))


class RequestPayload(Base):
    """The bodies of one request whose key captures them (gateway/capture.py), apart from
    its record so that usage queries and analytics never read a body. Bytes as they crossed
    the wire (not text: a body cut at the cap may end inside a UTF-8 character, and it is
    kept exactly as sent); each capped at LLMRELAY_CAPTURE_MAX_BYTES, with the full size and
    a truncation flag. `created_at` is its record's, so retention never keeps a payload past
    its record (store/payload_retention.py). No foreign key to the record: they are written
    in the same transaction, and records may be partitioned on PostgreSQL."""

    __tablename__ = "request_payloads"

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    request_id: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(index=True)
    #: None: the body was never read in full (refused as too large, or the client left).
    request_body: Mapped[bytes | None] = mapped_column(LargeBinary)
    #: None: no answer was sent (the client left first).
    response_body: Mapped[bytes | None] = mapped_column(LargeBinary)
    request_truncated: Mapped[bool] = mapped_column(Boolean, default=False)
    response_truncated: Mapped[bool] = mapped_column(Boolean, default=False)
    #: The bodies' full sizes, before the cap.
    request_bytes: Mapped[int | None] = mapped_column(BigInteger)
    response_bytes: Mapped[int | None] = mapped_column(BigInteger)


class UsageRollup(Base):
    """Request records summed per hour and (tenant, project, key, model, provider): what the
    usage API and budgets read instead of scanning records (store/rollups.py). Missing
    dimensions are '' (not NULL) so the unique key holds on both databases. An hour's rows are
    always recomputed whole from its records, never incremented: a replayed or retried batch
    cannot count twice."""

    __tablename__ = "usage_rollups"
    __table_args__ = (
        UniqueConstraint(
            "hour",
            "tenant_id",
            "project_id",
            "key_id",
            "virtual_model",
            "provider",
            "resource_id",
            name="uq_usage_rollups_dimensions",
        ),
        Index("ix_usage_rollups_project_id_hour", "project_id", "hour"),
        Index("ix_usage_rollups_key_id_hour", "key_id", "hour"),
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    hour: Mapped[datetime]  # the hour's start, UTC; first in the unique key
    tenant_id: Mapped[str] = mapped_column(String(32))
    project_id: Mapped[str] = mapped_column(String(32))
    key_id: Mapped[str] = mapped_column(String(32))
    virtual_model: Mapped[str] = mapped_column(String(200))
    provider: Mapped[str] = mapped_column(String(64))
    #: The provider resource ('' for none; migration 0028).
    resource_id: Mapped[str] = mapped_column(String(32), server_default="")
    requests: Mapped[int] = mapped_column(BigInteger)
    errors: Mapped[int] = mapped_column(BigInteger)
    estimated: Mapped[int] = mapped_column(BigInteger)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger)
    cached_input_tokens: Mapped[int] = mapped_column(BigInteger)
    cache_write_tokens: Mapped[int] = mapped_column(BigInteger)
    output_tokens: Mapped[int] = mapped_column(BigInteger)
    reasoning_tokens: Mapped[int] = mapped_column(BigInteger)
    cost_micros: Mapped[int] = mapped_column(BigInteger)
    #: Counts per latency bin (rollups.LATENCY_BINS_MS), for percentiles.
    latency_bins: Mapped[list[int]] = mapped_column(JSONDoc)
    ttfb_bins: Mapped[list[int]] = mapped_column(JSONDoc)


class UsageRollupDirty(Base):
    """Hours whose records changed since their rollup was computed. The recorder marks an
    hour in the same transaction as the records it writes (bumping `version`); the rollup
    task recomputes the hour and removes the mark only if `version` is still the one it read,
    so a batch committed during a recompute is never left out."""

    __tablename__ = "usage_rollup_dirty"

    hour: Mapped[datetime] = mapped_column(primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger, default=1)


# Console identity and the audit log live in their own module on the same Base (0011); imported
# here so that Base.metadata, and so Alembic, always sees the whole schema.
from llmrelay.store import models_access as models_access  # noqa: E402
from llmrelay.store import models_billing as models_billing  # noqa: E402
from llmrelay.store import models_codex as models_codex  # noqa: E402
from llmrelay.store import models_guardrails as models_guardrails  # noqa: E402
from llmrelay.store import models_jobs as models_jobs  # noqa: E402
from llmrelay.store import models_limits as models_limits  # noqa: E402
from llmrelay.store import models_passkeys as models_passkeys  # noqa: E402
from llmrelay.store import models_shared as models_shared  # noqa: E402
