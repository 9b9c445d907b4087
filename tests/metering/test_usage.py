"""Usage in billing buckets from each protocol's usage object. The inputs are the usage
objects the providers' documentation shows (OpenAI chat and Responses, Anthropic Messages
and its stream events, DeepSeek's cache split) and what the gateway's translators write."""

from __future__ import annotations

from llmrelay.metering.usage import Usage, from_chat, from_messages, from_responses
from llmrelay.protocols.chat_anthropic import chat_usage_from_anthropic
from llmrelay.protocols.gemini import chat_usage as chat_usage_from_gemini


def test_openai_chat_cached_tokens_are_a_subset_of_the_prompt() -> None:
    # https://platform.openai.com/docs/guides/prompt-caching (the usage of a cached request)
    usage = {
        "prompt_tokens": 2006,
        "completion_tokens": 300,
        "total_tokens": 2306,
        "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 128, "audio_tokens": 0},
    }
    taken = from_chat(usage)
    assert taken == Usage(input=86, output=300, cached_input=1920, reasoning=128)
    assert taken is not None and taken.prompt == 2006 and taken.total == 2306


def test_deepseek_reports_its_cache_as_hit_and_miss_tokens() -> None:
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "prompt_cache_hit_tokens": 64,
        "prompt_cache_miss_tokens": 36,
    }
    assert from_chat(usage) == Usage(input=36, output=20, cached_input=64)


def test_embeddings_usage_has_no_output() -> None:
    assert from_chat({"prompt_tokens": 8, "total_tokens": 8}) == Usage(input=8)


def test_no_token_counts_is_no_usage() -> None:
    assert from_chat(None) is None
    assert from_chat({"total_tokens": 5}) is None
    assert from_messages({}) is None
    assert from_responses("nope") is None


def test_a_cached_count_larger_than_the_prompt_is_clamped() -> None:
    usage = {
        "prompt_tokens": 10,
        "completion_tokens": 1,
        "prompt_tokens_details": {"cached_tokens": 50},
    }
    assert from_chat(usage) == Usage(input=0, output=1, cached_input=10)


def test_anthropic_input_tokens_exclude_cache_reads_and_writes() -> None:
    # https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching
    usage = {
        "input_tokens": 21,
        "cache_creation_input_tokens": 188086,
        "cache_read_input_tokens": 0,
        "output_tokens": 393,
    }
    assert from_messages(usage) == Usage(input=21, output=393, cache_write=188086)


def test_an_anthropic_stream_updates_message_start_with_message_delta() -> None:
    start = {"input_tokens": 25, "cache_read_input_tokens": 1000, "output_tokens": 1}
    taken = from_messages(start)
    taken = from_messages({"output_tokens": 15}, taken)
    assert taken == Usage(input=25, output=15, cached_input=1000)


def test_the_anthropic_translation_keeps_every_bucket() -> None:
    usage = {
        "input_tokens": 21,
        "cache_creation_input_tokens": 7,
        "cache_read_input_tokens": 100,
        "output_tokens": 9,
    }
    assert from_chat(chat_usage_from_anthropic(usage)) == from_messages(usage)


def test_gemini_thoughts_are_output_and_cached_content_is_cached_input() -> None:
    metadata = {
        "promptTokenCount": 120,
        "cachedContentTokenCount": 100,
        "candidatesTokenCount": 30,
        "thoughtsTokenCount": 12,
        "totalTokenCount": 162,
    }
    assert from_chat(chat_usage_from_gemini(metadata)) == Usage(
        input=20, output=42, cached_input=100, reasoning=12
    )


def test_responses_usage_nests_its_details() -> None:
    # https://platform.openai.com/docs/api-reference/responses/object (usage)
    usage = {
        "input_tokens": 328,
        "input_tokens_details": {"cached_tokens": 128},
        "output_tokens": 52,
        "output_tokens_details": {"reasoning_tokens": 20},
        "total_tokens": 380,
    }
    assert from_responses(usage) == Usage(input=200, output=52, cached_input=128, reasoning=20)
