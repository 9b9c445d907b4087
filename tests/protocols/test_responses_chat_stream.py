import copy
import json
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ParsedResponse, ResponseStreamEvent
from pydantic import TypeAdapter

from llmrelay.protocols.responses_chat import chat_response_to_responses
from llmrelay.protocols.responses_chat_stream import ChatStreamToResponses

FIXTURES = Path(__file__).parent / "fixtures" / "responses"
EVENTS: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)
Event = tuple[str, dict[str, Any]]


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def run(
    chunks: list[dict[str, Any]], request: dict[str, Any] | None = None, model: str = "virtual"
) -> list[Event]:
    translator = ChatStreamToResponses(model=model, request=request or {})
    events: list[Event] = []
    for chunk in chunks:
        events += translator.feed(chunk)
    return events + translator.finish()


def judged(events: list[Event], request: dict[str, Any] | None = None) -> ParsedResponse[Any]:
    """Each event parsed by the openai SDK's own types, then replayed through the state
    machine behind `client.responses.stream()`, which checks order and item identities."""
    state: ResponseStreamState[Any] = ResponseStreamState(
        input_tools=(request or {}).get("tools", omit), text_format=omit
    )
    done: set[int] = set()
    for number, (kind, data) in enumerate(events):
        assert data["type"] == kind
        assert data["sequence_number"] == number
        assert data.get("output_index") not in done, "an event about a finished item"
        if kind == "response.output_item.done":
            done.add(data["output_index"])
        state.handle_event(EVENTS.validate_python(data))
    response = state._completed_response
    assert response is not None
    return response


def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-s1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "upstream",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def usage_chunk(prompt: int = 10, completion: int = 5) -> dict[str, Any]:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    return {**chunk({}), "choices": [], "usage": {**usage, "total_tokens": prompt + completion}}


def call_delta(index: int, arguments: str, **start: str) -> dict[str, Any]:
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if start:
        call.update(id=start["id"], type="function")
        call["function"]["name"] = start["name"]
    return {"tool_calls": [call]}


def without_completed_at(events: list[Event]) -> list[list[Any]]:
    plain = []
    for kind, data in copy.deepcopy(events):
        if "response" in data:
            completed_at = data["response"].pop("completed_at")
            assert (completed_at is not None) == (kind == "response.completed")
        plain.append([kind, data])
    return plain


# --- golden streams


@pytest.mark.parametrize("name", ["stream_text.json", "stream_function_call.json"])
def test_documented_streams(name: str) -> None:
    fixture = load(name)
    events = run(fixture["chat_chunks"], fixture["request"], fixture["model"])
    assert without_completed_at(events) == fixture["events"]
    judged(events, fixture["request"])


def test_function_call_stream_ends_as_the_whole_answer_would() -> None:
    fixture = load("stream_function_call.json")
    response = judged(run(fixture["chat_chunks"], fixture["request"]), fixture["request"])
    assert response.output_text == "Let me check both cities."
    calls = [item for item in response.output if item.type == "function_call"]
    assert [(c.call_id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("call_a", "get_weather", {"location": "Paris"}),
        ("call_b", "get_weather", {"location": "Tokyo"}),
    ]
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (120, 40)
    assert response.usage.input_tokens_details.cached_tokens == 100


# --- event order and statuses


def test_completed_waits_for_finish_and_the_usage_that_follows_finish_reason() -> None:
    translator = ChatStreamToResponses(model="virtual", request={})
    events = translator.feed(chunk({"content": "Hi"}))
    events += translator.feed(chunk({}, "stop"))
    assert events[-1][0] == "response.output_item.done"
    assert translator.feed(usage_chunk(7, 3)) == []
    final = translator.finish()
    assert [kind for kind, _ in final] == ["response.completed"]
    assert final[0][1]["response"]["usage"]["total_tokens"] == 10
    assert translator.feed(chunk({"content": "late"})) == []
    assert translator.finish() == []
    judged(events + final)


@pytest.mark.parametrize(
    ("finish_reason", "reason"),
    [("length", "max_output_tokens"), ("content_filter", "content_filter")],
)
def test_cut_short_streams_end_incomplete(finish_reason: str, reason: str) -> None:
    events = run([chunk({"content": "Once upon"}), chunk({}, finish_reason), usage_chunk()])
    kind, data = events[-1]
    assert kind == "response.incomplete"
    assert data["response"]["status"] == "incomplete"
    assert data["response"]["incomplete_details"] == {"reason": reason}
    assert data["response"]["output"][0]["status"] == "incomplete"
    state = ResponseStreamState[Any](input_tools=omit, text_format=omit)
    for _, event in events:
        state.handle_event(EVENTS.validate_python(event))


def test_refusal_is_its_own_content_part() -> None:
    events = run([chunk({"refusal": "I can't"}), chunk({"refusal": " help."}), chunk({}, "stop")])
    kinds = [kind for kind, _ in events]
    assert "response.refusal.delta" in kinds and "response.refusal.done" in kinds
    response = judged(events)
    message = response.output[0]
    assert message.type == "message"
    assert message.content[0].type == "refusal"
    assert message.content[0].refusal == "I can't help."


def test_text_after_a_tool_call_opens_a_new_message() -> None:
    events = run(
        [
            chunk({"content": "A"}),
            chunk(call_delta(0, "{}", id="call_1", name="f")),
            chunk({"content": "B"}),
            chunk({}, "stop"),
        ]
    )
    response = judged(events)
    assert [item.type for item in response.output] == ["message", "function_call", "message"]
    assert response.output_text == "AB"
    output = events[-1][1]["response"]["output"]
    assert len({item["id"] for item in output}) == 3


def test_every_item_is_closed_before_the_next_opens() -> None:
    fixture = load("stream_function_call.json")
    open_items: set[int] = set()
    for kind, data in run(fixture["chat_chunks"]):
        if kind == "response.output_item.added":
            assert not open_items
            open_items.add(data["output_index"])
        elif kind == "response.output_item.done":
            open_items.remove(data["output_index"])
        elif "output_index" in data:
            assert data["output_index"] in open_items
    assert not open_items


def test_arguments_of_a_resumed_call_still_reach_the_final_response() -> None:
    events = run(
        [
            chunk(call_delta(0, '{"a":', id="call_1", name="f")),
            chunk(call_delta(1, "{}", id="call_2", name="g")),
            chunk(call_delta(0, "1}")),
            chunk({}, "tool_calls"),
        ]
    )
    completed = judged(events).output[0]
    assert completed.type == "function_call"
    assert completed.arguments == '{"a":1}'


# --- errors and empty streams


def test_an_error_mid_stream_fails_the_response() -> None:
    translator = ChatStreamToResponses(model="virtual", request={})
    events = translator.feed(chunk({"content": "Hal"}))
    events += translator.error("upstream connection reset")
    kind, data = events[-1]
    assert kind == "response.failed"
    response = data["response"]
    assert response["status"] == "failed"
    assert response["error"] == {"code": "server_error", "message": "upstream connection reset"}
    assert response["output"][0]["status"] == "incomplete"
    assert translator.finish() == []
    state = ResponseStreamState[Any](input_tools=omit, text_format=omit)
    for number, (_, event) in enumerate(events):
        assert event["sequence_number"] == number
        state.handle_event(EVENTS.validate_python(event))


def test_an_error_before_any_chunk_still_opens_the_response() -> None:
    events = ChatStreamToResponses(model="virtual", request={}).error("no upstream")
    assert [kind for kind, _ in events] == [
        "response.created",
        "response.in_progress",
        "response.failed",
    ]
    for _, event in events:
        EVENTS.validate_python(event)


def test_an_empty_stream_completes_with_no_output() -> None:
    events = ChatStreamToResponses(model="virtual", request={}).finish()
    assert [kind for kind, _ in events] == [
        "response.created",
        "response.in_progress",
        "response.completed",
    ]
    response = judged(events)
    assert response.output == [] and response.usage is None


# --- the openai client as the judge


def sse(events: list[Event]) -> bytes:
    return b"".join(
        f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode() for kind, data in events
    )


def client_for(events: list[Event]) -> tuple[openai.OpenAI, httpx2.Client]:
    def handler(request: httpx2.Request) -> httpx2.Response:
        headers = {"content-type": "text/event-stream"}
        return httpx2.Response(200, content=sse(events), headers=headers)

    http = httpx2.Client(transport=httpx2.MockTransport(handler))
    return openai.OpenAI(api_key="k", base_url="http://relay/v1", http_client=http), http


def test_the_openai_client_streams_it() -> None:
    fixture = load("stream_function_call.json")
    events = run(fixture["chat_chunks"], fixture["request"])
    client, http = client_for(events)
    with http:
        request = {k: v for k, v in fixture["request"].items() if k != "stream"}
        with client.responses.stream(**request) as stream:
            text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
            final = stream.get_final_response()
        raw = list(client.responses.create(**request, stream=True))
    assert text == "Let me check both cities."
    assert [item.type for item in final.output] == ["message", "function_call", "function_call"]
    assert [event.type for event in raw] == [kind for kind, _ in events]


# --- property: however the text and arguments are cut into chunks


def cuts(text: str) -> st.SearchStrategy[list[str]]:
    positions = st.lists(st.integers(0, len(text)), max_size=6).map(sorted)
    return positions.map(
        lambda p: [text[a:b] for a, b in zip([0, *p], [*p, len(text)], strict=True)]
    )


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(), text=st.text(max_size=40), arguments=st.lists(st.text(max_size=20), max_size=3)
)
def test_chunking_does_not_change_the_answer(
    data: st.DataObject, text: str, arguments: list[str]
) -> None:
    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": piece}) for piece in data.draw(cuts(text))]
    for index, argument in enumerate(arguments):
        pieces = data.draw(cuts(argument))
        chunks.append(chunk(call_delta(index, pieces[0], id=f"call_{index}", name=f"f{index}")))
        chunks += [chunk(call_delta(index, piece)) for piece in pieces[1:]]
    chunks += [chunk({}, "tool_calls" if arguments else "stop"), usage_chunk()]
    events = run(chunks)
    streamed = judged(events)
    assert streamed.output_text == text
    calls = [item for item in streamed.output if item.type == "function_call"]
    assert [(c.call_id, c.name, c.arguments) for c in calls] == [
        (f"call_{i}", f"f{i}", argument) for i, argument in enumerate(arguments)
    ]
    # The same answer, whole, translates to the same response.
    tool_calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": f"f{i}", "arguments": a}}
        for i, a in enumerate(arguments)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    whole = chat_response_to_responses(
        {
            "id": "chatcmpl-s1",
            "created": 1700000000,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
            "usage": usage_chunk()["usage"],
        },
        model="virtual",
        request={},
    )
    completed = copy.deepcopy(events[-1][1]["response"])
    for response in (whole, completed):
        response.pop("completed_at")
    assert completed == whole
