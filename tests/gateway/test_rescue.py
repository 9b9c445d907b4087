"""What a mid-stream rescue may continue (gateway/rescue.py): the transcript of what the client
was sent, the refusals that keep two disagreeing answers from being spliced, which
providers are asked to continue, with what, and how a rescued record is billed."""

from __future__ import annotations

import time
from types import MappingProxyType
from typing import Any

import orjson
import pytest

from llmrelay.gateway.call import ATTEMPT_COLUMNS, RECORD_COLUMNS, CallRecord
from llmrelay.gateway.rescue_point import (
    Overlap,
    Transcript,
    can_continue,
    continuation_payload,
    cut,
    refusal,
)
from llmrelay.metering.cost import Price
from llmrelay.metering.usage import Usage
from llmrelay.providers.errors import UpstreamProtocolError
from llmrelay.snapshot.model import ProviderSnap


def _provider(kind: str, preset: str | None = None) -> ProviderSnap:
    return ProviderSnap(
        "p", "p", kind, "http://x/v1", None, MappingProxyType({}), 5, 5, 5, 5, None, preset=preset
    )


def _sent(*deltas: dict[str, Any], **choice: Any) -> Transcript:
    transcript = Transcript()
    for delta in deltas:
        event = {
            "id": "c1",
            "created": 7,
            "choices": [{"index": 0, "delta": delta, "finish_reason": None, **choice}],
        }
        transcript.feed(b"data: " + orjson.dumps(event) + b"\n\n")
    return transcript


def test_plain_text_is_continued_from_exactly_what_was_sent() -> None:
    transcript = _sent({"role": "assistant", "content": ""}, {"content": "Hel"}, {"content": "lo "})
    assert transcript.text == "Hello " and transcript.texts == 2
    assert (transcript.id, transcript.created) == ("c1", 7)
    assert refusal(transcript, 1, 0) is None


@pytest.mark.parametrize(
    "delta",
    [
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"q'}}]},
        {"refusal": "I can"},
        {"reasoning_content": "First,"},
    ],
)
def test_anything_but_text_cannot_be_verified_and_is_refused(delta: dict[str, Any]) -> None:
    transcript = _sent({"content": "Sure"}, delta)
    assert refusal(transcript, 1, 0) == "not plain text: the continuation point cannot be verified"


def test_log_probabilities_several_choices_a_finish_or_no_text_are_refused() -> None:
    assert refusal(_sent({"content": "a"}, logprobs={"content": []}), 1, 0) is not None
    assert refusal(_sent({"content": "a"}), 2, 0) == "several choices"
    assert refusal(_sent({"content": "a"}), 1, 2) == "rescued too often"
    assert refusal(_sent({"role": "assistant", "content": ""}), 1, 0) == "no text yet"
    finished = _sent({"content": "a"}, {}, finish_reason="stop")
    assert refusal(finished, 1, 0) == "the answer had finished"


def test_only_providers_that_continue_a_final_assistant_message_are_asked() -> None:
    assert can_continue(_provider("anthropic"))
    assert can_continue(_provider("openai_compatible", "vllm"))
    assert not can_continue(_provider("openai_compatible"))
    assert not can_continue(_provider("openai_compatible", "ollama"))
    assert not can_continue(_provider("openai"))
    assert can_continue(_provider("gemini"))  # checked: see the next tests


def test_the_prefill_is_the_final_assistant_message() -> None:
    payload = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    vllm = continuation_payload(payload, _provider("openai_compatible", "vllm"), "Hello")
    assert vllm["messages"][-1] == {"role": "assistant", "content": "Hello"}
    assert vllm["continue_final_message"] is True and vllm["add_generation_prompt"] is False
    claude = continuation_payload(payload, _provider("anthropic"), "Hello")
    assert claude["messages"][-1] == {"role": "assistant", "content": "Hello"}
    assert "continue_final_message" not in claude
    assert payload["messages"] == [{"role": "user", "content": "hi"}]  # the client's untouched


def test_a_prefill_drops_trailing_space_and_gemini_is_given_all_but_the_last_word() -> None:
    assert cut("one two three ", _provider("anthropic")) == ("one two three", " ", False)
    assert cut("one two three", _provider("gemini")) == ("one two", " three", True)
    assert cut("one two\nthree ", _provider("gemini")) == ("one two", "\nthree ", True)
    assert cut("one ", _provider("gemini")) is None  # nothing to check a continuation by


def test_a_checked_continuation_must_say_the_last_word_again_before_anything_passes() -> None:
    overlap = Overlap(" three", True)
    assert overlap.take(" th") == ""
    assert overlap.take("ree four") == " four"
    assert overlap.take(" five") == " five"
    overlap.finish()
    with pytest.raises(UpstreamProtocolError):
        Overlap(" three", True).take("Sure! one")  # a new answer, not a continuation
    short = Overlap(" three", True)
    assert short.take(" thr") == ""
    with pytest.raises(UpstreamProtocolError):
        short.finish()
    lenient = Overlap(" ", False)
    assert lenient.take("\nfour") == "\nfour"
    assert lenient.take(" five") == " five"


def test_a_rescued_record_bills_each_part_at_its_own_routes_price() -> None:
    record = CallRecord("req-1", "chat.completions", time.perf_counter())
    record.stream = True
    record.attempts, record.route_id, record.provider = 1, "r1", "first"
    record.price = Price("v1", input=1_000_000, output=2_000_000)  # 1 and 2 micro-USD a token
    record.log_part("stream", 200, "stream_interrupted", 5.0, Usage(input=10, output=3))
    record.attempts, record.route_id, record.provider = 2, "r2", "second"
    record.price = Price("v2", input=3_000_000, output=4_000_000)
    record.log_attempt("fallback", 200, "ok", 1.0)
    record.usage = Usage(input=10 + 12, output=3 + 5)  # the continuation's end: every part's
    row = record.row(9.0)
    assert row[RECORD_COLUMNS.index("cost_micros")] == (10 + 2 * 3) + (3 * 12 + 4 * 5)
    assert row[RECORD_COLUMNS.index("output_tokens")] == 8
    assert record.attempt_log is not None
    costs = [dict(zip(ATTEMPT_COLUMNS, a, strict=True)) for a in record.attempt_log]
    assert [(a["input_tokens"], a["output_tokens"], a["cost_micros"]) for a in costs] == [
        (10, 3, 16),
        (12, 5, 56),
    ]


def test_an_attempt_that_failed_before_any_output_costs_nothing() -> None:
    record = CallRecord("req-2", "chat.completions", time.perf_counter())
    record.attempts = 1
    record.log_attempt("first", 503, "upstream_error", 2.0)
    record.attempts = 2
    record.price = Price("v1", input=1_000_000, output=1_000_000)
    record.log_attempt("fallback", 200, "ok", 1.0)
    record.usage = Usage(input=4, output=2)
    record.row(3.0)
    assert record.attempt_log is not None
    assert [a[10:13] for a in record.attempt_log] == [(None, None, None), (4, 2, 6)]
