"""Token usage in billing buckets, from each protocol's usage object.

The buckets are mutually exclusive, so a cost is a plain sum over them:

- `input`: prompt tokens read at the full price (not from a cache, not written to one);
- `cached_input`: prompt tokens read from the provider's prompt cache;
- `cache_write`: prompt tokens written to the cache (Anthropic bills them apart);
- `output`: generated tokens, reasoning included;
- `reasoning`: the part of `output` spent on reasoning (reported, never billed twice).

Providers report them differently: OpenAI's `prompt_tokens` *includes* its cached tokens
(`prompt_tokens_details.cached_tokens`), DeepSeek splits the prompt into
`prompt_cache_hit_tokens` / `prompt_cache_miss_tokens`, Anthropic's `input_tokens` *excludes*
cache reads and writes, and OpenAI's Responses API nests the details under `input_tokens_details`.
Each reader below turns its protocol's object into the buckets; a cached count larger than the
prompt (a provider bug) is clamped so no bucket goes negative.
"""

from __future__ import annotations

from typing import Any, Final


class Usage:
    __slots__ = ("cache_write", "cached_input", "input", "output", "reasoning")

    def __init__(
        self,
        input: int = 0,
        output: int = 0,
        cached_input: int = 0,
        cache_write: int = 0,
        reasoning: int = 0,
    ) -> None:
        self.input = input
        self.output = output
        self.cached_input = cached_input
        self.cache_write = cache_write
        self.reasoning = reasoning

    @property
    def prompt(self) -> int:
        """Every prompt token, cached or not (what OpenAI calls `prompt_tokens`)."""
        return self.input + self.cached_input + self.cache_write

    @property
    def total(self) -> int:
        return self.input + self.cached_input + self.cache_write + self.output

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input,
            "cached_input_tokens": self.cached_input,
            "cache_write_tokens": self.cache_write,
            "output_tokens": self.output,
            "reasoning_tokens": self.reasoning,
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Usage) and self.as_dict() == other.as_dict()

    def __repr__(self) -> str:
        return f"Usage({self.as_dict()})"


def plus(one: Usage, other: Usage) -> Usage:
    """Two usages summed bucket by bucket."""
    return Usage(
        one.input + other.input,
        one.output + other.output,
        one.cached_input + other.cached_input,
        one.cache_write + other.cache_write,
        one.reasoning + other.reasoning,
    )


def minus(whole: Usage, part: Usage) -> Usage:
    """What of `whole` is not `part` (never below zero in a bucket)."""
    return Usage(
        max(whole.input - part.input, 0),
        max(whole.output - part.output, 0),
        max(whole.cached_input - part.cached_input, 0),
        max(whole.cache_write - part.cache_write, 0),
        max(whole.reasoning - part.reasoning, 0),
    )


def _int(value: Any) -> int:
    return value if type(value) is int and value > 0 else 0


def _split_prompt(prompt: int, cached: int, written: int) -> tuple[int, int, int]:
    """(input, cached, written) from a prompt total that includes the other two."""
    cached = min(cached, prompt)
    written = min(written, prompt - cached)
    return prompt - cached - written, cached, written


#: Chat usage fields that split the prompt or the output into buckets.
_DETAILED: Final = frozenset(
    {
        "prompt_tokens_details",
        "completion_tokens_details",
        "prompt_cache_hit_tokens",
        "cache_creation_input_tokens",
    }
)


def from_chat(usage: Any) -> Usage | None:
    """OpenAI Chat Completions (and Embeddings) usage; also what the gateway's translators
    write for Anthropic and Gemini providers (`cache_creation_input_tokens` kept beside the
    OpenAI fields). None when the object carries no token counts."""
    if type(usage) is not dict:
        return None
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens")
    if type(prompt) is not int and type(completion) is not int:
        return None
    if type(prompt) is int and type(completion) is int and not _DETAILED.intersection(usage):
        # prompt and completion only (vLLM, Ollama, the mock): nothing to split
        return Usage(max(prompt, 0), max(completion, 0))
    cached = 0
    details = usage.get("prompt_tokens_details")
    if type(details) is dict:
        cached = _int(details.get("cached_tokens"))
    if not cached:
        cached = _int(usage.get("prompt_cache_hit_tokens"))  # DeepSeek
    written = _int(usage.get("cache_creation_input_tokens"))
    reasoning = 0
    output_details = usage.get("completion_tokens_details")
    if type(output_details) is dict:
        reasoning = _int(output_details.get("reasoning_tokens"))
    uncached, cached, written = _split_prompt(_int(prompt), cached, written)
    output = _int(completion)
    return Usage(uncached, output, cached, written, min(reasoning, output))


def from_messages(usage: Any, into: Usage | None = None) -> Usage | None:
    """Anthropic Messages usage: `input_tokens` excludes the cache reads and writes.
    Streams report it twice (message_start, then cumulative counts in message_delta):
    pass the first result as `into` and the fields present update it."""
    if type(usage) is not dict:
        return into
    fields = ("input_tokens", "output_tokens", "cache_read_input_tokens")
    if not any(type(usage.get(name)) is int for name in (*fields, "cache_creation_input_tokens")):
        return into
    result = into if into is not None else Usage()
    if type(usage.get("input_tokens")) is int:
        result.input = _int(usage["input_tokens"])
    if type(usage.get("output_tokens")) is int:
        result.output = _int(usage["output_tokens"])
    if type(usage.get("cache_read_input_tokens")) is int:
        result.cached_input = _int(usage["cache_read_input_tokens"])
    if type(usage.get("cache_creation_input_tokens")) is int:
        result.cache_write = _int(usage["cache_creation_input_tokens"])
    return result


def from_responses(usage: Any) -> Usage | None:
    """OpenAI Responses usage: `input_tokens` includes `input_tokens_details.cached_tokens`,
    `output_tokens` includes `output_tokens_details.reasoning_tokens`."""
    if type(usage) is not dict:
        return None
    prompt = usage.get("input_tokens")
    completion = usage.get("output_tokens")
    if type(prompt) is not int and type(completion) is not int:
        return None
    details = usage.get("input_tokens_details")
    cached = written = 0
    if type(details) is dict:
        cached = _int(details.get("cached_tokens"))
        written = _int(details.get("cache_write_tokens"))  # the gateway's, from Anthropic
    output_details = usage.get("output_tokens_details")
    reasoning = _int(output_details.get("reasoning_tokens")) if type(output_details) is dict else 0
    uncached, cached, written = _split_prompt(_int(prompt), cached, written)
    output = _int(completion)
    return Usage(uncached, output, cached, written, min(reasoning, output))
