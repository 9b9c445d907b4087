"""What the guardrails API answers with (requests are the config schema's
GuardrailPolicyConfig)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from llmrelay.store.models_guardrails import GuardrailHit, GuardrailPolicy

#: The longest text the dry run screens.
MAX_TEST_CHARS = 100_000


class GuardrailOut(BaseModel):
    id: str
    tenant_id: str
    name: str
    description: str | None
    #: The rules as given (fields left at their defaults are left out).
    rules: list[dict[str, Any]]
    version: int
    created_at: datetime
    updated_at: datetime


class GuardrailPage(BaseModel):
    data: list[GuardrailOut]
    next_cursor: str | None


def guardrail_out(row: GuardrailPolicy) -> GuardrailOut:
    return GuardrailOut(
        id=row.id,
        tenant_id=row.tenant_id,
        name=row.name,
        description=row.description,
        rules=row.rules,
        version=row.version,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


class DryRun(BaseModel):
    #: The text to screen (never stored, never logged).
    text: str = Field(max_length=MAX_TEST_CHARS)
    #: Which of the policy's rules run: those of the request or of the answer.
    scope: Literal["request", "response"] = "request"


class SpanOut(BaseModel):
    rule: str
    #: What matched: a built-in kind (email, card...) or a custom rule's name.
    detector: str
    action: str
    #: Character offsets in the text sent, end excluded.
    start: int
    end: int


class DryRunOut(BaseModel):
    spans: list[SpanOut]
    #: The text as the mask and block rules would leave it.
    masked: str
    #: Whether a block rule matched (a request would be refused).
    blocked: bool


class HitOut(BaseModel):
    id: int
    request_id: str
    created_at: datetime
    tenant_id: str
    project_id: str
    key_id: str
    policy_id: str
    #: The policy's name when the hit happened.
    policy: str
    rule: str
    detector: str
    action: str
    #: request or response
    location: str
    field: str
    count: int
    #: Characters the matches covered (the text itself is never kept).
    matched_chars: int


class HitPage(BaseModel):
    data: list[HitOut]
    next_cursor: str | None


def hit_out(row: GuardrailHit) -> HitOut:
    return HitOut.model_validate(row, from_attributes=True)
