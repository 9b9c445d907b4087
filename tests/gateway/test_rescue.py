"""What a mid-stream rescue may continue (gateway/rescue.py): the transcript of what the client
was sent, the refusals that keep two disagreeing answers from being spliced, and which
providers are asked to continue, with what."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import orjson
import pytest

from llmrelay.gateway.rescue_point import Transcript, can_continue, continuation_payload, refusal
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
    assert not can_continue(_provider("gemini"))


def test_the_prefill_is_the_final_assistant_message() -> None:
    payload = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    vllm = continuation_payload(payload, _provider("openai_compatible", "vllm"), "Hello")
    assert vllm["messages"][-1] == {"role": "assistant", "content": "Hello"}
    assert vllm["continue_final_message"] is True and vllm["add_generation_prompt"] is False
    claude = continuation_payload(payload, _provider("anthropic"), "Hello")
    assert claude["messages"][-1] == {"role": "assistant", "content": "Hello"}
    assert "continue_final_message" not in claude
    assert payload["messages"] == [{"role": "user", "content": "hi"}]  # the client's untouched
