"""/v1/generate's request and answer shapes: what is refused (naming the field), the chat
request it becomes, and the parts read back from any provider's chat answer."""

from __future__ import annotations

from typing import Any

import pytest

from llmrelay.gateway.errors import InvalidRequest
from llmrelay.protocols.generation import (
    chat_request,
    check_generate,
    completion_parts,
    generation_body,
)


@pytest.mark.parametrize(
    ("payload", "param"),
    [
        ({"prompt": "x"}, "model"),
        ({"model": "", "prompt": "x"}, "model"),
        ({"model": "m"}, "messages"),
        ({"model": "m", "prompt": "x", "messages": []}, "prompt"),
        ({"model": "m", "prompt": ""}, "prompt"),
        ({"model": "m", "messages": "hi"}, "messages"),
        ({"model": "m", "messages": [{"role": "user"}]}, "messages[0].content"),
        ({"model": "m", "messages": ["hi"]}, "messages[0]"),
        ({"model": "m", "prompt": "x", "system": 1}, "system"),
        ({"model": "m", "prompt": "x", "max_tokens": True}, "max_tokens"),
        ({"model": "m", "prompt": "x", "temperature": float("nan")}, "temperature"),
        ({"model": "m", "prompt": "x", "metadata": [1]}, "metadata"),
        ({"model": "m", "prompt": "x", "metadata": {str(n): "v" for n in range(17)}}, "metadata"),
        ({"model": "m", "prompt": "x", "metadata": {"k": "v" * 513}}, "metadata.k"),
        ({"model": "m", "prompt": "x", "webhook_url": 5}, "webhook_url"),
        ({"model": "m", "prompt": "x", "tools": []}, "tools"),
    ],
)
def test_refused_naming_the_field(payload: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        check_generate(payload)
    assert refused.value.param == param


def test_the_chat_request_it_becomes() -> None:
    payload = {
        "model": "m:up",
        "prompt": "hello",
        "system": "be brief",
        "max_tokens": 5,
        "temperature": 0,
        "metadata": {"a": "b"},
        "webhook_url": "https://example.com/hook",
    }
    check_generate(payload)
    assert chat_request(payload) == {
        "model": "m:up",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hello"},
        ],
        "max_tokens": 5,
        "temperature": 0,
    }
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert chat_request({"model": "m", "messages": messages}) == {
        "model": "m",
        "messages": messages,
    }


def test_the_parts_of_any_chat_answer() -> None:
    def answer(message: Any, finish: Any = "stop") -> dict[str, Any]:
        return {"choices": [{"message": message, "finish_reason": finish}]}

    assert completion_parts(answer({"content": "hi"})) == ("hi", "stop")
    assert completion_parts(answer({"content": None, "refusal": "no"}, "stop")) == ("no", "stop")
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert completion_parts(answer({"content": parts}, "length")) == ("ab", "length")
    assert completion_parts({"choices": []}) == ("", None)
    assert completion_parts({}) == ("", None)


def test_the_one_answer_shape() -> None:
    body = generation_body(
        generation_id="req_1",
        request_id="req_1",
        created=1,
        model="m",
        provider="up",
        content="x",
        finish_reason="stop",
        input_tokens=3,
        output_tokens=4,
        latency_ms=12.6,
        metadata=None,
    )
    assert body["usage"] == {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}
    assert (body["latency_ms"], body["metadata"], body["status"]) == (13, {}, "completed")
    unknown = generation_body(
        generation_id="g",
        request_id="r",
        created=1,
        model="m",
        provider=None,
        content="",
        finish_reason=None,
        input_tokens=None,
        output_tokens=None,
        latency_ms=0,
        metadata={},
    )
    assert unknown["usage"]["total_tokens"] is None
