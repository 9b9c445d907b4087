"""Named `openai_compatible` providers: their usual base URL and what they lack.

`preset: deepseek` saves looking up a URL and tells the gateway what that server does not
speak: none of these serves OpenAI's Responses API, so `/v1/responses` reaches them through
chat. A preset's `base_url` is a default only; the config's own wins (a vLLM or Ollama server
somewhere other than localhost, DashScope's China region). Imports nothing of ours.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class Preset:
    base_url: str
    #: Serves POST /v1/responses (else the gateway translates Responses to chat).
    responses_api: bool
    #: Honours `stream_options.include_usage` (a usage chunk at the end of a stream).
    stream_usage: bool


PRESETS: Final[dict[str, Preset]] = {
    "deepseek": Preset("https://api.deepseek.com/v1", responses_api=False, stream_usage=True),
    # DashScope's compatible mode, international endpoint (China: dashscope.aliyuncs.com).
    "qwen": Preset(
        "https://dashscope-intl.aliyuncs.com/compatible-mode/v1",
        responses_api=False,
        stream_usage=True,
    ),
    "vllm": Preset("http://localhost:8000/v1", responses_api=False, stream_usage=True),
    "ollama": Preset("http://localhost:11434/v1", responses_api=False, stream_usage=True),
}


def speaks_responses(provider_type: str, preset: str | None) -> bool:
    """Whether a provider serves the Responses API itself: OpenAI and a ChatGPT Codex
    subscription (openai_codex) do; an OpenAI-compatible
    server only when its preset says so (unknown servers are assumed not to)."""
    if provider_type in ("openai", "openai_codex"):
        return True
    found = PRESETS.get(preset) if preset else None
    return found is not None and found.responses_api


def stores_responses(provider_type: str, preset: str | None) -> bool:
    """Whether a provider that serves the Responses API also keeps its responses (reads them
    back by id, continues them from `previous_response_id`). The ChatGPT Codex backend
    (openai_codex) stores nothing (`store` is always false there): the gateway keeps those
    responses itself, as it keeps the ones a chat-only provider answered."""
    return provider_type != "openai_codex" and speaks_responses(provider_type, preset)


def account_bound(provider_type: str) -> bool:
    """Whether a conversation sticks to the provider resource (account) that began it, not
    only to the route: a ChatGPT Codex subscription's session and prompt cache are the
    account's (routing/affinity.py). For other providers the route's accounts take turns
    as their strategy says, and a recovered account is tried again at once."""
    return provider_type == "openai_codex"


def reports_stream_usage(provider_type: str, preset: str | None) -> bool:
    """Whether a chat stream from this provider ends with a usage chunk when the gateway
    asks (`stream_options.include_usage`): OpenAI's API does; a preset says for its server;
    an unknown OpenAI-compatible server is assumed to (the option is part of the API); the
    anthropic and gemini translators and the built-in mock always write one."""
    if provider_type in ("anthropic", "gemini", "mock"):
        return True
    if provider_type not in ("openai", "openai_compatible"):
        return False
    found = PRESETS.get(preset) if preset else None
    return found is None or found.stream_usage
