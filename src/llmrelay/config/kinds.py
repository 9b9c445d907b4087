"""The kinds of provider and of routing strategy, alone: the snapshot's validation, on every
serving process, checks against them, and importing them from config/schema.py would build
the whole declarative config's Pydantic models (about 1 MiB of resident memory) in a
process that never reads a config file. schema.py re-exports them."""

from __future__ import annotations

from enum import StrEnum


class ProviderType(StrEnum):
    OPENAI = "openai"
    OPENAI_COMPATIBLE = "openai_compatible"
    AZURE_OPENAI = "azure_openai"
    ANTHROPIC = "anthropic"
    GEMINI = "gemini"
    #: A ChatGPT account's Codex subscription, signed in by OAuth (docs/codex.md).
    OPENAI_CODEX = "openai_codex"
    MOCK = "mock"


class Strategy(StrEnum):
    PRIORITY = "priority"
    FIXED = "fixed"
    WEIGHTED = "weighted"
    LEAST_TIME = "least_time"
    COST_FIRST = "cost_first"
    LOAD_BALANCE = "load_balance"
    TAG = "tag"
