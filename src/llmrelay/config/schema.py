"""The YAML file's shape (see docs/configuration.md). Validation only; no database access."""

from __future__ import annotations

import ipaddress
import re
from datetime import UTC, datetime
from decimal import Decimal
from typing import Annotated, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from llmrelay import apikeys
from llmrelay.apikeys import MIN_KEY_LENGTH
from llmrelay.config.kinds import ProviderType as ProviderType  # (re-exported)
from llmrelay.config.kinds import Strategy as Strategy  # (re-exported)
from llmrelay.guardrails import custom as guardrail_patterns
from llmrelay.guardrails.detectors import CUSTOM as CUSTOM_DETECTORS
from llmrelay.guardrails.detectors import DETECTORS
from llmrelay.providers.presets import PRESETS

_SLUG = r"^[a-z0-9][a-z0-9._-]{0,63}$"
# Model names may not contain ":" because "MODEL:PROVIDER" pins a provider.
_MODEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9._/@+-]{0,199}$"
_NAME = r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,199}$"
_HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")
#: What may not be in a value sent upstream in a header (the API key goes into one too): a
#: line break would end the header and start another.
_HEADER_VALUE_FORBIDDEN = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
#: Headers the gateway sets itself or that belong to one hop; a provider may not override them.
RESERVED_UPSTREAM_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "proxy-authorization",
        "proxy-connection",
    }
)

Slug = Annotated[str, Field(pattern=_SLUG)]
ModelName = Annotated[str, Field(pattern=_MODEL_NAME)]
Name = Annotated[str, Field(pattern=_NAME)]
PositiveSeconds = Annotated[float, Field(gt=0, le=86_400)]
#: A route tag or a provider region: a free-form label.
Label = Annotated[str, Field(min_length=1, max_length=64)]
#: What the database's INTEGER columns hold (a larger number would fail on write).
INT32_MAX = 2**31 - 1
#: Per-minute and concurrency limits.
Limit = Annotated[int, Field(ge=1, le=INT32_MAX)]
#: USD per million tokens; stored as integer micro-USD.
PricePerMtok = Annotated[Decimal, Field(ge=0, le=1_000_000)]
#: A monthly budget in USD; stored as integer micro-USD.
BudgetUsd = Annotated[Decimal, Field(ge=0, le=1_000_000_000)]


DEFAULT_BASE_URLS = {
    ProviderType.OPENAI: "https://api.openai.com/v1",
    ProviderType.ANTHROPIC: "https://api.anthropic.com",
    ProviderType.GEMINI: "https://generativelanguage.googleapis.com",
    ProviderType.OPENAI_CODEX: "https://chatgpt.com/backend-api/codex",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ResourceConfig(_Strict):
    """One account or credential of a provider (docs/configuration.md, "Provider
    resources"): tried by `priority` (lower first), then by the route's strategy among those
    of one priority (`weight` for weighted ones); each has its own health and quota buckets."""

    name: Slug
    api_key: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    priority: Annotated[int, Field(ge=-INT32_MAX, le=INT32_MAX)] = 0
    weight: Annotated[float, Field(ge=0)] = 1.0
    disabled: bool = False
    #: Requests and tokens per minute this account may use (None: no bucket).
    rpm: Limit | None = None
    tpm: Limit | None = None

    @field_validator("api_key")
    @classmethod
    def _header_safe(cls, value: str | None) -> str | None:
        if value is not None and _HEADER_VALUE_FORBIDDEN.search(value):
            raise ValueError("may not hold a line break or other control character")
        return value

    @field_validator("headers")
    @classmethod
    def _header_names(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_headers(value)


def _check_headers(value: dict[str, str]) -> dict[str, str]:
    for name, header_value in value.items():
        if not _HEADER_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a valid header name")
        if name.lower() in RESERVED_UPSTREAM_HEADERS:
            raise ValueError(f"header {name!r} is set by the gateway and cannot be overridden")
        if _HEADER_VALUE_FORBIDDEN.search(header_value):
            raise ValueError(f"header {name!r} has a control character in its value")
    return value


#: Why a resource of an openai_codex provider takes no `api_key` (the YAML loader and the
#: admin API's resource routes say the same).
CODEX_RESOURCE_KEY_REFUSED = (
    "openai_codex resources take no api_key: each is a ChatGPT account signed in "
    "for it (`llmrelay codex login --resource NAME`, or the console's provider page)"
)


class ProviderConfig(_Strict):
    slug: Slug
    type: ProviderType
    base_url: str | None = None
    api_key: str | None = None
    timeout_s: PositiveSeconds | None = None
    connect_timeout_s: PositiveSeconds | None = None
    first_token_timeout_s: PositiveSeconds | None = None
    stream_idle_timeout_s: PositiveSeconds | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    api_version: str | None = None
    #: Where the provider serves from (for routing policies); a free-form label.
    region: Label | None = None
    #: A known OpenAI-compatible server (providers/presets.py): default base URL and flags.
    preset: Literal["deepseek", "qwen", "vllm", "ollama"] | None = None
    #: Several accounts of this provider (each its own credential, health and quotas).
    #: Left out: the provider's resources are left as they are (the admin API manages
    #: them); a list, even empty, is the whole set (apply adds, changes and removes).
    resources: list[ResourceConfig] | None = None

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"must be an http:// or https:// URL, got {value!r}")
        return value.rstrip("/")

    @field_validator("api_key", "api_version")
    @classmethod
    def _header_safe(cls, value: str | None) -> str | None:
        """Both travel upstream in a header (`Authorization`, `api-key`, a query string)."""
        if value is not None and _HEADER_VALUE_FORBIDDEN.search(value):
            raise ValueError("may not hold a line break or other control character")
        return value

    @field_validator("headers")
    @classmethod
    def _header_names(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_headers(value)

    @field_validator("resources")
    @classmethod
    def _unique_resources(cls, value: list[ResourceConfig] | None) -> list[ResourceConfig] | None:
        if value is not None:
            _unique_names([resource.name for resource in value])
        return value

    @model_validator(mode="after")
    def _type_rules(self) -> Self:
        if self.preset is not None and self.type is not ProviderType.OPENAI_COMPATIBLE:
            raise ValueError("preset is only for type openai_compatible")
        needs_url = (ProviderType.OPENAI_COMPATIBLE, ProviderType.AZURE_OPENAI)
        if self.type in needs_url and self.base_url is None and self.preset is None:
            raise ValueError(f"base_url is required for type {self.type.value}")
        if self.api_version is not None and self.type is not ProviderType.AZURE_OPENAI:
            raise ValueError("api_version is only for type azure_openai")
        if self.api_key is not None and self.type is ProviderType.OPENAI_CODEX:
            raise ValueError(
                "openai_codex providers take no api_key: sign a ChatGPT account in "
                "(`llmrelay codex login`, or the console's provider page)"
            )
        if self.type is ProviderType.OPENAI_CODEX and any(
            resource.api_key is not None for resource in self.resources or ()
        ):
            raise ValueError(CODEX_RESOURCE_KEY_REFUSED)
        return self

    @property
    def effective_base_url(self) -> str | None:
        if self.base_url is None and self.preset is not None:
            return PRESETS[self.preset].base_url
        return self.base_url or DEFAULT_BASE_URLS.get(self.type)


class CapabilitiesConfig(_Strict):
    """What a route's upstream model can do. A field left out is unknown, and an unknown
    capability never keeps a route from a request."""

    tools: bool | None = None
    images: bool | None = None
    json_schema: bool | None = None
    streaming: bool | None = None
    context_window: Annotated[int, Field(ge=1)] | None = None


class RoutePricingConfig(_Strict):
    """What one route costs, USD per million tokens, by bucket (strategy cost_first orders
    by it; the records of calls it answers are priced by it before the model's price)."""

    input_per_mtok: PricePerMtok | None = None
    output_per_mtok: PricePerMtok | None = None
    cached_input_per_mtok: PricePerMtok | None = None
    cache_write_per_mtok: PricePerMtok | None = None


class RouteConfig(_Strict):
    provider: Slug
    upstream_model: Annotated[str, Field(min_length=1, max_length=200)]
    priority: Annotated[int, Field(ge=-INT32_MAX, le=INT32_MAX)] = 0
    weight: Annotated[float, Field(ge=0)] = 1.0
    tag: Label | None = None
    disabled: bool = False
    capabilities: CapabilitiesConfig | None = None
    pricing: RoutePricingConfig | None = None


class RetryConfig(_Strict):
    attempts: Annotated[int, Field(ge=1, le=10)] = 1
    backoff_ms: Annotated[int, Field(ge=0, le=60_000)] = 200


class AffinityConfig(_Strict):
    """Sticky routing: a conversation stays on the route that served its first turn, so the
    provider's prompt cache stays warm (docs/api.md, "Sticky routing"). It acts only on a
    model with several routes; `ttl_s` is how long an idle conversation keeps its route."""

    enabled: bool = True
    ttl_s: Annotated[float, Field(gt=0, le=7 * 86_400)] = 3600.0


class PricingConfig(_Strict):
    """USD per million tokens, by bucket."""

    input_per_mtok: PricePerMtok | None = None
    output_per_mtok: PricePerMtok | None = None
    cached_input_per_mtok: PricePerMtok | None = None
    cache_write_per_mtok: PricePerMtok | None = None


class ModelConfig(_Strict):
    name: ModelName
    strategy: Strategy = Strategy.PRIORITY
    #: At least one, except where a draft is validated (a model whose last route was
    #: removed: validation context {"draft": True}; docs/configuration.md, "Model directory").
    routes: list[RouteConfig]
    retry: RetryConfig = Field(default_factory=RetryConfig)
    deadline_s: PositiveSeconds = 300.0
    fallbacks: list[ModelName] = Field(default_factory=list)
    context_fallbacks: list[ModelName] = Field(default_factory=list)
    pricing: PricingConfig | None = None
    embedding: bool = False
    affinity: AffinityConfig = Field(default_factory=AffinityConfig)
    #: Mid-stream rescue: a chat stream that breaks or stalls after its content began is
    #: continued from another route that can take the text sent as a prefill (docs/api.md,
    #: "Mid-stream rescue"). Off by default: the relay then keeps no copy of the text.
    stream_rescue: bool = False

    @field_validator("routes")
    @classmethod
    def _some_route(cls, value: list[RouteConfig], info: ValidationInfo) -> list[RouteConfig]:
        if not value and not (info.context or {}).get("draft"):
            raise ValueError("List should have at least 1 item after validation, not 0")
        return value

    @model_validator(mode="after")
    def _no_self_fallback(self) -> Self:
        if self.name in self.fallbacks or self.name in self.context_fallbacks:
            raise ValueError(f"model {self.name!r} cannot fall back to itself")
        return self


class LimitsConfig(_Strict):
    rpm: Limit | None = None
    tpm: Limit | None = None
    concurrency: Limit | None = None


def _check_cidr(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value.strip(), strict=False))
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address or CIDR block") from None


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


#: Payload capture: "off" keeps no bodies; "full" keeps request and response bodies.
Capture = Literal["off", "full"]


def _capture_word(value: object) -> object:
    """YAML 1.1 reads a bare `off` as false: that is what the operator wrote, so it means
    "off". A bare `on`/`true` is not a mode; it is refused with the usual message."""
    return "off" if value is False else value


def _unique_names(values: list[str]) -> list[str]:
    seen = set()
    for value in values:
        if value in seen:
            raise ValueError(f"{value!r} is listed twice")
        seen.add(value)
    return values


#: Guardrail policies bound to a project or key, by name, in the order given.
GuardrailNames = Annotated[list[Name], Field(max_length=20)]


class KeyConfig(_Strict):
    name: Name
    key: Annotated[str, Field(min_length=MIN_KEY_LENGTH, max_length=200)] | None = None
    models: list[ModelName] | None = None
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    monthly_budget_usd: BudgetUsd | None = None
    ip_allowlist: list[str] = Field(default_factory=list)
    #: The APIs the key may call (apikeys.SCOPES); left out or null: every API.
    scopes: list[apikeys.Scope] | None = None
    expires_at: datetime | None = None
    disabled: bool = False
    routing_policy: Name | None = None
    #: Left out: the project's `capture`, else "off".
    capture: Capture | None = None
    #: Guardrail policies bound to the key (they override the project's and the global
    #: ones rule by rule: docs/guardrails.md).
    guardrails: GuardrailNames = Field(default_factory=list)

    _capture = field_validator("capture", mode="before")(_capture_word)
    _guardrails = field_validator("guardrails")(_unique_names)

    @field_validator("key")
    @classmethod
    def _no_whitespace(cls, value: str | None) -> str | None:
        if value is not None and (value != value.strip() or any(c.isspace() for c in value)):
            raise ValueError("a key may not contain whitespace")
        return value

    @field_validator("ip_allowlist")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        return [_check_cidr(v) for v in value]

    @field_validator("scopes")
    @classmethod
    def _scopes(cls, value: list[apikeys.Scope] | None) -> list[apikeys.Scope] | None:
        """At least one (an empty list would be a key that can call nothing, easily mistaken
        for "no restriction"), each once, in the canonical order (so applying twice agrees)."""
        if value is None:
            return None
        if not value:
            raise ValueError("give at least one API, or leave scopes out (null) for every API")
        return sorted(set(value), key=apikeys.SCOPES.index)

    @field_validator("expires_at")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        return None if value is None else _utc(value)


class ProjectConfig(_Strict):
    name: Name
    models: list[ModelName] | None = None
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    monthly_budget_usd: BudgetUsd | None = None
    keys: list[KeyConfig] = Field(default_factory=list)
    routing_policy: Name | None = None
    #: The `capture` of the keys listed here that set none of their own.
    capture: Capture | None = None
    #: Guardrail policies bound to the project (over the global ones, under the key's).
    guardrails: GuardrailNames = Field(default_factory=list)

    _capture = field_validator("capture", mode="before")(_capture_word)
    _guardrails = field_validator("guardrails")(_unique_names)


#: The longest breaker cooldown when the config names none: a route that came back is
#: tried again within this long (docs/api.md, "Circuit breakers").
DEFAULT_MAX_COOLDOWN_S = 30.0


class BreakerConfig(_Strict):
    failures: Annotated[int, Field(ge=1, le=1000)] = 3
    cooldown_s: PositiveSeconds = 10.0
    max_cooldown_s: PositiveSeconds = DEFAULT_MAX_COOLDOWN_S

    @model_validator(mode="before")
    @classmethod
    def _default_max(cls, data: object) -> object:
        """No `max_cooldown_s`: the default, or `cooldown_s` when that is longer (a config
        valid before the default came down from 60 s stays valid)."""
        if isinstance(data, dict) and data.get("max_cooldown_s") is None:
            cooldown = data.get("cooldown_s")
            if isinstance(cooldown, int | float) and cooldown > DEFAULT_MAX_COOLDOWN_S:
                data = {**data, "max_cooldown_s": cooldown}
        return data

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.max_cooldown_s < self.cooldown_s:
            raise ValueError("max_cooldown_s must be at least cooldown_s")
        return self


class PolicyConfig(_Strict):
    """A routing policy: allowlists a route must pass (each list set must contain the
    route's value) and an optional strategy that replaces the model's."""

    name: Name
    providers: list[Slug] | None = None
    tags: list[Label] | None = None
    regions: list[Label] | None = None
    strategy: Strategy | None = None


class RoutingConfig(_Strict):
    breaker: BreakerConfig = Field(default_factory=BreakerConfig)
    policies: list[PolicyConfig] = Field(default_factory=list)
    #: The global binding: the policy of every key whose key and project name none.
    policy: Name | None = None


#: A guardrail rule's name (what a more specific binding overrides it by).
RuleName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")]
_PRINTABLE = re.compile(r"[^\x00-\x1f\x7f]*")


class GuardrailRuleConfig(_Strict):
    """One detector with one action (guardrails/policy.py)."""

    #: A built-in detector (email, phone, card, iban, a credential format), a family (pii,
    #: secrets), or the operator's own: regex, words.
    detector: str
    #: Defaults to the detector's name; required for regex and words.
    name: RuleName | None = None
    action: Literal["audit", "mask", "block", "off"]
    #: Where it looks: the request's text, the non-streamed answer's, or both.
    scope: Literal["request", "response", "both"] = "request"
    #: What a masked match becomes; default `[DETECTOR]` (`[EMAIL]`, `[TICKET]`...).
    placeholder: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    #: regex: the pattern (RE2 syntax: linear time, no backreferences or lookaround).
    pattern: str | None = None
    #: regex: whether case matters (default: it does not).
    case_sensitive: bool = False
    #: words: matched whole, in any case (Unicode-aware).
    words: list[str] | None = None

    @field_validator("detector")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in DETECTORS:
            raise ValueError(f"unknown detector {value!r} (one of: {', '.join(DETECTORS)})")
        return value

    @field_validator("placeholder")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        if value is not None and not _PRINTABLE.fullmatch(value):
            raise ValueError("a placeholder may not hold control characters")
        return value

    @model_validator(mode="after")
    def _detector_fields(self) -> Self:
        custom = self.detector in CUSTOM_DETECTORS
        if custom and self.name is None:
            raise ValueError(f"a {self.detector} rule needs a name")
        if self.detector != "regex" and (self.pattern is not None or self.case_sensitive):
            raise ValueError("pattern and case_sensitive are for regex rules only")
        if self.detector != "words" and self.words is not None:
            raise ValueError("words are for words rules only")
        try:
            if self.detector == "regex":
                if self.pattern is None:
                    raise ValueError("a regex rule needs a pattern")
                guardrail_patterns.compile_pattern(self.pattern, case_sensitive=self.case_sensitive)
            elif self.detector == "words":
                guardrail_patterns.check_words(self.words or [])
        except guardrail_patterns.PatternError as exc:
            field = "pattern" if self.detector == "regex" else "words"
            raise ValueError(f"{field}: {exc}") from None
        return self

    @property
    def rule_name(self) -> str:
        return self.name or self.detector


class GuardrailPolicyConfig(_Strict):
    name: Name
    description: Annotated[str, Field(max_length=500)] | None = None
    rules: Annotated[list[GuardrailRuleConfig], Field(min_length=1, max_length=100)]

    @model_validator(mode="after")
    def _one_rule_per_name(self) -> Self:
        _unique_names([rule.rule_name for rule in self.rules])
        return self


class GuardrailsConfig(_Strict):
    policies: list[GuardrailPolicyConfig] = Field(default_factory=list)
    #: The global binding: policies in force for every key (of every tenant); left out of a
    #: `guardrails` section, none.
    global_policies: GuardrailNames = Field(default_factory=list, alias="global")

    _global = field_validator("global_policies")(_unique_names)


class GatewayConfig(_Strict):
    providers: list[ProviderConfig] = Field(default_factory=list)
    models: list[ModelConfig] = Field(default_factory=list)
    projects: list[ProjectConfig] = Field(default_factory=list)
    routing: RoutingConfig | None = None
    guardrails: GuardrailsConfig | None = None
