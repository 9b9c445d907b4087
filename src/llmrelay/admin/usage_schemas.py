"""Response models of the usage routes (admin/usage.py): what usage_query.py returns, field
for field, so the OpenAPI document describes the bodies and FastAPI checks them. The queries
still build plain dicts (the hot path); the routes declare these as `response_model`, which
pydantic-core validates and serializes. Times are the queries' own ISO 8601 strings (`...Z`),
kept as strings so no value changes on the way out.

The figures and time-series points are TypedDicts, not models: a month of hourly points for
20 groups (14,400) validates in ~25 ms as dicts but ~150 ms as model instances (most of it
the garbage collector walking the new objects), against ~0 for the untyped dict it was. A
TypedDict also says exactly what a point holds: `group` and `group_id` are absent, not null,
when the series is not grouped by them."""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict  # pydantic needs it before Python 3.12

#: A UTC time as the queries write it: ISO 8601 with a `Z`.
Moment = Annotated[str, Field(json_schema_extra={"format": "date-time"})]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class UsageFigures(TypedDict):
    """Sums over the filtered records (docs/admin-api.md, "Usage")."""

    requests: int
    errors: Annotated[int, Field(description="records with status >= 400")]
    error_rate: Annotated[float, Field(description="errors / requests (0.0 without requests)")]
    input_tokens: Annotated[
        int, Field(description="every prompt token: uncached, cached and cache writes")
    ]
    cached_input_tokens: int
    cache_write_tokens: int
    output_tokens: Annotated[int, Field(description="reasoning tokens included")]
    reasoning_tokens: int
    cost_micros: Annotated[int, Field(description="exact cost in micro-USD")]
    cost_usd: Annotated[float, Field(description="cost_micros / 1e6, for display")]
    estimated_requests: Annotated[
        int, Field(description="records whose usage the gateway estimated")
    ]


class Percentiles(TypedDict):
    """Milliseconds, from the rollup histograms; null without requests."""

    p50: float | None
    p95: float | None


class _PointHead(TypedDict):
    start: Moment
    group: NotRequired[
        Annotated[str | None, Field(description="only with group_by: the group's value (name)")]
    ]
    group_id: NotRequired[
        Annotated[str | None, Field(description="only grouping by project or key: its id")]
    ]


class UsagePoint(_PointHead, UsageFigures):
    """One bucket (and group) of a time series: its start, its group, the summary's figures
    and the latency percentiles."""

    latency_ms: Percentiles
    ttfb_ms: Annotated[Percentiles, Field(description="time to the answer's first byte")]


class UsageSeries(_Body):
    bucket: Literal["hour", "day"]
    group_by: Literal["model", "provider", "resource", "project", "key"] | None
    data: list[UsagePoint]


class RequestRecordOut(_Body):
    """A request record: every column of request_records but its internal id
    (docs/metering.md)."""

    request_id: str
    created_at: Moment
    tenant_id: str | None
    project_id: str | None
    key_id: str | None
    endpoint: str
    virtual_model: str | None
    provider: str | None
    upstream_model: str | None
    stream: bool
    status_code: int
    error_code: str | None
    latency_ms: float
    ttfb_ms: float | None
    prompt_tokens: int | None
    completion_tokens: int | None
    attempts: int
    route_id: str | None
    policy_id: str | None
    cost_micros: int | None
    protocol: str | None
    input_tokens: int | None
    cached_input_tokens: int | None
    cache_write_tokens: int | None
    output_tokens: int | None
    reasoning_tokens: int | None
    usage_source: str = Field(description='"reported", "estimated" or "none"')
    input_cost_micros: int | None
    cached_input_cost_micros: int | None
    cache_write_cost_micros: int | None
    output_cost_micros: int | None
    price_version: str | None
    price_source: str | None
    client_ip: str | None
    user_agent: str | None
    resource_id: str | None = Field(
        default=None, description="the provider resource (account) that served; null: none"
    )


class RequestPage(_Body):
    data: list[RequestRecordOut]
    next_cursor: str | None = Field(description="the next page's cursor; null on the last")


class AttemptOut(_Body):
    """One upstream attempt of a request."""

    attempt: int
    created_at: Moment
    route_id: str | None
    provider: str | None
    resource_id: str | None = None
    upstream_model: str | None
    kind: str = Field(description='"first", "retry" or "fallback"')
    status_code: int | None = Field(description="the provider's status; null without one")
    outcome: str = Field(description='what went wrong ("ok" for the attempt that answered)')
    latency_ms: float
    input_tokens: int | None = Field(
        default=None, description="tokens in (null: the attempt produced no output)"
    )
    output_tokens: int | None = Field(default=None, description="tokens out")
    cost_micros: int | None = Field(
        default=None, description="what the attempt cost, in micro-USD, at its route's price"
    )


Encoding = Literal["utf-8", "base64"]


class PayloadOut(_Body):
    """A request's captured bodies: text when UTF-8, else base64."""

    request: str | None
    request_encoding: Encoding | None
    request_bytes: int | None
    request_truncated: bool
    response: str | None
    response_encoding: Encoding | None
    response_bytes: int | None
    response_truncated: bool


class RequestDetail(RequestRecordOut):
    attempt_log: list[AttemptOut] = Field(description="empty when the first attempt answered")
    payload: PayloadOut | None = Field(description="null unless the key captured the bodies")
